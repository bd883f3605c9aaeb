#include "core/eval/evidence_tokens.h"

#include <algorithm>

namespace kvscope::eval {

std::vector<EvidenceText> carry_evidence(const std::vector<EvidenceText>& evidence,
                                         const std::vector<TextSegment>& segments) {
  std::vector<EvidenceText> out;
  for (const EvidenceText& stretch : evidence) {
    bool found = false;
    EvidenceText moved{0, 0, stretch.kind};
    for (const TextSegment& segment : segments) {
      const std::size_t begin = std::max(stretch.begin, segment.from);
      const std::size_t end = std::min(stretch.end, segment.from + segment.length);
      if (begin >= end) continue;
      const std::size_t new_begin = segment.to + (begin - segment.from), new_end = segment.to + (end - segment.from);
      moved.begin = found ? std::min(moved.begin, new_begin) : new_begin;
      moved.end = found ? std::max(moved.end, new_end) : new_end;
      found = true;
    }
    if (found) out.push_back(moved);
  }
  return out;
}

std::vector<TextSegment> truncation_segments(std::string_view original, std::size_t head_end, std::size_t tail_begin,
                                             std::string_view head, std::string_view tail) {
  head_end = std::min(head_end, original.size());
  tail_begin = std::min(tail_begin, original.size());
  const std::string_view kept_head = original.substr(0, head_end), kept_tail = original.substr(tail_begin);
  std::size_t prefix = 0;
  while (prefix < kept_head.size() && prefix < head.size() && kept_head[prefix] == head[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < kept_tail.size() && suffix < tail.size() &&
         kept_tail[kept_tail.size() - 1 - suffix] == tail[tail.size() - 1 - suffix])
    ++suffix;
  std::vector<TextSegment> out;
  if (prefix > 0) out.push_back({0, prefix, 0});
  if (suffix > 0) out.push_back({original.size() - suffix, suffix, head.size() + tail.size() - suffix});
  return out;
}

std::vector<TextSegment> user_text_segments(std::string_view text, std::string_view rendered,
                                            std::string_view before_marker, std::string_view after_marker) {
  if (rendered.size() >= before_marker.size() + after_marker.size() && rendered.starts_with(before_marker) &&
      rendered.ends_with(after_marker)) {
    const std::string_view middle =
        rendered.substr(before_marker.size(), rendered.size() - before_marker.size() - after_marker.size());
    if (middle == text) return {{0, text.size(), before_marker.size()}};
    const std::size_t at = middle.empty() ? std::string_view::npos : text.find(middle);
    if (at != std::string_view::npos) return {{at, middle.size(), before_marker.size()}};
  }
  const std::size_t at = text.empty() ? std::string_view::npos : rendered.find(text);
  if (at != std::string_view::npos) return {{0, text.size(), at}};
  return {};
}

std::vector<EvidenceSpan> evidence_token_spans(const std::vector<EvidenceText>& evidence,
                                               const std::vector<model::TokenBytes>& bytes) {
  std::vector<EvidenceSpan> out;
  for (const EvidenceText& stretch : evidence) {
    int first = -1, last = -1;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i].begin >= bytes[i].end || bytes[i].begin >= stretch.end || bytes[i].end <= stretch.begin) continue;
      if (first < 0) first = static_cast<int>(i);
      last = static_cast<int>(i);
    }
    if (first >= 0) out.push_back({first, last, stretch.kind});
  }
  return out;
}

}  // namespace kvscope::eval
