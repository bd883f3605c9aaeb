#pragma once
// The process's one embedded CPython interpreter (Debian's libpython, with the numpy of the system or of
// the venv named by VIRTUAL_ENV). It starts on first use, from whichever thread asks first, and then lets go
// of the GIL: every call into Python code takes it with `Gil` for the length of the call only, so the
// engine's threads never wait on an idle interpreter. User policies run here, beside kvscope's own helpers
// (chat templates, Hugging Face tokenizers, LongBench metrics).
//
// It is isolated: the current directory, a script's or a model's folder are never on sys.path, PYTHONPATH,
// PYTHONHOME and the user's site-packages are ignored, and its home and standard library are the ones of
// the Python kvscope was built against (CMakeLists.txt), whatever python3 comes first on PATH. Code in it
// cannot end the process: os._exit raises ProcessExitRefused (SystemExit, like it, is an ordinary error).
#include <filesystem>
#include <optional>
#include <string>

#include <pybind11/pybind11.h>

namespace kvscope::python {

// Starts the interpreter once (thread-safe). Throws Error when it cannot start or numpy is missing.
void ensure_started();

// Holds the GIL for its lifetime (starting the interpreter when needed).
class Gil {
 public:
  Gil() = default;
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  struct Started {
    Started() { ensure_started(); }
  } started_;  // before acquire_: the interpreter must exist to take its lock
  pybind11::gil_scoped_acquire acquire_;
};

// Where an exception raised by a user's file comes from, and what it says: the innermost traceback frame
// in `file` (or the line of a SyntaxError in it), the function there, and "Type: message".
struct ExceptionReport {
  std::optional<int> line;
  std::string function;
  std::string text;
};
// Call with the GIL held, from the catch block of `error`.
ExceptionReport describe(pybind11::error_already_set& error, const std::filesystem::path& file);

// A namespace of kvscope's own Python helpers (`source`, run once on first use and kept for the process),
// e.g. the Jinja2 environment of chat templates. GIL held.
pybind11::dict helper_namespace(const std::string& name, const char* source);

// Runs `source` as a fresh module named after `file` (not registered in sys.modules, so two files of one
// name never meet) and returns it. Python errors propagate as error_already_set. GIL held.
pybind11::module_ load_module(const std::filesystem::path& file, const std::string& source);

// The first os._exit(...) that Python code attempted (and was refused) since the last call, e.g.
// "os._exit(0)", clearing the record: a policy that catches the refusal still fails. GIL held.
std::optional<std::string> take_exit_attempt();

}  // namespace kvscope::python
