#pragma once
// A whole small file (a policy file, a chat template, a needle text) as a string. Callers name the file in their
// own error, a usage error or a runtime one as the file is the user's argument or part of a model.
#include <filesystem>
#include <optional>
#include <string>

namespace kvscope {

// The file's bytes, or nothing when it cannot be opened or read.
std::optional<std::string> read_file_text(const std::filesystem::path& path);

}  // namespace kvscope
