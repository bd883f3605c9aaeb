#include "core/eval/longbench_evidence.h"

#include <algorithm>
#include <set>
#include <utility>

namespace kvscope::eval {
namespace {

bool word_byte(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
}

// ASCII letters lowered, every other byte as it is: byte offsets stay those of the original text.
std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string trimmed(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

}  // namespace

std::vector<EvidenceText> longbench_answer_evidence(const std::string& prompt, const std::string& question,
                                                    const LongBenchRecord& record) {
  if (record.context.empty()) return {};
  // The format puts the context verbatim just before the question; elsewhere only if the format is unusual.
  std::size_t context_begin = std::string::npos;
  if (prompt.size() >= question.size() + record.context.size() && prompt.ends_with(question) &&
      prompt.compare(prompt.size() - question.size() - record.context.size(), record.context.size(), record.context) ==
          0)
    context_begin = prompt.size() - question.size() - record.context.size();
  else
    context_begin = prompt.find(record.context);
  if (context_begin == std::string::npos) return {};
  const std::size_t context_end = context_begin + record.context.size();

  std::set<std::pair<std::size_t, std::size_t>> found;
  const std::string lowered = ascii_lower(prompt);
  for (const std::string& raw : record.answers) {
    const std::string answer = ascii_lower(trimmed(raw));
    if (answer.empty()) continue;
    for (std::size_t at = lowered.find(answer, context_begin);
         at != std::string::npos && at + answer.size() <= context_end; at = lowered.find(answer, at + 1)) {
      const std::size_t end = at + answer.size();
      if (at > 0 && word_byte(prompt[at - 1]) && word_byte(prompt[at])) continue;
      if (end < prompt.size() && word_byte(prompt[end]) && word_byte(prompt[end - 1])) continue;
      found.insert({at, end});
    }
  }
  std::vector<EvidenceText> out;
  for (const auto& [begin, end] : found) out.push_back({begin, end, "answer"});
  return out;
}

}  // namespace kvscope::eval
