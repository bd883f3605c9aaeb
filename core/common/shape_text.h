#pragma once
// "[a, b, c]" for tensor shapes in messages.
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

inline std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace kvscope
