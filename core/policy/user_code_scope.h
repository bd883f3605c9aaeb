#pragma once
// "kvscope is running a user's policy code now" (a Python policy file or a compiled plugin), marked on the
// calling thread around every call into that code. When such code ends the process in a way that cannot be
// turned into an error, the process still names the file and the callback, and never looks like success:
// - exit() or quick_exit() (in a plugin, or C code under Python): stderr names the file and callback, and an
//   exit status of 0 becomes 1, and the outputs being written are abandoned (the old files stay as they were);
// - a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT): stderr names them, then the process dies of the signal
//   as before (a sanitizer's handler, where one was installed, still gets it).
// Python's os._exit and SystemExit never get this far: the interpreter refuses them (core/python/interpreter.h).
// _exit() and a stack overflow are not caught.
#include <filesystem>

namespace kvscope::policy {

class UserCodeScope {
 public:
  // `what` ("plugin", "policy file"), `file` and `callback` ("score()") must outlive the scope: a signal
  // handler reads them. `layer` (-1: none) is named when given.
  UserCodeScope(const char* what, const std::filesystem::path& file, const char* callback, int layer = -1);
  ~UserCodeScope();
  UserCodeScope(const UserCodeScope&) = delete;
  UserCodeScope& operator=(const UserCodeScope&) = delete;

  const char* what() const { return what_; }
  const char* file() const { return file_; }
  const char* callback() const { return callback_; }
  int layer() const { return layer_; }

 private:
  const char* what_;
  const char* file_;
  const char* callback_;
  int layer_;
  const UserCodeScope* previous_;
};

// The innermost scope on this thread, or null. Async-signal-safe.
const UserCodeScope* current_user_code();

}  // namespace kvscope::policy
