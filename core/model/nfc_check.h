#pragma once
// The NFC quick check of Unicode UAX #15: whether text is certainly in Normalization Form C already. kvscope does
// not implement NFC itself; tokenizers that ask for it (Qwen2's tokenizer.json) tokenize text that passes this
// check unchanged and refuse the rest, rather than tokenizing it differently from the reference.
#include <cstddef>
#include <optional>
#include <string_view>

namespace kvscope::model {

// Byte offset of the first code point at which the quick check is not "yes" (a character NFC would change or
// might compose, or combining marks out of canonical order); nullopt when the text is certainly NFC.
std::optional<std::size_t> first_non_nfc_position(std::string_view utf8);

}  // namespace kvscope::model
