#include "core/python/interpreter.h"

#include <Python.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
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
import os, posix, site, sys, traceback, types

def add_virtual_env(project_venvs):
    # A user's venv (VIRTUAL_ENV) of this interpreter's Python version lends its packages (torch, ...), after
    # the system's; then the project's own (.deps/embedded-venv: transformers for Hugging Face tokenizers).
    roots = [os.environ.get("VIRTUAL_ENV")] + list(project_venvs)
    for root in roots:
        if not root:
            continue
        lib = os.path.join(root, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
        if os.path.isdir(lib):
            site.addsitedir(lib)

def where():
    return "the embedded Python %s (standard library %s, sys.path %s)" % (
        sys.version.split()[0], os.path.dirname(os.__file__), sys.path)

# A policy may not end kvscope's process: os._exit would skip every error path and look like success. It
# raises instead (a BaseException, so `except Exception` in the policy does not swallow it), and the attempt
# is remembered, so that a policy that catches it anyway still fails its call. A child the policy forked
# (multiprocessing) exits as it likes.
class ProcessExitRefused(BaseException):
    pass

kvscope_pid = os.getpid()
real_exit = os._exit
exit_attempts = []

def refuse_exit(status):
    if os.getpid() != kvscope_pid:
        real_exit(status)
    call = "os._exit(%r)" % (status,)
    exit_attempts.append(call)
    raise ProcessExitRefused(call)

os._exit = posix._exit = refuse_exit

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
    if isinstance(exc, ProcessExitRefused):
        text = "%s was refused: a policy may not end kvscope's process (raise an exception to fail the run)" % exc
    elif isinstance(exc, SystemExit):
        text = ("SystemExit(%s) (sys.exit, exit() or raise SystemExit) was refused: a policy may not end kvscope's "
                "process (raise an exception to fail the run)" % ", ".join(repr(a) for a in exc.args))
    elif isinstance(exc, SyntaxError):
        # One line: Python's own rendering spreads over three (the source line and a caret).
        source = (exc.text or "").strip()
        text = "%s: %s" % (type(exc).__name__, exc.msg) + (" (in: %s)" % source if source else "")
    else:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if isinstance(exc, ModuleNotFoundError):
            text += " " + virtual_env_hint()
    return line, function, text

def virtual_env_hint():
    # Where the embedded Python looks for packages beyond the system's, and how to give it one (torch, ...).
    version = "%d.%d" % sys.version_info[:2]
    venv = os.environ.get("VIRTUAL_ENV")
    if not venv:
        state = "VIRTUAL_ENV is not set"
    elif not os.path.isdir(os.path.join(venv, "lib", "python" + version, "site-packages")):
        state = "VIRTUAL_ENV=%s is not a venv of Python %s (it has no lib/python%s/site-packages)" % (venv, version, version)
    else:
        state = "VIRTUAL_ENV=%s does not have it either" % venv
    return ("(kvscope's embedded Python %s imports the system's packages and those of the venv named by VIRTUAL_ENV; "
            "%s: create one with `python%s -m venv DIR`, install the package there and set VIRTUAL_ENV=DIR; "
            "docs/policies.md, Python)" % (version, state, version))
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

// The interpreter kvscope was built against, whatever the environment says: isolated (no current directory
// or script folder on sys.path, no user site-packages, PYTHONPATH, PYTHONHOME and every other PYTHON*
// variable ignored), its home and executable those CMake found (so getpath never searches PATH for a
// `python3` and takes a pyenv's or conda's standard library). Python's signal handlers are not installed:
// Ctrl-C stays kvscope's.
void initialize() {
  PyConfig config;
  PyConfig_InitIsolatedConfig(&config);
  config.install_signal_handlers = 0;
  for (const auto& [field, value] : {std::pair{&config.home, KVSCOPE_PYTHON_HOME},
                                     std::pair{&config.program_name, KVSCOPE_PYTHON_EXECUTABLE},
                                     std::pair{&config.executable, KVSCOPE_PYTHON_EXECUTABLE}}) {
    const PyStatus status = PyConfig_SetBytesString(&config, field, value);
    if (PyStatus_Exception(status)) {
      PyConfig_Clear(&config);
      throw Error(std::string("cannot configure it: ") + (status.err_msg ? status.err_msg : "(no message)"));
    }
  }
  // No program folder on sys.path either (pybind11 would add the current directory).
  py::initialize_interpreter(&config, 0, nullptr, false);
}

void start() {
  const std::string built = std::string("home ") + KVSCOPE_PYTHON_HOME + ", standard library " + KVSCOPE_PYTHON_STDLIB +
                            ", as built (" + KVSCOPE_PYTHON_EXECUTABLE + ")";
  try {
    initialize();
    {
      host = new py::dict();
      (*host)["__builtins__"] = py::module_::import("builtins");
      py::exec(kHostSource, *host);
      (*host)["add_virtual_env"](project_venvs());
      try {
        py::module_::import("numpy");
      } catch (py::error_already_set& e) {
        start_failure = (*host)["where"]().cast<std::string>() + " cannot import numpy: " + e.what() +
                        " (install numpy for " + KVSCOPE_PYTHON_EXECUTABLE + ", on Debian the package python3-numpy, "
                        "or set VIRTUAL_ENV to a venv of this Python version that has it)";
      }
    }
    PyEval_SaveThread();  // the GIL is taken per call from here on
  } catch (const std::exception& e) {
    start_failure = "the embedded Python interpreter (" + built + ") did not start: " + e.what();
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

std::optional<std::string> take_exit_attempt() {
  py::list attempts = (*host)["exit_attempts"];
  if (attempts.empty()) return std::nullopt;
  std::string first = py::str(attempts[0]).cast<std::string>();
  attempts.attr("clear")();
  return first;
}

}  // namespace kvscope::python
