"""`kvscope eval longbench --score-only` against LongBench's own scoring rules, pair by pair.

The reference is LongBench v1's metrics.py (THUDM/LongBench, LongBench/metrics.py): qa_f1, rouge_l,
classification, retrieval, count and code_sim, on its 0-1 scale. ROUGE-L and the code similarity come from
the real PyPI packages LongBench imports (`rouge`, `fuzzywuzzy`, pinned in scripts/requirements.txt); the
other four are restated below from LongBench's code, quirks included, and pinned by hand-checked examples.
Several hundred seeded cases per metric (the hard ones too: empty and punctuation-only strings, articles,
accents, CJK, emoji, odd whitespace, several sentences, comment lines, leading zeros, Unicode digits, classes
inside classes) go to the binary in chunks; every score must be within 1e-9 of the reference.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits 77 (skipped)
without the binary or the packages. `--dump DIR` also writes each metric's cases and reference scores to
DIR/<metric>.json, to debug an implementation without this script.
"""
import difflib
import json
import os
import random
import re
import string
import subprocess
import sys
import warnings
from collections import Counter

from checks import FAILURES, check, passed

BINARY = os.environ.get("KVSCOPE_BINARY") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "app", "kvscope"))
SEED = 1729
CASES_PER_METRIC = 500
TOLERANCE = 1e-9
CHUNK_PAIRS = 200
CHUNK_BYTES = 100_000  # one argv string may hold 128 KiB on Linux
METRICS = ["qa_f1", "rouge_l", "classification", "retrieval", "count", "code_sim"]

try:
    from rouge import Rouge
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Using slow pure-python SequenceMatcher": that is the point, see below
        from fuzzywuzzy import fuzz as fw_fuzz
    from rapidfuzz import fuzz as rf_fuzz
    from rapidfuzz.distance import Indel
except ImportError as e:
    print(f"SKIP: a reference package is missing ({e}); run scripts/setup_deps.sh (scripts/requirements.txt)")
    sys.exit(77)

# fuzzywuzzy scores with python-Levenshtein when that is installed, else with difflib.SequenceMatcher.
# LongBench's requirements.txt installs plain `fuzzywuzzy` (no python-Levenshtein, no [speedup] extra), so
# LongBench's numbers are difflib's: Ratcliff-Obershelp matching blocks with autojunk, not the LCS that
# Levenshtein/rapidfuzz count. scripts/requirements.txt leaves python-Levenshtein out; should it appear
# anyway, the line below keeps the reference on difflib.
FUZZ_BACKEND = "difflib" if fw_fuzz.SequenceMatcher is difflib.SequenceMatcher else "python-Levenshtein (replaced)"
fw_fuzz.SequenceMatcher = difflib.SequenceMatcher


# ---------------------------------------------------------------------------------------------------------
# The reference: LongBench's per-pair metric functions, restated.
# ---------------------------------------------------------------------------------------------------------
ARTICLE_WORD = re.compile(r"\b(a|an|the)\b")  # Python's \b: Unicode word characters (letters, digits, _)
ASCII_PUNCT = frozenset(string.punctuation)
DIGITS = re.compile(r"\d+")  # Python's \d: any Unicode decimal digit (Nd), not only 0-9
PARAGRAPH_ID = re.compile(r"Paragraph (\d+)")


