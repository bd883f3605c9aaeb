#include "app/logits_npy.h"

#include <algorithm>
#include <cstring>

#include "core/common/error.h"

namespace kvscope::app {

void LogitsRecorder::on_logits(const engine::StepInfo&, const float* logits, int vocab) {
  if (steps_ > 0 && vocab != vocab_)
    throw Error("--logits-out: step " + std::to_string(steps_) + " has " + std::to_string(vocab) +
                " logits, the steps before it " + std::to_string(vocab_));
  vocab_ = vocab;
  values_.insert(values_.end(), logits, logits + vocab);
  ++steps_;
}

std::string npy_float32_matrix(const std::vector<float>& values, int rows, int cols) {
  static_assert(sizeof(float) == 4, "float32 expected");
  if (static_cast<std::size_t>(rows) * cols != values.size())
    throw Error("npy: " + std::to_string(values.size()) + " values do not fill " + std::to_string(rows) + " x " +
                std::to_string(cols));
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  // The magic (6), version (2) and header length (2) and the header, padded with spaces and ended by a newline
  // to a multiple of 64 bytes, as the format asks so that the data is aligned.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  const std::size_t data_at = out.size();
  out.resize(data_at + values.size() * sizeof(float));
  // x86 and arm64 are little-endian, as '<f4' says.
  if (!values.empty()) std::memcpy(out.data() + data_at, values.data(), values.size() * sizeof(float));
  return out;
}

void write_logits_npy(const std::filesystem::path& path, const LogitsRecorder& logits, Existing existing) {
  write_file_atomically(path, npy_float32_matrix(logits.values(), logits.steps(), logits.vocab()), "--logits-out",
                        existing);
}

std::vector<int> parse_token_ids(const std::string& list, const std::string& option) {
  std::vector<int> ids;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, end - start);
    const bool digits = !item.empty() && item.size() <= 10 &&
                        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long long value = digits ? std::stoll(item) : -1;
    if (value < 0 || value > 0x7fffffff)
      throw UsageError(option + " '" + list + "': item " + std::to_string(ids.size() + 1) + " '" + item +
                       "' is not a token id (a non-negative integer; ids are separated by commas)");
    ids.push_back(static_cast<int>(value));
    start = end + 1;
  }
  return ids;
}

}  // namespace kvscope::app
