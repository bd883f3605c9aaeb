#pragma once
// `generate --logits-out FILE.npy`: every predicting step's next-token logits as one float32 array
// [steps, vocab] in NumPy's .npy format (version 1.0), so that another engine's logits can be compared with
// kvscope's on the same tokens (bench/cache_type_vs_llamacpp.py) without a kvscope reader.
#include <filesystem>
#include <string>
#include <vector>

#include "core/common/atomic_file.h"
#include "core/engine/run_observer.h"

namespace kvscope::app {

// Collects the logits of each step in order (the last prefill block's, then each decode step's).
class LogitsRecorder : public engine::RunObserver {
 public:
  void on_logits(const engine::StepInfo& step, const float* logits, int vocab) override;
  const std::vector<float>& values() const { return values_; }
  int steps() const { return steps_; }
  int vocab() const { return vocab_; }

 private:
  std::vector<float> values_;
  int steps_ = 0, vocab_ = 0;
};

// The .npy bytes of a little-endian float32 C-order array of shape [rows, cols].
std::string npy_float32_matrix(const std::vector<float>& values, int rows, int cols);

// Writes the recorder's logits to `path` atomically (see core/common/atomic_file.h).
void write_logits_npy(const std::filesystem::path& path, const LogitsRecorder& logits, Existing existing);

// "--force-tokens 12,7,9": the token ids, each a non-negative integer; throws UsageError naming the item.
std::vector<int> parse_token_ids(const std::string& list, const std::string& option);

}  // namespace kvscope::app
