#pragma once
// Deterministic byte mutations of file images, shared by the GGUF and safetensors mutation tests: every mutant
// must either load or throw kvscope::Error naming the file on one line; anything else fails the test.
#include <catch2/catch.hpp>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "tests/core/model/test_support.h"

namespace kvscope::test {

// Values that tend to hit boundary checks when written over a count, length, offset or type field.
inline constexpr uint64_t kInterestingValues[] = {
    0,     1,     2,          3,          4,          5,          7,          8,          9,     12,
    13,    16,    31,         32,         33,         63,         64,         255,        256,   4096,
    65535, 65536, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1ull << 32, 1ull << 62, 1ull << 63, ~0ull, ~0ull - 31};

inline void mutate(std::vector<uint8_t>& bytes, Rng& rng) {
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const std::size_t at = rng.below(bytes.size());
    switch (rng.below(6)) {
      case 0:  // flip one bit
        bytes[at] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:  // random byte
        bytes[at] = rng.byte();
        break;
      case 2: {  // a boundary value over 4 or 8 bytes, as a u32 or u64 field would hold it
        const uint64_t value = kInterestingValues[rng.below(std::size(kInterestingValues))];
        const std::size_t width = rng.below(2) ? 8 : 4;
        for (std::size_t i = 0; i < width && at + i < bytes.size(); ++i)
          bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
        break;
      }
      case 3:  // truncate
        bytes.resize(at);
        break;
      case 4: {  // delete a short run, shifting every later field
        const std::size_t n = std::min<std::size_t>(1 + rng.below(16), bytes.size() - at);
        bytes.erase(bytes.begin() + static_cast<long>(at), bytes.begin() + static_cast<long>(at + n));
        break;
      }
      default: {  // duplicate a short run
        const std::size_t n = std::min<std::size_t>(1 + rng.below(16), bytes.size() - at);
        const std::vector<uint8_t> run(bytes.begin() + static_cast<long>(at),
                                       bytes.begin() + static_cast<long>(at + n));
        bytes.insert(bytes.begin() + static_cast<long>(at), run.begin(), run.end());
        break;
      }
    }
  }
}

struct MutationOutcome {
  int loaded = 0;
  int rejected = 0;
};

// Mutates `original` `count` times; `load(bytes)` opens (and uses) a mutant and may throw only kvscope::Error,
// whose message must name `file_name` on a single line.
template <class Load>
MutationOutcome run_mutants(const std::vector<uint8_t>& original, uint64_t seed, int count,
                            const std::string& file_name, Load&& load) {
  Rng rng(seed);
  MutationOutcome outcome;
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> bytes = original;
    mutate(bytes, rng);
    INFO("mutant " << i << " of seed " << seed);
    try {
      load(bytes);
      ++outcome.loaded;
    } catch (const kvscope::Error& e) {
      const std::string message = e.what();
      if (message.find(file_name) == std::string::npos || message.find('\n') != std::string::npos)
        FAIL("error message lacks the file name or spans lines: " << message);
      ++outcome.rejected;
    }
  }
  return outcome;
}

}  // namespace kvscope::test
