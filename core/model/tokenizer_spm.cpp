#include "core/model/tokenizer_spm.h"

#include <algorithm>
#include <queue>
#include <tuple>

#include "core/common/error.h"

namespace kvscope::model {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's stand-in for ' '

// "<0xAB>" -> 0xAB, otherwise -1.
int parse_byte_token(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(s[3]), lo = hex(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos)).append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

SpmTokenizer::SpmTokenizer(SpmVocab vocab)
    : tokens_(std::move(vocab.tokens)),
      scores_(std::move(vocab.scores)),
      bos_id_(vocab.bos_id),
      eos_id_(vocab.eos_id),
      unk_id_(vocab.unk_id),
      add_bos_(vocab.add_bos),
      space_prefix_(vocab.space_prefix),
      split_at_spaces_(vocab.split_at_spaces),
      byte_fallback_(vocab.byte_fallback),
      fuse_unk_(vocab.fuse_unk),
      strip_leading_space_(vocab.strip_leading_space) {
  const int n = static_cast<int>(tokens_.size());
  if (n == 0) throw Error("SentencePiece tokenizer: tokenizer.ggml.tokens is empty");
  if (scores_.empty()) scores_.assign(n, 0.0f);
  if (static_cast<int>(scores_.size()) != n)
    throw Error("SentencePiece tokenizer: tokenizer.ggml.scores has " + std::to_string(scores_.size()) +
                " entries, expected one per token (" + std::to_string(n) + ")");
  if (!vocab.token_types.empty() && static_cast<int>(vocab.token_types.size()) != n)
    throw Error("SentencePiece tokenizer: tokenizer.ggml.token_type has " + std::to_string(vocab.token_types.size()) +
                " entries, expected one per token (" + std::to_string(n) + ")");
  const std::initializer_list<std::pair<const char*, int>> special_ids = {
      {"bos_token_id", bos_id_}, {"eos_token_id", eos_id_}, {"unknown_token_id", unk_id_}};
  for (const auto& [name, id] : special_ids)
    if (id < -1 || id >= n)
      throw Error(std::string("SentencePiece tokenizer: tokenizer.ggml.") + name + " = " + std::to_string(id) +
                  " is outside the vocabulary of " + std::to_string(n) + " tokens");

  const bool typed = !vocab.token_types.empty();
  byte_value_.assign(n, -1);
  end_of_generation_.assign(n, false);
  std::fill(std::begin(byte_token_), std::end(byte_token_), -1);
  for (int id = 0; id < n; ++id) {
    const std::string& piece = tokens_[id];
    const int byte = parse_byte_token(piece);
    TokenType type =
        typed ? static_cast<TokenType>(vocab.token_types[id]) : (byte >= 0 ? TokenType::Byte : TokenType::Normal);
    if (type == TokenType::Byte && byte >= 0) {
      byte_value_[id] = byte;
      if (byte_token_[byte] < 0) byte_token_[byte] = id;
    }
    if (type == TokenType::Normal || type == TokenType::UserDefined) piece_ids_.emplace(piece, id);
    if (type == TokenType::Control || type == TokenType::UserDefined)
      specials_.add(piece, id, type == TokenType::Control);
    if ((type == TokenType::Control || type == TokenType::UserDefined || !typed) && is_end_of_turn_text(piece))
      end_of_generation_[id] = true;
  }
  merges_ = BpeMerges(vocab.merges, piece_ids_);
}

void SpmTokenizer::append_unknown(std::string_view character, std::vector<int>& out) const {
  const bool all_bytes = std::all_of(character.begin(), character.end(),
                                     [&](char c) { return byte_token_[static_cast<uint8_t>(c)] >= 0; });
  if (byte_fallback_ && all_bytes) {
    for (char c : character) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
  } else if (unk_id_ >= 0) {
    out.push_back(unk_id_);
  }
}

void SpmTokenizer::encode_text(std::string_view text, std::vector<int>& out) const {
  if (merges_.empty()) {
    encode_by_score(text, out);
  } else {
    encode_by_rank(text, out);
  }
}

void SpmTokenizer::encode_by_rank(std::string_view text, std::vector<int>& out) const {
  // The reference's BPE model (tokenizers models/bpe/model.rs merge_word): one symbol per character, a character
  // outside the vocabulary as its byte tokens (byte_fallback) or unk (fused with a preceding unk when fuse_unk),
  // then the ranked merges.
  std::vector<int> symbols;
  bool last_was_unknown = false;
  for (size_t pos = 0; pos < text.size();) {
    const auto ch = unicode::decode_utf8(text, pos);
    const std::string_view character = text.substr(pos, ch.length);
    pos += ch.length;
    const auto it = piece_ids_.find(std::string(character));
    if (it != piece_ids_.end()) {
      symbols.push_back(it->second);
      last_was_unknown = false;
      continue;
    }
    const size_t before = symbols.size();
    append_unknown(character, symbols);
    const bool became_unk = symbols.size() == before + 1 && symbols.back() == unk_id_;
    if (became_unk && fuse_unk_ && last_was_unknown) symbols.pop_back();
    last_was_unknown = became_unk;
  }
  merges_.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void SpmTokenizer::encode_by_score(std::string_view text, std::vector<int>& out) const {
  // Symbols are spans of `text` in a linked list over fixed slots; the heap pops the best-scoring adjacent
  // pair whose concatenation is a piece, leftmost on ties, as sentencepiece's BPE does.
  struct Symbol {
    uint32_t begin, length;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t pos = 0; pos < text.size();) {
    const auto ch = unicode::decode_utf8(text, pos);
    const int i = static_cast<int>(sym.size());
    sym.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(ch.length), i - 1, i + 1});
    pos += ch.length;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  auto span = [&](const Symbol& s) { return text.substr(s.begin, s.length); };

  using Candidate = std::tuple<float, int, int, int, uint32_t>;  // score, -left, left, right, combined length
  std::priority_queue<Candidate> heap;
  auto push = [&](int l) {
    if (l < 0 || sym[l].next < 0) return;
    const int r = sym[l].next;
    const uint32_t length = sym[l].length + sym[r].length;
    const auto it = piece_ids_.find(std::string(text.substr(sym[l].begin, length)));
    if (it != piece_ids_.end()) heap.emplace(scores_[it->second], -l, l, r, length);
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const auto [score, neg_l, l, r, length] = heap.top();
    heap.pop();
    (void)score;
    (void)neg_l;
    if (sym[l].length == 0 || sym[r].length == 0 || sym[l].next != r || sym[l].length + sym[r].length != length)
      continue;  // stale: one side merged with something else first
    sym[l].length = length;
    sym[r].length = 0;
    sym[l].next = sym[r].next;
    if (sym[r].next >= 0) sym[sym[r].next].prev = l;
    push(sym[l].prev);
    push(l);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = span(sym[i]);
    const auto it = piece_ids_.find(std::string(piece));
    if (it != piece_ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Only single characters can be missing (merges only form pieces).
    append_unknown(piece, out);
  }
}

std::string SpmTokenizer::escape_piece(std::string_view piece, bool at_start, std::vector<size_t>* starts) const {
  std::string spaced;
  spaced.reserve(piece.size());
  if (starts) starts->clear();
  for (size_t i = 0; i < piece.size(); ++i) {
    const bool space = piece[i] == ' ';
    spaced += space ? kSpace : piece.substr(i, 1);
    if (starts) starts->insert(starts->end(), space ? kSpace.size() : 1, i);
  }
  const bool starts_with_space = spaced.starts_with(kSpace);
  bool prefix = false;
  switch (space_prefix_) {
    case SpacePrefix::None:
      break;
    case SpacePrefix::EveryPiece:
      prefix = true;
      break;
    case SpacePrefix::EveryPieceUnlessSpace:
      prefix = !starts_with_space;
      break;
    case SpacePrefix::FirstPieceUnlessSpace:  // tokenizers: only the split at original offset 0
      prefix = !starts_with_space && at_start;
      break;
  }
  if (starts) {
    if (prefix) starts->insert(starts->begin(), kSpace.size(), 0);  // the prefix stands for no input byte
    starts->push_back(piece.size());
  }
  return prefix ? std::string(kSpace) + spaced : spaced;
}

std::vector<int> SpmTokenizer::encode_escaped(const std::string& escaped) const {
  std::vector<int> out;
  if (!split_at_spaces_) {
    encode_text(escaped, out);
    return out;
  }
  // Metaspace split (SplitDelimiterBehavior::MergedWithNext): every '▁' starts a new word.
  size_t begin = 0;
  while (begin < escaped.size()) {
    size_t end = escaped.find(kSpace, begin + 1);
    if (end == std::string::npos) end = escaped.size();
    encode_text(std::string_view(escaped).substr(begin, end - begin), out);
    begin = end;
  }
  return out;
}

std::vector<int> SpmTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int> out;
  // Special tokens are split off first, so the space prefix applies to each run of text between them, as in
  // llama.cpp, the reference's legacy Llama tokenizer and tokenizer.json's Prepend normalizer.
  for (const TextPiece& piece : specials_.split(text, parse_special)) {
    if (piece.id >= 0) {
      out.push_back(piece.id);
      continue;
    }
    const std::vector<int> ids = encode_escaped(escape_piece(piece.text, piece.text.data() == text.data(), nullptr));
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

size_t SpmTokenizer::escaped_length(int id, std::string_view escaped, size_t at) const {
  if (byte_value_[id] >= 0) return 1;
  if (id != unk_id_) return tokens_[id].size();
  // An unknown token came from a character outside the vocabulary (and without byte tokens); fused, from a run.
  auto length_at = [&](size_t pos) { return static_cast<size_t>(unicode::decode_utf8(escaped, pos).length); };
  auto unknown_at = [&](size_t pos) {
    return piece_ids_.find(std::string(escaped.substr(pos, length_at(pos)))) == piece_ids_.end();
  };
  size_t pos = at;
  do {
    pos += length_at(pos);
  } while (fuse_unk_ && !merges_.empty() && pos < escaped.size() && unknown_at(pos));
  return pos - at;
}

Encoding SpmTokenizer::encode_with_bytes(std::string_view text, bool parse_special) const {
  Encoding out;
  std::vector<size_t> starts;  // per escaped byte (and one past the end): the byte of the piece it came from
  for (const TextPiece& piece : specials_.split(text, parse_special)) {
    const auto base = static_cast<size_t>(piece.text.data() - text.data());
    if (piece.id >= 0) {
      out.ids.push_back(piece.id);
      out.bytes.push_back({base, base + piece.text.size()});
      continue;
    }
    const std::string escaped = escape_piece(piece.text, piece.text.data() == text.data(), &starts);
    size_t at = 0;
    for (int id : encode_escaped(escaped)) {
      const size_t end = std::min(at + escaped_length(id, escaped, at), escaped.size());
      out.ids.push_back(id);
      out.bytes.push_back({base + starts[at], base + starts[end]});
      at = end;
    }
  }
  return out;
}

std::string SpmTokenizer::decode(const std::vector<int>& ids) const {
  std::string out, run;  // run: pending bytes of consecutive byte tokens
  size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (unicode::utf8_lossy(run) == run) {
      out += run;
    } else {
      for (size_t k = 0; k < run_tokens; ++k) out += "\xEF\xBF\xBD";
    }
    run.clear();
    run_tokens = 0;
  };
  for (int id : ids) {
    if (id < 0 || id >= vocab_size()) continue;  // unknown ids carry no text
    if (byte_value_[id] >= 0) {
      run.push_back(static_cast<char>(byte_value_[id]));
      ++run_tokens;
      continue;
    }
    flush();
    out += replace_all(tokens_[id], kSpace, " ");
  }
  flush();
  if (strip_leading_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::string SpmTokenizer::token_text(int id) const {
  if (id < 0 || id >= vocab_size()) return {};
  if (byte_value_[id] >= 0)
    return byte_value_[id] < 0x80 ? std::string(1, static_cast<char>(byte_value_[id])) : "\xEF\xBF\xBD";
  return replace_all(tokens_[id], kSpace, " ");
}

bool SpmTokenizer::is_end_of_generation(int id) const {
  if (id < 0 || id >= vocab_size()) return false;
  return id == eos_id_ || end_of_generation_[id];
}

}  // namespace kvscope::model
