#pragma once
// LongBench's (v1, THUDM/LongBench) task table and scoring rules, written for kvscope in the embedded Python:
// its metrics are defined on Python strings (Unicode lower-casing, `re`'s \b and \d, str.split's whitespace,
// difflib's matching blocks), so restating them in Python is what makes them equal to the reference numbers.
// Python source only; longbench.h is the C++ face.

namespace kvscope::eval {

extern const char* const kLongBenchPython;

}  // namespace kvscope::eval