def normalize_answer(s):
    """SQuAD's normalisation as LongBench applies it: lower-case, drop ASCII punctuation, blank out the whole
    words a/an/the, collapse runs of (Unicode) whitespace to one space."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in ASCII_PUNCT)
    s = ARTICLE_WORD.sub(" ", s)
    return " ".join(s.split())


def ref_qa_f1(prediction, ground_truth):
    pred = normalize_answer(prediction).split()
    gold = normalize_answer(ground_truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision = 1.0 * same / len(pred)
    recall = 1.0 * same / len(gold)
    return (2 * precision * recall) / (precision + recall)


# LongBench's eval.py calls rouge_score at stack depth 3 (module, scorer, rouge_score), and rouge's LCS
# backtracking recurses once per step: past Python's default limit of 1000 frames it raises RecursionError,
# which rouge_score's bare `except` turns into 0.0. That happens for real inputs (a degenerate generation
# of ~1000 words with no '.'), so the reference reproduces LongBench's stack depth exactly.
LONGBENCH_ROUGE_DEPTH = 3
PYTHON_DEFAULT_RECURSION_LIMIT = 1000


def _stack_depth():
    frame, depth = sys._getframe(1), 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def ref_rouge_l(prediction, ground_truth):
    here = _stack_depth()  # the depth of this frame, the counterpart of LongBench's rouge_score
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHON_DEFAULT_RECURSION_LIMIT + here - LONGBENCH_ROUGE_DEPTH)
    try:
        return Rouge().get_scores([prediction], [ground_truth], avg=True)["rouge-l"]["f"]
    except Exception:  # LongBench: `except: return 0.0` (empty hypothesis or reference, RecursionError)
        return 0.0
    finally:
        sys.setrecursionlimit(saved)


def ref_classification(prediction, ground_truth, all_classes):
    hits = [c for c in all_classes if c in prediction]
    # LongBench drops, from the list it is iterating over, every hit that is a proper substring of the ground
    # truth; since it removes while iterating, the hit right after each removed one is never looked at (and
    # stays). Walking an index that advances after a removal too reproduces that (list.remove takes the
    # first equal entry, which leaves the same entries and the same visiting order).
    i = 0
    while i < len(hits):
        if hits[i] in ground_truth and hits[i] != ground_truth:
            del hits[i]
        i += 1
    return 1.0 / len(hits) if ground_truth in hits else 0.0


def ref_retrieval(prediction, ground_truth):
    wanted = PARAGRAPH_ID.findall(ground_truth)[0]  # LongBench raises IndexError without "Paragraph N"
    numbers = DIGITS.findall(prediction)
    return float(numbers.count(wanted) / len(numbers)) if numbers else 0.0


def ref_count(prediction, ground_truth):
    numbers = DIGITS.findall(prediction)
    return float(numbers.count(str(ground_truth)) / len(numbers)) if numbers else 0.0


def first_code_line(prediction):
    for line in prediction.lstrip("\n").split("\n"):
        if "`" not in line and "#" not in line and "//" not in line:
            return line
    return ""


def ref_code_sim(prediction, ground_truth):
    return fw_fuzz.ratio(first_code_line(prediction), ground_truth) / 100


def reference(metric, prediction, ground_truth, classes=None):
    if metric == "classification":
        return ref_classification(prediction, ground_truth, classes)
    return {"qa_f1": ref_qa_f1, "rouge_l": ref_rouge_l, "retrieval": ref_retrieval, "count": ref_count,
            "code_sim": ref_code_sim}[metric](prediction, ground_truth)


# ---------------------------------------------------------------------------------------------------------
# Hand-checked examples: they pin the reference itself.
# ---------------------------------------------------------------------------------------------------------
def rouge_f(p, r):
    return 2.0 * ((p * r) / (p + r + 1e-8))  # rouge's F, with its 1e-8 in the denominator


TREC = ["Abbreviation", "Expression abbreviated", "Animal", "Organ of body", "Color", "Food", "Event", "Plant",
        "Other entity", "Other location", "Other number", "City", "Country", "State", "Date", "Price", "Speed",
        "Description of something", "Description of a person", "Definition of something", "Individual",
        "Title of a person", "Number of something", "Lasting time of something", "Percent, fraction", "Weight"]

HAND_CHECKED = [
    # qa_f1: "cat sat" vs "cat sat down": P = 2/2, R = 2/3, F1 = 2PR/(P+R) = 0.8
    ("qa_f1", "The cat sat", "a cat sat down", None, 0.8),
    ("qa_f1", "Hello, world!", "hello world", None, 1.0),
    ("qa_f1", "cat cat dog", "cat dog dog", None, 2 / 3),  # Counter intersection: one cat, one dog
    ("qa_f1", "", "", None, 0.0),
    ("qa_f1", "the a an", "The", None, 0.0),  # both normalise to nothing
    ("qa_f1", "don't stop", "dont stop", None, 1.0),
    ("qa_f1", "Théo", "THÉO", None, 1.0),  # Unicode lower-casing
    ("qa_f1", "ΟΔΟΣ", "οδος", None, 1.0),  # str.lower() writes a word-final sigma as ς
    ("qa_f1", "the猫", "猫", None, 0.0),  # 猫 is a word character: no \b, "the" stays
    ("qa_f1", "the 猫", "猫", None, 1.0),
    ("qa_f1", "the\u0301 cat", "\u0301 cat", None, 1.0),  # a combining mark is not a word character
    ("qa_f1", "x\x1cy", "x y", None, 1.0),  # \x1c is whitespace to str.split()
    ("qa_f1", "x\u200by", "x y", None, 0.0),  # ZERO WIDTH SPACE is not
    # rouge_l: sentences split on '.', words on whitespace, words counted once (sets), F = 2PR/(P+R+1e-8)
    ("rouge_l", "the cat sat", "the cat sat", None, rouge_f(1.0, 1.0)),
    ("rouge_l", "a b", "b a", None, rouge_f(0.5, 0.5)),
    ("rouge_l", "a b. c d", "a c. b d", None, rouge_f(1.0, 1.0)),  # summary-level union LCS: {a,c} + {b,d}
    ("rouge_l", "the the the", "the", None, rouge_f(1.0, 1.0)),  # 1 distinct word each side
    ("rouge_l", "a. ", "a", None, rouge_f(0.5, 1.0)),  # " " is a sentence; its word is "" (2 hyp words)
    ("rouge_l", "b a", "a b. a", None, rouge_f(1.0, 1.0)),  # backtracking picks "b" for "a b", then "a"
    ("rouge_l", "b a", "a b. b", None, rouge_f(0.5, 0.5)),  # ... and "b" twice here: union {b}
    ("rouge_l", "", "a", None, 0.0),  # "Hypothesis is empty." -> 0.0
    ("rouge_l", "...", "a", None, 0.0),
    ("rouge_l", "a", "..", None, 0.0),
    ("rouge_l", "Cat", "cat", None, 0.0),  # no lower-casing
    ("rouge_l", "cat,", "cat", None, 0.0),  # no punctuation stripping
    ("rouge_l", " ".join(f"w{i}" for i in range(990)), " ".join(f"w{i}" for i in range(990)), None,
     rouge_f(1.0, 1.0)),  # 991 recursive calls: fits
    ("rouge_l", " ".join(f"w{i}" for i in range(991)), " ".join(f"w{i}" for i in range(991)), None,
     0.0),  # 992 calls: RecursionError in LongBench's eval.py -> 0.0
    # classification (the quirk: the entry after a removed one is skipped)
    ("classification", "ABC", "ABC", ["A", "AB", "ABC"], 0.5),  # "A" removed, "AB" skipped: [AB, ABC]
    ("classification", "A B AB", "AB", ["A", "B", "AB"], 0.5),  # "A" removed, "B" skipped: [B, AB]
    ("classification", "A or AB", "AB", ["A", "AB"], 1.0),
    ("classification", "Animal", "Animal", TREC, 1.0),
    ("classification", "Animal or Food", "Food", TREC, 0.5),
    ("classification", "nothing", "Food", TREC, 0.0),
    ("classification", "Food", "Animal", ["Animal", "Food"], 0.0),
    ("classification", "cat", "cat", ["cat", "cat"], 0.5),  # duplicates count
    ("classification", "x", "cat", ["", "cat"], 0.0),  # "" is in everything, and removed here
    # retrieval
    ("retrieval", "Paragraph 12", "Paragraph 12", None, 1.0),
    ("retrieval", "12, 3 and 12", "Paragraph 12", None, 2 / 3),
    ("retrieval", "Paragraph 012", "Paragraph 12", None, 0.0),
    ("retrieval", "The answer is 7", "paragraph 3; Paragraph 7", None, 1.0),  # 'Paragraph' is case-sensitive
    ("retrieval", "no digits", "Paragraph 1", None, 0.0),
    ("retrieval", "\u0661\u0662 12", "Paragraph 12", None, 0.5),  # Arabic-Indic ١٢ is \d, but not "12"
    ("retrieval", "3.5", "Paragraph 5", None, 0.5),
    # count
    ("count", "There are 7 unique paragraphs, 7", "7", None, 1.0),
    ("count", "3 or 4", "3", None, 0.5),
    ("count", "none", "3", None, 0.0),
    ("count", "07", "7", None, 0.0),
    ("count", "7", " 7", None, 0.0),  # compared as strings, nothing stripped
    ("count", "\uff13 3", "3", None, 0.5),  # fullwidth ３ is a \d run of its own
    ("count", "\u00b23", "3", None, 1.0),  # superscript ² is not \d
    # code_sim (difflib backend; 100*2M/T rounded half to even, then /100)
    ("code_sim", "```python\n# comment\nx = 1\n```", "x = 1", None, 1.0),
    ("code_sim", "// c\nint a;", "int b;", None, 0.83),  # M=5, T=12: 83.33 -> 83
    ("code_sim", "#only", "", None, 1.0),  # no line left: "" vs "" is equal -> 100
    ("code_sim", "#only", "x", None, 0.0),
    ("code_sim", "\n\nfoo()", "foo()", None, 1.0),
    ("code_sim", "# c\n\nfoo()", "foo()", None, 0.0),  # the empty line is the first clean one
    ("code_sim", "a//b\nc", "c", None, 1.0),
    ("code_sim", "x = 1\r\ny = 2", "x = 1", None, 0.91),  # "\r" stays: M=5, T=11 -> 90.9 -> 91
    ("code_sim", "cac", "abc", None, 0.33),  # difflib finds 1 match; the LCS ("ac") is 2 (rapidfuzz: 67)
    ("code_sim", "abcdefgh", "aXXXXXXX", None, 0.12),  # 12.5 rounds to 12 (half to even)
    ("code_sim", "abcdefgh", "abcXXXXX", None, 0.38),  # 37.5 rounds to 38
    ("code_sim", "a" * 10, "b" * 100 + "a" * 100, None, 0.0),  # autojunk: b has 200 chars, 'a' is popular
    ("code_sim", "a" * 10, "a" * 100 + "b" * 100, None, 0.1),  # ... yet a match at the block's start extends
]


def check_reference():
    bad = 0
    for metric, pred, gt, classes, want in HAND_CHECKED:
        got = reference(metric, pred, gt, classes)
        ok = abs(got - want) <= 1e-12
        bad += not ok
        check(ok, f"reference {metric}({pred[:40]!r}, {gt[:40]!r}) = {got!r}, hand-checked {want!r}")
    # LongBench's own behaviour on a missing "Paragraph N": the reference must not invent a score
    try:
        ref_retrieval("1", "no paragraph here")
        raised = False
    except IndexError:
        raised = True
    check(raised, "reference retrieval raises IndexError without 'Paragraph N' in the ground truth, as LongBench")
    print(f"reference: {len(HAND_CHECKED) - bad} of {len(HAND_CHECKED)} hand-checked examples agree "
          f"(fuzzywuzzy backend: {FUZZ_BACKEND})")
    return bad == 0


# ---------------------------------------------------------------------------------------------------------
# Seeded cases.
# ---------------------------------------------------------------------------------------------------------
EN = ("cat sat mat dog ran fast river bank money paris france capital city answer question report meeting "
      "budget model cache token memory policy john smith born year war king queen film novel author").split()
ARTICLES = ["a", "an", "the", "A", "An", "The", "THE", "aN"]
NEAR_ARTICLES = ["ant", "then", "theatre", "anne", "at", "as", "tha", "a1", "the2", "the_", "_an", "a-", "(the)",
                 "the's", "an.", "A.", "thé", "ａ"]
UNI = ["café", "Café", "CAFÉ", "naïve", "Éclair", "ÜBER", "über", "straße", "STRASSE", "Ωmega", "ΟΔΟΣ", "οδος",
       "Москва", "МОСКВА", "東京", "猫", "の", "東京タワー", "😀", "👍🏽", "e\u0301", "E\u0301", "İstanbul", "ǅemal",
       "ﬁle", "½", "²", "\u0663", "\uff13", "Ⅻ", "ñandú", "ÆSIR", "Øre"]
PUNCT = ["!", "?", "...", ",", "--", "'s", "\"", "(x)", "—", "“quoted”", "…", "¿", "«", "»", "[1]", "@", "#tag",
         "e.g.", "U.S.A.", "_", "~", "%", "$5", "&"]
NUMS = ["1", "12", "007", "3.14", "1,000", "42nd", "1999", "0", "00", "12a", "x9"]
WS = [" "] * 14 + ["  ", "\t", "\n", "\r\n", "\u3000", "\xa0", "\u2009", "\x1c", "\x1f", "\x85", "\u2028", "\x0b",
                   "\x0c", "\u200b"]


def pick_token(r, weights=(6, 2, 1, 2, 1, 1)):
    pool = r.choices([EN, ARTICLES, NEAR_ARTICLES, UNI, PUNCT, NUMS], weights=weights)[0]
    tok = r.choice(pool)
    roll = r.random()
    if roll < 0.08:
        tok = tok.upper()
    elif roll < 0.16:
        tok = tok.capitalize()
    elif roll < 0.22:
        tok = tok + r.choice([",", ".", "!", "?", ";", ":", "'", "…", "。"])
    return tok


def join_tokens(r, tokens, ws=True):
    out = ""
    for i, t in enumerate(tokens):
        if i:
            out += r.choice(WS) if ws and r.random() < 0.25 else " "
        out += t
    return out


def perturb(r, tokens, pool_fn):
    tokens = list(tokens)
    for _ in range(r.randint(0, 3)):
        op = r.randrange(6)
        if op == 0 and tokens:
            del tokens[r.randrange(len(tokens))]
        elif op == 1:
            tokens.insert(r.randint(0, len(tokens)), pool_fn())
        elif op == 2 and tokens:
            tokens[r.randrange(len(tokens))] = pool_fn()
        elif op == 3 and len(tokens) > 1:
            i = r.randrange(len(tokens) - 1)
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
        elif op == 4 and tokens:
            i = r.randrange(len(tokens))
            tokens.insert(i, tokens[i])
        elif op == 5 and tokens:
            i = r.randrange(len(tokens))
            tokens[i] = r.choice([tokens[i].lower(), tokens[i].upper(), tokens[i] + ".", "(" + tokens[i] + ")"])
    return tokens


def case(group, pred, gt, classes=None):
    return {"group": group, "pred": pred, "gt": gt, "classes": classes}


def gen_qa_f1(r):
    edges = ["", " ", "\n", ".", "!?!", "...", "a", "the", "The An A", "a an the.", "’", "—", "😀", "猫", "é",
             "E\u0301", "the_", "_the_", "the\tcat", "The cat.", "cat cat cat", "0", "007", "ΟΔΟΣ", "İ", "\u3000",
             "x\x1cy", "x\u200by", "a,b", "a-b", "don't", "U.S.A.", "the猫", "猫the", "2the", "the²", "the\u0301"]
    cases = [case("edge", p, g) for p in edges for g in edges if r.random() < 0.12]
    pool = lambda: pick_token(r)
    while len(cases) < CASES_PER_METRIC:
        mode = r.random()
        gold = [pool() for _ in range(r.randint(0, 6))]
        if mode < 0.5:
            pred = perturb(r, gold, pool)
        elif mode < 0.7:
            pred = r.choice([["The", "answer", "is"], ["It", "was"], []]) + gold + r.choice([["."], [], ["in", "1999"]])
        elif mode < 0.78:
            pred = [pool() for _ in range(r.randint(0, 8))]
        elif mode < 0.86:  # Unicode case mapping: the same words in other cases
            gold = [r.choice(UNI + EN) for _ in range(r.randint(1, 5))]
            pred = [r.choice([t.upper(), t.lower(), t.title(), t]) for t in gold]
        elif mode < 0.93:  # articles glued to letters, digits, marks and symbols: where \b falls
            glue = lambda: r.choice(["猫", "é", "\u0301", "😀", "²", "1", "_", "-", "ǅ", "の", "Ⅻ", "\u200b", "ａ"])
            gold, pred = [], []
            for _ in range(r.randint(1, 5)):
                a, g = r.choice(ARTICLES), glue()
                glued = r.choice([a + g, g + a, g + a + g])
                pair = r.choice([(glued, g), (glued, glued), (glued, a + " " + g), (r.choice(EN), r.choice(EN))])
                gold.append(pair[0])
                pred.append(pair[1])
            if r.random() < 0.5:
                gold, pred = pred, gold
        else:
            pred = list(gold)
            for _ in range(r.randint(1, 3)):
                if pred:
                    i = r.randrange(len(pred))
                    pred[i] = r.choice(ARTICLES + PUNCT) + pred[i]
        cases.append(case("random", join_tokens(r, pred), join_tokens(r, gold)))
    return cases


def make_summary(r, n_sent, max_words, pool):
    seps = [". ", ". ", ". ", ".", ".\n", " . ", "..", ". . ", "! ", "? ", ".\t", "...", ". \n\n"]
    out = ""
    for i in range(n_sent):
        if i:
            out += r.choice(seps)
        out += join_tokens(r, [pool() for _ in range(r.randint(1, max_words))])
    if r.random() < 0.4:
        out += r.choice([".", ". ", " .", "..", ".\n", " "])
    if r.random() < 0.08:
        out = r.choice([".", " ", ". ", "\n"]) + out
    return out


def perturb_summary(r, text, pool):
    sents = text.split(".")
    for _ in range(r.randint(0, 3)):
        op = r.randrange(5)
        if op == 0 and len(sents) > 1:
            r.shuffle(sents)
        elif op == 1 and len(sents) > 1:
            del sents[r.randrange(len(sents))]
        elif op == 2:
            i = r.randrange(len(sents))
            sents[i] = join_tokens(r, perturb(r, sents[i].split(), pool))
        elif op == 3:
            i = r.randrange(len(sents))
            sents.insert(i, sents[i])
        else:
            sents.insert(r.randint(0, len(sents)), " " + join_tokens(r, [pool() for _ in range(r.randint(1, 6))]))
    return ".".join(sents)


def gen_rouge_l(r):
    edges = ["", ".", "..", "...", " ", "\n", " . ", ". .", "a", "a.", ".a", "a .", "a. ", "the cat", "The Cat",
             "cat, cat", "3.14", "1. 2. 3.", "猫. 猫", "😀 😀", "e\u0301", "x\x1cy", "x\u200by", "a\xa0b. b\u3000a",
             "Mr. Smith", "U.S.A. won", "\t.\t", "a b c", "c b a", "a a a a"]
    cases = [case("edge", p, g) for p in edges for g in edges if r.random() < 0.15]
    small = lambda: r.choice(["a", "b", "c", "d", "the", "cat", "sat", "on", "mat", "A", "B"])
    wide = lambda: pick_token(r, weights=(8, 2, 1, 1, 1, 1))
    while len(cases) < CASES_PER_METRIC - 12:
        pool = small if r.random() < 0.4 else wide
        if r.random() < 0.1:
            gold = make_summary(r, r.randint(5, 12), 40, pool)  # longer, like gov_report / multi_news
        else:
            gold = make_summary(r, r.randint(1, 5), 9, pool)
        mode = r.random()
        if mode < 0.6:
            pred = perturb_summary(r, gold, pool)
        elif mode < 0.8:
            pred = make_summary(r, r.randint(1, 5), 9, pool)
        else:
            pred = gold.replace(".", r.choice([" ", ",", ";", ". ", ".."]))
        cases.append(case("random", pred, gold))
    # rouge's LCS backtracking recurses once per step; LongBench returns 0.0 when that passes Python's limit
    words = lambda n, p="w": " ".join(f"{p}{i}" for i in range(n))
    summary = "The report describes the budget of the city. It lists the costs of the new bridge."
    loops = " ".join(["the model model"] * 500)  # a degenerate generation, 1500 words and no '.'
    cases += [
        case("recursion", words(990), words(990)),
        case("recursion", words(991), words(991)),
        case("recursion", words(700), words(700)),
        case("recursion", words(1200), words(1200)),
        case("recursion", words(989, "x"), "y"),  # 989 steps to the left
        case("recursion", words(991, "x"), "y"),
        case("recursion", "y", words(1500, "x")),  # the hypothesis has 1 word: 1 step
        case("recursion", loops, summary),
        case("recursion", ". ".join(["the model model"] * 500), summary),  # the same with '.': short sentences
        case("recursion", words(300) + " " + words(300, "v"), words(600)),
        case("recursion", words(450) + ". " + words(450), words(900)),
        case("recursion", words(995) + ".", "w3 w5. w7"),
    ]
    return cases


CLASS_FAMILIES = [
    TREC,
    ["A", "AB", "ABC", "B", "BC", "C"],
    ["cat", "category", "dog", "hotdog", "do", "g"],
    ["Other", "Other location", "Other entity", "location", "entity"],
    ["Animal", "Animals", "Ani", "mal", "Anim"],
    ["café", "caf", "é", "CAFÉ", "e\u0301"],
    ["猫", "猫猫", "東京", "京"],
    ["positive", "negative", "neutral", "not positive", "pos"],
    ["", "x", "xy"],
    ["dup", "dup", "du", "up"],
    ["😀", "😀😀", "👍", "👍🏽"],
]


def gen_classification(r):
    cases = []
    fillers = ["", " ", "I think it is ", "Type: ", "The answer: ", "\n", "maybe ", " or ", " and ", ", ", "\n\n"]
    while len(cases) < CASES_PER_METRIC:
        fam = r.choice(CLASS_FAMILIES)
        classes = list(fam) if r.random() < 0.7 else r.sample(fam, r.randint(1, len(fam)))
        if r.random() < 0.1:
            r.shuffle(classes)
        gold = r.choice(classes) if r.random() < 0.9 else r.choice(["Nothing", r.choice(fam) + "s", "", "A B"])
        mention = r.sample(classes, min(len(classes), r.randint(0, 3)))
        if r.random() < 0.5:
            mention.append(gold)
        r.shuffle(mention)
        pred = r.choice(fillers)
        for m in mention:
            m = m if r.random() < 0.85 else r.choice([m.lower(), m.upper(), m[:-1], m + "s"])
            pred += m + r.choice(fillers)
        cases.append(case("random", pred, gold, classes))
    return cases


def gen_retrieval(r):
    digits = ["0123456789", "0123456789", "0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",
              "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19"]

    def num(v, zeros=0, alphabet="0123456789"):
        return "".join(alphabet[int(ch)] for ch in "0" * zeros + str(v))

    cases = []
    while len(cases) < CASES_PER_METRIC:
        alphabet = digits[0] if r.random() < 0.9 else r.choice(digits)
        gid = r.randint(0, 40)
        gold_num = num(gid, r.choice([0, 0, 0, 0, 1, 2]), alphabet)
        gold = r.choice([f"Paragraph {gold_num}", f"Paragraph {gold_num}", f"Paragraph {gold_num}.",
                         f"paragraph 3 Paragraph {gold_num}", f"See Paragraph {gold_num} and Paragraph 1",
                         f"Paragraph  9, Paragraph {gold_num}", f"Paragraph{gold_num} Paragraph {gold_num}"])
        nums = []
        for _ in range(r.randint(0, 5)):
            roll = r.random()
            if roll < 0.45:
                nums.append(num(gid, 0, alphabet if r.random() < 0.7 else digits[0]))
            elif roll < 0.55:
                nums.append(num(gid, 1))
            else:
                nums.append(num(r.randint(0, 40), r.choice([0, 0, 1])))
        pred = r.choice(["", "Paragraph ", "The answer is Paragraph ", "It is in ", "Paragraphs "])
        for i, n in enumerate(nums):
            pred += n + (r.choice([", ", " and ", " ", ".", "x", "-", ".5 ", "\n"]) if i + 1 < len(nums) else "")
        pred += r.choice(["", ".", " (I think)", " ²", "th"])
        cases.append(case("random", pred, gold))
    return cases


def gen_count(r):
    cases = []
    alts = ["\u0663", "\uff13", "\u00b3", "\u2462"]  # ٣ and ３ are \d; ³ and ③ are not
    while len(cases) < CASES_PER_METRIC:
        n = r.randint(0, 30)
        gold = r.choice([str(n)] * 8 + ["0" + str(n), " " + str(n), str(n) + ".", "", "\uff13"])
        parts = []
        for _ in range(r.randint(0, 5)):
            roll = r.random()
            if roll < 0.5:
                parts.append(str(n))
            elif roll < 0.6:
                parts.append("0" + str(n))
            elif roll < 0.7:
                parts.append(r.choice(alts))
            else:
                parts.append(str(r.randint(0, 30)))
        sep = r.choice([" ", ", ", " or ", "", "\n", " paragraphs and "])
        pred = r.choice(["", "There are ", "The count is ", "I count "]) + sep.join(parts)
        pred += r.choice(["", ".", " unique paragraphs.", " in total", "%"])
        cases.append(case("random", pred, gold))
    return cases


CODE = ["x = foo(bar, baz)", "return self.cache[key]", "for (int i = 0; i < n; ++i) {", 'printf("%d\\n", x);',
        "if err != nil {", "let v: Vec<u8> = Vec::new();", "def __init__(self, name):", "print(f'{x}')",
        "s = 'naïve café'", "名前 = '東京'", "emoji = '😀👍🏽'", "url = 'http://example.com'", "x = 1  # set x",
        "`code`", "}", "", "    pass", "\tself.n += 1", "import numpy as np", "#include <vector>",
        "// TODO", "/* block */", "end", "a = b // 2", "std::vector<int> v{1, 2, 3};", "else:", "i++;"]


def edit_chars(r, s, n):
    s = list(s)
    alphabet = "abcxyz _()=;.0123é猫😀"
    for _ in range(n):
        op = r.randrange(3)
        if op == 0 and s:
            del s[r.randrange(len(s))]
        elif op == 1:
            s.insert(r.randint(0, len(s)), r.choice(alphabet))
        elif s:
            s[r.randrange(len(s))] = r.choice(alphabet)
    return "".join(s)


def long_line(r):
    toks = ["self", ".", "cache", "[", "key", "]", " = ", "value", ", ", "np.zeros", "(", ")", "e", " ", "fn(x)",
            "other_name", "+", "1"]
    out = ""
    while len(out) < r.randint(180, 420):
        out += r.choice(toks)
    return out


def gen_code_sim(r):
    cases = []
    while len(cases) < CASES_PER_METRIC - 40:
        lines = [r.choice(CODE) for _ in range(r.randint(1, 5))]
        if r.random() < 0.15:
            lines.insert(r.randint(0, len(lines)), long_line(r))
        head = r.choice(["", "", "\n", "\n\n", "```python\n", "```\n", "# comment\n", "// note\n", "\n# c\n\n",
                         "Here is the code:\n", " \n", "\r\n"])
        eol = "\r\n" if r.random() < 0.1 else "\n"
        pred = head + eol.join(lines) + r.choice(["", "\n", "\n```", "\n```\n"])
        target = first_code_line(pred)
        roll = r.random()
        if roll < 0.5:
            gold = edit_chars(r, target, r.randint(0, 6))
        elif roll < 0.65:
            gold = r.choice(CODE)
        elif roll < 0.8:
            gold = long_line(r) if r.random() < 0.5 else edit_chars(r, target * r.randint(1, 4), 5)
        else:
            gold = edit_chars(r, target.strip(), r.randint(0, 2))
        cases.append(case("random", pred, gold))
    # small alphabets: where difflib's longest-block-first matching falls short of the LCS
    while len(cases) < CASES_PER_METRIC:
        a = "".join(r.choice("abc ") for _ in range(r.randint(1, 12)))
        b = "".join(r.choice("abc ") for _ in range(r.randint(1, 12)))
        cases.append(case("small-alphabet", a, b))
    return cases


GENERATORS = {"qa_f1": gen_qa_f1, "rouge_l": gen_rouge_l, "classification": gen_classification,
              "retrieval": gen_retrieval, "count": gen_count, "code_sim": gen_code_sim}


# ---------------------------------------------------------------------------------------------------------
# rapidfuzz next to fuzzywuzzy: same ratio formula, different matching.
# ---------------------------------------------------------------------------------------------------------
def compare_rapidfuzz(cases):
    """fuzzywuzzy on difflib counts M = the characters in difflib's matching blocks; rapidfuzz counts the LCS.
    Both give 100 * 2M / (len(a) + len(b)); M <= LCS always, and fuzzywuzzy rounds to an integer."""
    same = fewer = rounding = 0
    examples = []
    for c in cases:
        a, b = first_code_line(c["pred"]), c["gt"]
        fw = fw_fuzz.ratio(a, b)
        rf = rf_fuzz.ratio(a, b)
        if a == b or not a or not b:
            check(fw == round(rf), f"fuzzywuzzy and rapidfuzz agree on equal or empty strings ({a!r}, {b!r}: {fw}, {rf})")
            same += fw == round(rf)
            continue
        total = len(a) + len(b)
        m = sum(block[2] for block in difflib.SequenceMatcher(None, a, b).get_matching_blocks())
        lcs = (total - Indel.distance(a, b)) // 2
        check(m <= lcs, f"difflib's matches never exceed the LCS ({a!r}, {b!r}: {m} > {lcs})")
        check(fw == int(round(100 * (2.0 * m / total))), f"fuzz.ratio is round(100 * 2M/T) ({a!r}, {b!r})")
        if m == lcs:
            check(abs(rf - 100 * 2.0 * m / total) < 1e-9, f"rapidfuzz is 100 * 2 LCS/T ({a!r}, {b!r}: {rf})")
        if fw == round(rf):
            same += 1
        elif m < lcs:
            fewer += 1
            if len(examples) < 3:
                examples.append(f"{a[:30]!r} vs {b[:30]!r}: fuzzywuzzy {fw}, rapidfuzz {rf:.2f} (M={m}, LCS={lcs})")
        else:
            rounding += 1
    print(f"code_sim: rapidfuzz's fuzz.ratio, rounded, equals fuzzywuzzy's (difflib) on {same} of {len(cases)} "
          f"pairs; {fewer} differ because difflib matches fewer characters than the LCS (its longest-block-first "
          f"split, or autojunk on references of 200+ characters), {rounding} only in rounding a .5 "
          f"(round(rf) uses rapidfuzz's float, fuzzywuzzy 100*2M/T)")
    for e in examples:
        print(f"  e.g. {e}")


# ---------------------------------------------------------------------------------------------------------
# The binary.
# ---------------------------------------------------------------------------------------------------------
def run_binary(metric, pairs_json, classes_json=None):
    cmd = [BINARY, "eval", "longbench", "--score-only", "--metric", metric, "--pairs", pairs_json]
    if classes_json is not None:
        cmd += ["--classes", classes_json]
    cmd.append("--json")
    return subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=300)


def pair_of(c, with_classes):
    return [c["pred"], c["gt"], c["classes"]] if with_classes else [c["pred"], c["gt"]]


def chunks(cases, with_classes):
    out, cur, size = [], [], 0
    for c in cases:
        n = len(json.dumps(pair_of(c, with_classes), ensure_ascii=False).encode()) + 2
        if cur and (len(cur) >= CHUNK_PAIRS or size + n > CHUNK_BYTES):
            out.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += n
    if cur:
        out.append(cur)
    return out


def scores_from_binary(metric, cases, shared_classes=None):
    """One score per case (None where the binary gave none). Chunks alternate between raw UTF-8 and \\u
    escapes (surrogate pairs for emoji) in the JSON, so both spellings reach the parser."""
    got = []
    with_classes = metric == "classification" and shared_classes is None
    for k, part in enumerate(chunks(cases, with_classes)):
        pairs = json.dumps([pair_of(c, with_classes) for c in part], ensure_ascii=bool(k % 2))
        classes = json.dumps(shared_classes, ensure_ascii=False) if shared_classes is not None else None
        res = run_binary(metric, pairs, classes)
        scores = None
        if res.returncode == 0:
            try:
                scores = json.loads(res.stdout)["scores"]
            except (ValueError, KeyError, TypeError) as e:
                check(False, f"{metric}: stdout is one JSON object with 'scores' ({e}): {res.stdout[:300]!r}")
        else:
            check(False, f"{metric}: chunk {k} ({len(part)} pairs) exits 0, not {res.returncode}: {res.stderr[-400:]}")
        if scores is not None:
            ok = (isinstance(scores, list) and len(scores) == len(part)
                  and all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in scores))
            check(ok, f"{metric}: chunk {k} gives {len(part)} numbers (got {str(scores)[:200]})")
            if not ok:
                scores = None
        got += scores if scores is not None else [None] * len(part)
    return got


def show(s, limit=160):
    text = repr(s)
    return text if len(text) <= limit else text[:limit] + f"...<{len(s)} chars>"


def compare(metric, cases, got, label=""):
    bad = []
    for c, g in zip(cases, got):
        if g is None:
            continue
        if not (abs(g - c["ref"]) <= TOLERANCE and 0.0 <= g <= 1.0):
            bad.append((c, g))
    scored = sum(g is not None for g in got)
    name = f"{metric}{label}"
    check(not bad and scored == len(cases),
          f"{name}: {scored} of {len(cases)} scored, {len(bad)} differ from LongBench by more than {TOLERANCE}")
    if bad:
        by_group = Counter(c["group"] for c, _ in bad)
        print(f"  {name} mismatches by case group: {dict(by_group)}")
        for c, g in bad[:8]:
            extra = f" classes={show(c['classes'], 200)}" if c["classes"] is not None else ""
            print(f"  [{c['group']}] prediction={show(c['pred'])} reference={show(c['gt'])}{extra}: "
                  f"kvscope {g!r}, LongBench {c['ref']!r}")


def check_errors():
    ok_pairs = json.dumps([["a", "a"]])
    res = run_binary("bleu_42", ok_pairs)
    check(res.returncode != 0 and "bleu_42" in res.stderr,
          f"an unknown metric exits non-zero naming it on stderr (exit {res.returncode}: {res.stderr.strip()[-300:]})")
    for bad in ["this is not json", '{"pred": "a", "ref": "b"}', '["a", "b"]', '[["only one"]]', '[["a", 1]]',
                '[["a", null]]', '[["a", "b"]', "[[]]", '"a"']:
        res = run_binary("qa_f1", bad)
        check(res.returncode != 0 and "pairs" in res.stderr.lower() and '"scores"' not in res.stdout,
              f"--pairs {bad!r} exits non-zero with a message about --pairs "
              f"(exit {res.returncode}: {res.stderr.strip()[-300:]})")
    res = run_binary("qa_f1", "[]")
    try:
        empty = json.loads(res.stdout)["scores"] if res.returncode == 0 else None
    except (ValueError, KeyError, TypeError):
        empty = None
    check(empty == [], f"--pairs [] gives {{\"scores\": []}} (exit {res.returncode}: {res.stdout[:100]!r} {res.stderr[-200:]!r})")


def main():
    dump = sys.argv[sys.argv.index("--dump") + 1] if "--dump" in sys.argv else None
    reference_ok = check_reference()

    all_cases = {}
    for i, metric in enumerate(METRICS):
        cases = GENERATORS[metric](random.Random(SEED + i))
        hand = [case("hand-checked", p, g, c) for m, p, g, c, _ in HAND_CHECKED if m == metric]
        for c in hand + cases:
            c["ref"] = reference(metric, c["pred"], c["gt"], c["classes"])
        all_cases[metric] = hand + cases
    compare_rapidfuzz(all_cases["code_sim"])
    trec = random.Random(SEED - 1)
    trec_cases = []
    for _ in range(200):
        gold = trec.choice(TREC)
        pred = " or ".join(trec.sample(TREC, trec.randint(0, 2)) + ([gold] if trec.random() < 0.6 else []))
        trec_cases.append(case("shared-classes", pred, gold, TREC))
        trec_cases[-1]["ref"] = ref_classification(pred, gold, TREC)
    if dump:
        os.makedirs(dump, exist_ok=True)
        for metric, cases in list(all_cases.items()) + [("classification_shared", trec_cases)]:
            with open(os.path.join(dump, f"{metric}.json"), "w", encoding="utf-8") as f:
                json.dump(cases, f, ensure_ascii=False, indent=1)
        print(f"cases and reference scores written to {dump}")
    print("cases: " + ", ".join(f"{m} {len(c)}" for m, c in all_cases.items()) + f", classification --classes {len(trec_cases)}")

    if not os.path.exists(BINARY):
        print(f"SKIP: no kvscope binary at {BINARY} (set KVSCOPE_BINARY); the reference side "
              f"{'passed' if reference_ok else 'FAILED'}")
        return 77 if reference_ok and not FAILURES else 1

    probe = run_binary("qa_f1", json.dumps([["a cat", "the cat"]]))
    if probe.returncode != 0:
        check(False, f"{BINARY} supports `eval longbench --score-only --metric qa_f1 --pairs ... --json` "
                     f"(exit {probe.returncode}: {(probe.stderr or probe.stdout).strip()[-400:]})")
        print(f"{passed()} checks passed, {len(FAILURES)} failed")
        return 1

    for metric in METRICS:
        got = scores_from_binary(metric, all_cases[metric])
        compare(metric, all_cases[metric], got)
    got = scores_from_binary("classification", trec_cases, shared_classes=TREC)
    compare("classification", trec_cases, got, " (--classes)")
    check_errors()
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
