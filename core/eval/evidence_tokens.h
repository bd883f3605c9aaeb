#pragma once
// Carrying evidence stretches (evidence.h) from a sample's user text to token positions of the prompt the model
// runs: through middle truncation (the text rebuilt from the decoded head and tail), the chat template (the user
// text placed inside the rendered turn), and the tokenizer (each token's bytes of the rendered text).
#include <cstddef>
#include <string_view>
#include <vector>

#include "core/eval/evidence.h"
#include "core/model/tokenizer.h"

namespace kvscope::eval {

// Bytes [from, from + length) of one text that reappear unchanged at `to` of another.
struct TextSegment {
  std::size_t from = 0, length = 0, to = 0;
};

// Each stretch as the bytes of the new text its surviving bytes occupy (segments in increasing order): a
// stretch partly outside every segment keeps the part inside, one entirely outside is dropped.
std::vector<EvidenceText> carry_evidence(const std::vector<EvidenceText>& evidence,
                                         const std::vector<TextSegment>& segments);

// Middle truncation: `original` was cut to bytes [0, head_end) and [tail_begin, size) (the token boundaries),
// which came back decoded as `head` and `tail`, joined. Decoding may change their edges (a UTF-8 character
// split by the cut, a decoder stripping the tail's leading space), so what survives is the head's common
// prefix with the original and the tail's common suffix with it.
std::vector<TextSegment> truncation_segments(std::string_view original, std::size_t head_end, std::size_t tail_begin,
                                             std::string_view head, std::string_view tail);

// Where `text` sits in `rendered` (its chat turn), given how the template renders a marker: the text between
// the marker's prefix and suffix when both frame `rendered`, else the text's first occurrence. A template that
// trims the text leaves the trimmed part's segment. Empty when the text is not there.
std::vector<TextSegment> user_text_segments(std::string_view text, std::string_view rendered,
                                            std::string_view before_marker, std::string_view after_marker);

// Token positions (inclusive) of every stretch: the tokens whose bytes meet it, with `bytes` the tokens' bytes
// of the text the stretches refer to (position = index in `bytes`). A stretch no token holds is dropped.
std::vector<EvidenceSpan> evidence_token_spans(const std::vector<EvidenceText>& evidence,
                                               const std::vector<model::TokenBytes>& bytes);

}  // namespace kvscope::eval
