#include "core/common/output_is_input.h"

#include "core/common/error.h"

namespace kvscope {

namespace fs = std::filesystem;

namespace {

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::absolute(a, ec).lexically_normal() == fs::absolute(b, ec).lexically_normal()) return true;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

}  // namespace

void refuse_output_that_is_input(const NamedPath& output, const std::vector<NamedPath>& inputs) {
  if (output.path.empty()) return;
  for (const auto& input : inputs)
    if (!input.path.empty() && same_file(output.path, input.path))
      throw UsageError(output.option + " '" + output.path.string() + "' is the same file as " + input.option + " '" +
                       input.path.string() + "'; nothing was written (give " + output.option + " another path)");
}

}  // namespace kvscope
