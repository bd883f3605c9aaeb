#pragma once
// Errors are exceptions with one-line messages that name the file, the field and what was expected. They live
// in the lowest library (kernels) so every layer above throws the same types.
#include <stdexcept>
#include <string>

namespace kvscope {

// A failure at run time (bad file, bad data, I/O). The CLI exits with code 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user asked for something invalid (unknown policy, bad budget, bad flag value). The CLI exits with code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace kvscope
