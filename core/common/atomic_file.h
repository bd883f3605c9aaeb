#pragma once
// A whole file or none: written beside the target as PATH.partial, flushed to disk and renamed over PATH. A
// failure leaves any previous PATH untouched and removes the partial file; a process killed mid-write
// leaves at most PATH.partial, never a half-written PATH.
#include <filesystem>
#include <string>
#include <string_view>

namespace kvscope {

// Throws Error "cannot write <what> '<path>': <reason>".
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, const std::string& what = "file");

}  // namespace kvscope
