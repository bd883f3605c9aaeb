#pragma once
// A command never writes over one of its own inputs: `eval longbench --data F --predictions F` would replace
// the dataset with its predictions.
#include <filesystem>
#include <string>
#include <vector>

namespace kvscope {

struct NamedPath {
  std::string option;  // "--data", "--predictions", "trace" ...
  std::filesystem::path path;
};

// Throws UsageError "<output option> 'A' is the same file as <input option> 'B'; nothing was written ..." when
// the output is one of the inputs: the same path once made absolute and normal, or the same file
// (std::filesystem::equivalent, which sees through links and hard links). Inputs with an empty path are skipped.
void refuse_output_that_is_input(const NamedPath& output, const std::vector<NamedPath>& inputs);

}  // namespace kvscope
