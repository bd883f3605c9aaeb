#include "core/model/tokenizer_bpe.h"

#include <algorithm>
#include <array>
#include <queue>
#include <tuple>

#include "core/common/error.h"

namespace kvscope::model {

namespace unicode {
namespace {

struct CodepointRange {
  char32_t first, last;
};
#include "core/model/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodepointRange (&ranges)[N], char32_t cp) {
  const CodepointRange* end = ranges + N;
  const CodepointRange* it =
      std::upper_bound(ranges, end, cp, [](char32_t c, const CodepointRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

}  // namespace

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(kLetterRanges, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(kNumberRanges, cp);
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return in_ranges(kWhitespaceRanges, cp);
}

namespace {

// Expected length of the sequence a lead byte starts and the allowed range of its second byte; the
// narrowed second-byte ranges are what exclude overlongs, surrogates and codepoints past U+10FFFF.
struct LeadInfo {
  int length;  // 0: never a lead byte
  uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of leading bytes at pos that form a valid prefix of a sequence (>= 1), and whether it is complete.
std::pair<int, bool> scan_sequence(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {1, true};
  const LeadInfo info = lead_info(b0);
  if (info.length == 0) return {1, false};
  int n = 1;
  for (; n < info.length; ++n) {
    if (pos + n >= s.size()) return {n, false};
    const auto b = static_cast<uint8_t>(s[pos + n]);
    const uint8_t lo = n == 1 ? info.lo : 0x80, hi = n == 1 ? info.hi : 0xBF;
    if (b < lo || b > hi) return {n, false};
  }
  return {n, true};
}

}  // namespace

Utf8Char decode_utf8(std::string_view text, size_t pos) {
  const auto [n, ok] = scan_sequence(text, pos);
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (!ok) return {b0, 1, true};
  char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + k]) & 0x3F);
  return {cp, n, false};
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto [n, ok] = scan_sequence(bytes, pos);
    if (ok) {
      out.append(bytes.substr(pos, n));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace unicode

namespace {

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 are moved to U+0100.. so
// that every token is printable text.
const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// Inverse of byte_to_char; -1 for characters outside the byte alphabet.
int char_to_byte(char32_t c) {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    const auto& fwd = byte_to_char();
    for (int b = 0; b < 256; ++b) t[fwd[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

// The reference's ByteLevel decoder maps a token through the byte alphabet when every character is in it
// and otherwise keeps the token's own UTF-8 (added tokens such as "<think>" are stored as plain text).
std::string stored_to_bytes(const std::string& stored, bool* in_alphabet) {
  std::string out;
  size_t pos = 0;
  while (pos < stored.size()) {
    const auto ch = unicode::decode_utf8(stored, pos);
    const int b = ch.invalid ? -1 : char_to_byte(ch.cp);
    if (b < 0) {
      *in_alphabet = false;
      return stored;
    }
    out.push_back(static_cast<char>(b));
    pos += ch.length;
  }
  *in_alphabet = true;
  return out;
}

enum class CharClass : uint8_t { Letter, Number, Space, Other };

struct CodepointText {
  std::vector<char32_t> cps;  // invalid bytes appear as themselves with class Other
  std::vector<CharClass> classes;
  std::vector<uint32_t> offsets;  // byte offset of each codepoint, plus the end
};

CodepointText split_codepoints(std::string_view text) {
  CodepointText t;
  t.cps.reserve(text.size());
  t.classes.reserve(text.size());
  t.offsets.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    const auto ch = unicode::decode_utf8(text, pos);
    CharClass cls = CharClass::Other;
    if (!ch.invalid) {
      if (unicode::is_letter(ch.cp))
        cls = CharClass::Letter;
      else if (unicode::is_number(ch.cp))
        cls = CharClass::Number;
      else if (unicode::is_whitespace(ch.cp))
        cls = CharClass::Space;
    }
    t.cps.push_back(ch.invalid ? 0xFFFFFFFFu : ch.cp);
    t.classes.push_back(cls);
    t.offsets.push_back(static_cast<uint32_t>(pos));
    pos += ch.length;
  }
  t.offsets.push_back(static_cast<uint32_t>(text.size()));
  return t;
}

char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Length of the contraction ('s 't 're 've 'm 'll 'd) at i, or 0.
size_t match_contraction(const CodepointText& t, size_t i, size_t end, bool ignore_case) {
  if (t.cps[i] != '\'' || i + 1 >= end) return 0;
  auto at = [&](size_t k) { return ignore_case ? ascii_lower(t.cps[k]) : t.cps[k]; };
  const char32_t c1 = at(i + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 < end) {
    const char32_t c2 = at(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  }
  return 0;
}

// `\s+(?!\S)|\s+` at i (a whitespace character): the run, minus its last character when a non-space
// follows, so that the last space can lead the next word.
size_t match_space_run(const CodepointText& t, size_t i, size_t end) {
  size_t j = i;
  while (j < end && t.classes[j] == CharClass::Space) ++j;
  const size_t run = j - i;
  if (j == end || run == 1) return run;
  return run - 1;
}

// The GPT-2 regex `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, matched by
// hand: alternatives in order, the first that matches at i wins, as the backtracking engine does.
size_t match_gpt2(const CodepointText& t, size_t i, size_t end) {
  if (size_t n = match_contraction(t, i, end, false)) return n;
  const auto cls = [&](size_t k) { return t.classes[k]; };
  for (CharClass want : {CharClass::Letter, CharClass::Number, CharClass::Other}) {
    size_t j = i;
    if (t.cps[j] == ' ' && j + 1 < end && cls(j + 1) == want) ++j;
    if (cls(j) != want) continue;
    while (j < end && cls(j) == want) ++j;
    return j - i;
  }
  return match_space_run(t, i, end);
}

// The Llama-3 regex `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`; Qwen2's differs only in taking one digit at a time.
size_t match_llama3(const CodepointText& t, size_t i, size_t end, size_t max_digits) {
  if (size_t n = match_contraction(t, i, end, true)) return n;
  const auto cls = [&](size_t k) { return t.classes[k]; };
  const auto newline = [&](size_t k) { return t.cps[k] == '\r' || t.cps[k] == '\n'; };
  {
    size_t j = i;
    if (cls(j) != CharClass::Letter && cls(j) != CharClass::Number && !newline(j) && j + 1 < end &&
        cls(j + 1) == CharClass::Letter)
      ++j;
    if (cls(j) == CharClass::Letter) {
      while (j < end && cls(j) == CharClass::Letter) ++j;
      return j - i;
    }
  }
  if (cls(i) == CharClass::Number) {
    size_t j = i;
    while (j < end && j - i < max_digits && cls(j) == CharClass::Number) ++j;
    return j - i;
  }
  {
    size_t j = i;
    if (t.cps[j] == ' ' && j + 1 < end && cls(j + 1) == CharClass::Other) ++j;
    if (cls(j) == CharClass::Other) {
      while (j < end && cls(j) == CharClass::Other) ++j;
      while (j < end && newline(j)) ++j;
      return j - i;
    }
  }
  // Here cls(i) is Space. `\s*[\r\n]+`: greedy \s* gives back up to the run's last newline.
  size_t run_end = i;
  while (run_end < end && cls(run_end) == CharClass::Space) ++run_end;
  for (size_t k = run_end; k > i; --k) {
    if (newline(k - 1)) return k - i;
  }
  return match_space_run(t, i, end);
}

}  // namespace

std::optional<BpePreTokenizer> bpe_pre_tokenizer_from_name(std::string_view name) {
  if (name == "gpt2" || name == "gpt-2" || name == "default" || name.empty()) return BpePreTokenizer::Gpt2;
  if (name == "smollm") return BpePreTokenizer::SmolLM;
  for (std::string_view n : {"llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx", "pixtral"})
    if (name == n) return BpePreTokenizer::Llama3;
  for (std::string_view n : {"qwen2", "deepseek-r1-qwen", "megrez"})
    if (name == n) return BpePreTokenizer::Qwen2;
  return std::nullopt;
}

bool is_end_of_turn_text(std::string_view token) {
  for (std::string_view s : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "</s>",
                             "<end_of_turn>", "<|end_of_text|>"})
    if (token == s) return true;
  return false;
}

void SpecialTokenMatcher::add(std::string text, int id, bool control) {
  if (text.empty()) return;
  auto& bucket = by_first_byte_[static_cast<uint8_t>(text[0])];
  tokens_.push_back({std::move(text), id, control});
  bucket.push_back(static_cast<int>(tokens_.size()) - 1);
  std::stable_sort(bucket.begin(), bucket.end(),
                   [&](int a, int b) { return tokens_[a].text.size() > tokens_[b].text.size(); });
}

std::vector<TextPiece> SpecialTokenMatcher::split(std::string_view text, bool parse_special) const {
  std::vector<TextPiece> out;
  size_t raw_start = 0, pos = 0;
  while (pos < text.size()) {
    const Entry* match = nullptr;
    for (int k : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const Entry& e = tokens_[k];
      if ((parse_special || !e.control) && text.compare(pos, e.text.size(), e.text) == 0) {
        match = &e;
        break;
      }
    }
    if (!match) {
      ++pos;
      continue;
    }
    if (pos > raw_start) out.push_back({text.substr(raw_start, pos - raw_start), -1});
    out.push_back({text.substr(pos, match->text.size()), match->id});
    pos += match->text.size();
    raw_start = pos;
  }
  if (raw_start < text.size()) out.push_back({text.substr(raw_start), -1});
  return out;
}

BpeTokenizer::BpeTokenizer(BpeVocab vocab, BpePreTokenizer pre)
    : tokens_(std::move(vocab.tokens)),
      pre_(pre),
      bos_id_(vocab.bos_id),
      eos_id_(vocab.eos_id),
      unk_id_(vocab.unk_id),
      add_bos_(vocab.add_bos),
      ignore_merges_(vocab.ignore_merges) {
  const int n = static_cast<int>(tokens_.size());
  if (n == 0) throw Error("BPE tokenizer: tokenizer.ggml.tokens is empty");
  if (!vocab.token_types.empty() && static_cast<int>(vocab.token_types.size()) != n)
    throw Error("BPE tokenizer: tokenizer.ggml.token_type has " + std::to_string(vocab.token_types.size()) +
                " entries, expected one per token (" + std::to_string(n) + ")");
  const std::initializer_list<std::pair<const char*, int>> special_ids = {
      {"bos_token_id", bos_id_}, {"eos_token_id", eos_id_}, {"unknown_token_id", unk_id_}};
  for (const auto& [name, id] : special_ids)
    if (id < -1 || id >= n)
      throw Error(std::string("BPE tokenizer: tokenizer.ggml.") + name + " = " + std::to_string(id) +
                  " is outside the vocabulary of " + std::to_string(n) + " tokens");

  const auto type_of = [&](int id) {
    return vocab.token_types.empty() ? TokenType::Normal : static_cast<TokenType>(vocab.token_types[id]);
  };
  std::unordered_map<std::string, int> ids;
  ids.reserve(n);
  bytes_.resize(n);
  end_of_generation_.assign(n, false);
  std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
  const bool typed = !vocab.token_types.empty();
  for (int id = 0; id < n; ++id) {
    ids.emplace(tokens_[id], id);
    bool in_alphabet = false;
    bytes_[id] = stored_to_bytes(tokens_[id], &in_alphabet);
    const TokenType type = type_of(id);
    const bool added = type == TokenType::Control || type == TokenType::UserDefined;
    // Like the reference's GGUF import: a control token spelled outside the byte alphabet is a mislabel
    // that BPE could never produce, so it is not matched in text either.
    if (added && !tokens_[id].empty() && (type == TokenType::UserDefined || in_alphabet)) {
      specials_.add(tokens_[id], id, type == TokenType::Control);
    }
    if (in_alphabet && !added) {
      if (bytes_[id].size() == 1 && byte_token_[static_cast<uint8_t>(bytes_[id][0])] < 0)
        byte_token_[static_cast<uint8_t>(bytes_[id][0])] = id;
      if (ignore_merges_) byte_ids_.emplace(bytes_[id], id);
    }
    if ((added || !typed) && is_end_of_turn_text(tokens_[id])) end_of_generation_[id] = true;
  }

  merges_ = BpeMerges(vocab.merges, ids);
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  const CodepointText t = split_codepoints(text);
  const size_t n = t.cps.size();
  auto split_segment = [&](size_t begin, size_t end) {
    size_t i = begin;
    while (i < end) {
      size_t len = 0;
      switch (pre_) {
        case BpePreTokenizer::Gpt2:
        case BpePreTokenizer::SmolLM:
          len = match_gpt2(t, i, end);
          break;
        case BpePreTokenizer::Llama3:
          len = match_llama3(t, i, end, 3);
          break;
        case BpePreTokenizer::Qwen2:
          len = match_llama3(t, i, end, 1);
          break;
      }
      words.emplace_back(text.substr(t.offsets[i], t.offsets[i + len] - t.offsets[i]));
      i += len;
    }
  };
  if (pre_ != BpePreTokenizer::SmolLM) {
    split_segment(0, n);
    return words;
  }
  // HF Digits(individual_digits) runs first, so the regex's lookahead stops at each digit.
  size_t begin = 0;
  for (size_t i = 0; i < n; ++i) {
    if (t.classes[i] != CharClass::Number) continue;
    split_segment(begin, i);
    split_segment(i, i + 1);
    begin = i + 1;
  }
  split_segment(begin, n);
  return words;
}

BpeMerges::BpeMerges(const std::vector<std::string>& merges, const std::unordered_map<std::string, int>& ids) {
  table_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) continue;
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    const auto l = ids.find(left), r = ids.find(right), merged = ids.find(left + right);
    if (l == ids.end() || r == ids.end() || merged == ids.end()) continue;
    const uint64_t key = (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second);
    table_.emplace(key, std::pair{static_cast<int>(rank), merged->second});
  }
}

void BpeMerges::apply(std::vector<int>& id) const {
  // Symbols form a linked list over fixed slots; a heap orders candidate merges by (rank, left slot), which
  // is the reference's order (lowest rank first, leftmost on ties).
  const int n = static_cast<int>(id.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto key = [](int l, int r) { return (static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r); };
  using Candidate = std::tuple<int, int, int, int, int>;  // rank, left slot, right slot, left id, right id
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int l) {
    if (l < 0 || next[l] < 0) return;
    const int r = next[l];
    const auto it = table_.find(key(id[l], id[r]));
    if (it != table_.end()) heap.emplace(it->second.first, l, r, id[l], id[r]);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, l, r, lid, rid] = heap.top();
    heap.pop();
    if (id[l] != lid || next[l] != r || id[r] != rid) continue;  // stale: a neighbour merged first
    id[l] = table_.at(key(lid, rid)).second;
    id[r] = -1;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    push(prev[l]);
    push(l);
  }
  int kept = 0;
  for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) id[kept++] = id[i];
  id.resize(kept);
}

void BpeTokenizer::bpe_word(std::string_view word, std::vector<int>& out) const {
  std::vector<int> symbols;
  symbols.reserve(word.size());
  // A byte with no token is dropped, not mapped to unk: the reference's BPE (no unk_token) and llama.cpp
  // both do so, and SmolLM2 lacks tokens for 21 bytes (04 06 13 14 16 1D C0 C1 F1 F2 F5..FF).
  for (unsigned char b : word)
    if (byte_token_[b] >= 0) symbols.push_back(byte_token_[b]);
  merges_.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int>& out) const {
  if (ignore_merges_) {
    const auto it = byte_ids_.find(std::string(word));
    if (it != byte_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::string key(word);
  {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  bpe_word(word, out);
  std::lock_guard lock(cache_mutex_);
  if (cache_.size() >= 100000) cache_.clear();  // bounds memory on long runs of unique words
  cache_.emplace(std::move(key), std::vector<int>(out.begin() + before, out.end()));
}

std::vector<int> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int> out;
  for (const TextPiece& piece : specials_.split(text, parse_special)) {
    if (piece.id >= 0) {
      out.push_back(piece.id);
      continue;
    }
    for (const std::string& word : pre_tokenize(piece.text)) encode_word(word, out);
  }
  return out;
}

Encoding BpeTokenizer::encode_with_bytes(std::string_view text, bool parse_special) const {
  Encoding out;
  for (const TextPiece& piece : specials_.split(text, parse_special)) {
    const auto base = static_cast<size_t>(piece.text.data() - text.data());
    if (piece.id >= 0) {
      out.ids.push_back(piece.id);
      out.bytes.push_back({base, base + piece.text.size()});
      continue;
    }
    std::vector<int> ids;
    for (const std::string& word : pre_tokenize(piece.text)) encode_word(word, ids);
    // The tokens' bytes, in order, are the piece's bytes less the dropped ones: each byte of a token is the next
    // byte of the piece that equals it.
    size_t cursor = 0;
    for (int id : ids) {
      TokenBytes span{base + cursor, base + cursor};
      bool first = true;
      for (char byte : bytes_[id]) {
        while (cursor < piece.text.size() && piece.text[cursor] != byte) ++cursor;
        if (cursor == piece.text.size()) break;
        if (first) span.begin = base + cursor;
        first = false;
        span.end = base + ++cursor;
      }
      if (first) span.end = span.begin;
      out.ids.push_back(id);
      out.bytes.push_back(span);
    }
  }
  return out;
}

const std::string& BpeTokenizer::token_bytes(int id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("BPE tokenizer: token id " + std::to_string(id) + " is outside the vocabulary of " +
                std::to_string(vocab_size()) + " tokens");
  return bytes_[id];
}

std::string BpeTokenizer::decode(const std::vector<int>& ids) const {
  // The reference joins every token's bytes and repairs UTF-8 once over the whole sequence, so a
  // character split across tokens decodes whole and only truly broken bytes become U+FFFD.
  std::string bytes;
  for (int id : ids)
    if (id >= 0 && id < vocab_size()) bytes += bytes_[id];  // unknown ids carry no text
  return unicode::utf8_lossy(bytes);
}

std::string BpeTokenizer::token_text(int id) const { return decode({id}); }

bool BpeTokenizer::is_end_of_generation(int id) const {
  if (id < 0 || id >= vocab_size()) return false;
  return id == eos_id_ || end_of_generation_[id];
}

}  // namespace kvscope::model
