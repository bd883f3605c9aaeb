#include "core/eval/longbench_python.h"

namespace kvscope::eval {

// Each rule cites the LongBench v1 function it restates (LongBench/metrics.py, LongBench/eval.py,
// LongBench/pred.py, config/dataset2prompt.json and dataset2maxlen.json) or, for ROUGE-L, the `rouge` package
// (1.0.1) LongBench calls; fuzzywuzzy's ratio is difflib's SequenceMatcher, which is Python's own.
const char* const kLongBenchPython = R"PY(
import difflib
import json
import re
import string

# config/dataset2prompt.json (English and code tasks), dataset2maxlen.json, and eval.py's dataset2metric.
TASKS = {
    "narrativeqa": ("qa_f1", 128, "You are given a story, which can be either a novel or a movie script, and a question. Answer the question as concisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: {context}\n\nNow, answer the question based on the story as concisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:"),
    "qasper": ("qa_f1", 128, "You are given a scientific article and a question. Answer the question as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on the information in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the question based on the above article as concisely as you can, using a single phrase or sentence if possible. If the question cannot be answered based on the information in the article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:"),
    "multifieldqa_en": ("qa_f1", 64, "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on the above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"),
    "hotpotqa": ("qa_f1", 32, "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"),
    "2wikimqa": ("qa_f1", 32, "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"),
    "musique": ("qa_f1", 32, "Answer the question based on the given passages. Only give me the answer and do not output any other words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:"),
    "gov_report": ("rouge_l", 512, "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n{context}\n\nNow, write a one-page summary of the report.\n\nSummary:"),
    "qmsum": ("rouge_l", 512, "You are given a meeting transcript and a query containing a question or instruction. Answer the query in one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting transcript in one or more sentences.\n\nQuery: {input}\nAnswer:"),
    "multi_news": ("rouge_l", 512, "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\nNow, write a one-page summary of all the news.\n\nSummary:"),
    "trec": ("classification", 64, "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}"),
    "triviaqa": ("qa_f1", 32, "Answer the question based on the given passage. Only give me the answer and do not output any other words. The following are some examples.\n\n{context}\n\n{input}"),
    "samsum": ("rouge_l", 128, "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}"),
    "passage_count": ("count", 32, "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully read these paragraphs and determine how many unique paragraphs there are after removing duplicates. In other words, how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final count of unique paragraphs after removing duplicates. The output format should only contain the number, such as 1, 2, 3, and so on.\n\nThe final answer is: "),
    "passage_retrieval_en": ("retrieval", 32, "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of the paragraph that the abstract is from. The answer format must be like \"Paragraph 1\", \"Paragraph 2\", etc.\n\nThe answer is: "),
    "lcc": ("code_sim", 64, "Please complete the code given below. \n{context}Next line of code:\n"),
    "repobench-p": ("code_sim", 64, "Please complete the code given below. \n{context}{input}Next line of code:\n"),
}
CHINESE_TASKS = {"multifieldqa_zh", "dureader", "vcsum", "lsht", "passage_retrieval_zh"}
NO_CHAT_TEMPLATE = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"}  # pred.py
FIRST_LINE_ONLY = {"trec", "triviaqa", "samsum", "lsht"}  # eval.py scorer
STOP_AT_NEWLINE = {"samsum"}  # pred.py adds the newline token to eos_token_id

def task(name, prompts_json):
    if name in CHINESE_TASKS:
        raise ValueError("LongBench task '%s' is Chinese; kvscope scores the English and code tasks (%s)"
                         % (name, ", ".join(sorted(TASKS))))
    table = dict(TASKS)
    if prompts_json:
        for key, template in json.loads(prompts_json).items():
            if key in table:
                table[key] = (table[key][0], table[key][1], template)
    if name not in table:
        raise ValueError("unknown LongBench task '%s' (expected one of %s)" % (name, ", ".join(sorted(TASKS))))
    metric, max_new_tokens, template = table[name]
    return {"metric": metric, "max_new_tokens": max_new_tokens, "template": template,
            "chat": name not in NO_CHAT_TEMPLATE, "first_line": name in FIRST_LINE_ONLY,
            "stop_at_newline": name in STOP_AT_NEWLINE}

def question(template, record_json):
    # the part of the prompt after the context: what the query-agnostic protocol appends after compression
    if "{context}" not in template:
        return ""
    return template.split("{context}", 1)[1].format(**json.loads(record_json))

def task_names():
    return sorted(TASKS)

def format_prompt(template, record_json):
    # pred.py: prompt_format.format(**json_obj)
    return template.format(**json.loads(record_json))

# --- metrics.py -------------------------------------------------------------------------------------------
PUNCTUATION = set(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b")
NUMBER = re.compile(r"\d+")
PARAGRAPH = re.compile(r"Paragraph (\d+)")

def normalize_answer(s):
    # lower, remove_punc, remove_articles, white_space_fix, in that order
    s = "".join(ch for ch in s.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", s).split())

def qa_f1(prediction, ground_truth, classes):
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(ground_truth).split()
    remaining = {}
    for word in expected:
        remaining[word] = remaining.get(word, 0) + 1
    same = 0
    for word in predicted:  # the size of the multiset intersection
        if remaining.get(word, 0) > 0:
            remaining[word] -= 1
            same += 1
    if same == 0:
        return 0.0
    precision = 1.0 * same / len(predicted)
    recall = 1.0 * same / len(expected)
    return (2 * precision * recall) / (precision + recall)

class RougeRecursionLimit(Exception):
    pass

# The rouge package walks its LCS table back recursively; under LongBench's eval.py a walk of more than 991
# calls exceeds Python's recursion limit, and LongBench scores that pair 0. Kept so the numbers match.
ROUGE_MAX_CALLS = 991

def rouge_sentences(text):
    # split on '.', drop empty pieces (before whitespace is normalised), join each piece's words by one space
    return [" ".join(piece.split()) for piece in text.split(".") if len(piece) > 0]

def lcs_words(reference, hypothesis):
    rows, cols = len(reference), len(hypothesis)
    table = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            if reference[i - 1] == hypothesis[j - 1]:
                table[i][j] = table[i - 1][j - 1] + 1
            else:
                table[i][j] = max(table[i - 1][j], table[i][j - 1])
    words, i, j, calls = [], rows, cols, 1
    while i > 0 and j > 0:
        calls += 1
        if calls > ROUGE_MAX_CALLS:
            raise RougeRecursionLimit()
        if reference[i - 1] == hypothesis[j - 1]:
            words.append(reference[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return words

def rouge_l(prediction, ground_truth, classes):
    # summary-level ROUGE-L F as rouge.Rouge().get_scores([prediction], [ground_truth], avg=True)["rouge-l"]["f"];
    # LongBench's rouge_score returns 0 where that raises (an empty text)
    hypothesis = [s.split(" ") for s in rouge_sentences(prediction)]
    reference = [s.split(" ") for s in rouge_sentences(ground_truth)]
    if not hypothesis or not reference:
        return 0.0
    m = len({w for sentence in reference for w in sentence})
    n = len({w for sentence in hypothesis for w in sentence})
    union = set()
    try:
        for ref_sentence in reference:
            for hyp_sentence in hypothesis:
                union.update(lcs_words(ref_sentence, hyp_sentence))
    except RougeRecursionLimit:
        return 0.0
    recall = len(union) / m
    precision = len(union) / n
    return 2.0 * ((precision * recall) / (precision + recall + 1e-8))

def classification(prediction, ground_truth, classes):
    matches = [c for c in classes if c in prediction]
    # metrics.py removes a class contained in (but not equal to) the ground truth while iterating over the
    # same list, so the entry after each removed one is never looked at: walk an index the same way.
    i = 0
    while i < len(matches):
        if matches[i] in ground_truth and matches[i] != ground_truth:
            del matches[i]
        i += 1
    return 1.0 / len(matches) if ground_truth in matches else 0.0

def retrieval(prediction, ground_truth, classes):
    ids = PARAGRAPH.findall(ground_truth)
    if not ids:
        raise ValueError("retrieval: the reference %r names no 'Paragraph N'" % ground_truth[:80])
    numbers = NUMBER.findall(prediction)
    right = sum(1 for number in numbers if str(number) == str(ids[0]))
    return 0.0 if len(numbers) == 0 else float(right / len(numbers))

def count(prediction, ground_truth, classes):
    numbers = NUMBER.findall(prediction)
    right = sum(1 for number in numbers if str(number) == str(ground_truth))
    return 0.0 if len(numbers) == 0 else float(right / len(numbers))

def fuzz_ratio(a, b):
    # fuzzywuzzy's fuzz.ratio without python-Levenshtein (LongBench's install): equal 100, an empty side 0,
    # else round(100 * difflib ratio) with Python's round
    if a == b:
        return 100
    if len(a) == 0 or len(b) == 0:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))

def code_sim(prediction, ground_truth, classes):
    line = ""
    for candidate in prediction.lstrip("\n").split("\n"):
        if "`" not in candidate and "#" not in candidate and "//" not in candidate:
            line = candidate
            break
    return fuzz_ratio(line, ground_truth) / 100

METRICS = {"qa_f1": qa_f1, "rouge_l": rouge_l, "classification": classification, "retrieval": retrieval,
           "count": count, "code_sim": code_sim}

def metric_scores(metric, pairs_json, classes_json):
    if metric not in METRICS:
        raise ValueError("unknown LongBench metric '%s' (expected one of %s)" % (metric, ", ".join(METRICS)))
    function = METRICS[metric]
    shared_classes = json.loads(classes_json) if classes_json else []
    out = []
    for pair in json.loads(pairs_json):
        classes = pair[2] if len(pair) > 2 else shared_classes
        out.append(float(function(pair[0], pair[1], classes)))
    return out

def record_score(task_name, payload_json):
    # eval.py's scorer: the first line only for some tasks, then the best score over the reference answers
    payload = json.loads(payload_json)
    metric, prediction = TASKS[task_name][0], payload["prediction"]
    if task_name in FIRST_LINE_ONLY:
        prediction = prediction.lstrip("\n").split("\n")[0]
    best = 0.0
    for answer in payload["answers"]:
        best = max(best, METRICS[metric](prediction, answer, payload["classes"]))
    return best
)PY";

}  // namespace kvscope::eval
