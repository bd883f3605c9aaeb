#include "core/python/interpreter.h"

#include <Python.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include "core/common/error.h"
#include "core/common/project_paths.h"

namespace py = pybind11;

namespace kvscope::python {

namespace {

// Python-side helpers: compiling a user's file into a module, and reading an exception's location. Kept in
// Python because the traceback and SyntaxError objects are Python's to walk.
constexpr const char* kHostSource = R"PY(
import os, site, sys, traceback, types

def add_virtual_env(project_venvs):
    # A user's venv (VIRTUAL_ENV) of this interpreter's Python version lends its packages (torch, ...) first;
    # then the project's own (.deps/embedded-venv: transformers for Hugging Face tokenizers).
    roots = [os.environ.get("VIRTUAL_ENV")] + list(project_venvs)
    for root in roots:
        if not root:
            continue
        lib = os.path.join(root, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
        if os.path.isdir(lib):
            site.addsitedir(lib)

def load_module(path, source):
    module = types.ModuleType(os.path.splitext(os.path.basename(path))[0])
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)
    return module

def describe(exc, tb, path):
    line, function = None, ""
    if isinstance(exc, SyntaxError) and exc.filename == path:
        line = exc.lineno
    for frame, lineno in traceback.walk_tb(tb if tb is not None else exc.__traceback__):
        if frame.f_code.co_filename == path:
            line, function = lineno, frame.f_code.co_name
    if isinstance(exc, SyntaxError):
        # One line: Python's own rendering spreads over three (the source line and a caret).
        source = (exc.text or "").strip()
        text = "%s: %s" % (type(exc).__name__, exc.msg) + (" (in: %s)" % source if source else "")
    else:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return line, function, text
)PY";

// The project's venv for the embedded Python (scripts/setup_deps.sh), found like the default model.
std::vector<std::string> project_venvs() {
  std::vector<std::string> out;
  for (const auto& path : project_path_candidates(std::filesystem::path(".deps") / "embedded-venv"))
    out.push_back(path.string());
  return out;
}

std::once_flag started;
std::string start_failure;
py::dict* host = nullptr;  // never freed: the interpreter lives until the process ends

void start() {
  try {
    // No signal handlers: Ctrl-C stays kvscope's, not Python's.
    py::initialize_interpreter(false);
    {
      host = new py::dict();
      (*host)["__builtins__"] = py::module_::import("builtins");
      py::exec(kHostSource, *host);
      (*host)["add_virtual_env"](project_venvs());
      try {
        py::module_::import("numpy");
      } catch (py::error_already_set& e) {
        start_failure = std::string("the embedded Python ") + Py_GetVersion() +
                        " cannot import numpy (install Debian's python3-numpy, or set VIRTUAL_ENV to a venv of "
                        "this Python version that has it): " + e.what();
      }
    }
    PyEval_SaveThread();  // the GIL is taken per call from here on
  } catch (const std::exception& e) {
    start_failure = std::string("the embedded Python interpreter did not start: ") + e.what();
  }
}

}  // namespace

void ensure_started() {
  std::call_once(started, start);
  if (!start_failure.empty()) throw Error(start_failure);
}

ExceptionReport describe(py::error_already_set& error, const std::filesystem::path& file) {
  ExceptionReport report;
  try {
    py::tuple t = (*host)["describe"](error.value(), error.trace(), file.string());
    if (!t[0].is_none()) report.line = t[0].cast<int>();
    report.function = t[1].cast<std::string>();
    report.text = t[2].cast<std::string>();
  } catch (const std::exception&) {
    report.text = error.what();
  }
  return report;
}

py::dict helper_namespace(const std::string& name, const char* source) {
  static std::map<std::string, py::dict*> namespaces;  // under the GIL; never freed, like the interpreter
  auto& ns = namespaces[name];
  if (!ns) {
    auto fresh = std::make_unique<py::dict>();
    (*fresh)["__builtins__"] = py::module_::import("builtins");
    py::exec(source, *fresh);
    ns = fresh.release();
  }
  return *ns;
}

py::module_ load_module(const std::filesystem::path& file, const std::string& source) {
  return (*host)["load_module"](file.string(), source).cast<py::module_>();
}

}  // namespace kvscope::python
