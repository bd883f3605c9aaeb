#include "core/policy/user_code_scope.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/common/atomic_file.h"

namespace kvscope::policy {

namespace {

// Trivially constructed, so a signal handler reads it without a TLS initialisation call.
thread_local const UserCodeScope* innermost = nullptr;

constexpr int kTrapped[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr const char* kTrappedNames[] = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"};
struct sigaction previous_actions[std::size(kTrapped)];

// A message built without allocating (signal handlers, exit handlers).
class Line {
 public:
  Line& operator<<(const char* s) {
    while (s && *s && used_ < sizeof text_ - 1) text_[used_++] = *s++;
    return *this;
  }
  Line& operator<<(long v) {
    char digits[24];
    int n = 0;
    const bool negative = v < 0;
    unsigned long u = negative ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do {
      digits[n++] = static_cast<char>('0' + u % 10);
    } while ((u /= 10) != 0);
    if (negative) digits[n++] = '-';
    while (n > 0 && used_ < sizeof text_ - 1) text_[used_++] = digits[--n];
    return *this;
  }
  // "plugin 'x.so' ... in score() for layer 3"
  Line& site(const UserCodeScope& s) {
    *this << s.what() << " '" << s.file() << "'";
    return *this;
  }
  Line& callback(const UserCodeScope& s) {
    *this << " in " << s.callback();
    if (s.layer() >= 0) *this << " for layer " << static_cast<long>(s.layer());
    return *this;
  }
  void write_to_stderr() {
    text_[used_++] = '\n';
    for (std::size_t done = 0; done < used_;) {
      const ssize_t n = ::write(STDERR_FILENO, text_ + done, used_ - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  char text_[4096];
  std::size_t used_ = 0;
};

void on_crash(int sig, siginfo_t* info, void*) {
  std::size_t index = 0;
  while (index < std::size(kTrapped) && kTrapped[index] != sig) ++index;
  if (const UserCodeScope* scope = innermost) {
    Line line;
    line << "\nkvscope: ";
    line.site(*scope) << " crashed";
    line.callback(*scope) << " (signal " << static_cast<long>(sig) << ", "
                          << (index < std::size(kTrapped) ? kTrappedNames[index] : "?") << ")";
    line.write_to_stderr();
  }
  // Die of the signal as before: the previous action takes it. A fault the kernel raised happens again when
  // this handler returns; one sent (abort, kill) is sent again, and arrives once the handler returns.
  if (index < std::size(kTrapped)) sigaction(sig, &previous_actions[index], nullptr);
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void on_exit_with(int status, void*) {
  const UserCodeScope* scope = innermost;
  if (!scope) return;
  Line line;
  line << "kvscope: error: ";
  line.site(*scope) << " ended the process with exit(" << static_cast<long>(status) << ")";
  line.callback(*scope) << "; a policy may not end kvscope's process";
  const int code = status == 0 ? 1 : status;
  if (status == 0) line << " (exit status 1)";
  line.write_to_stderr();
  std::fflush(nullptr);
  // The process ends here without unwinding: the outputs it was writing (a trace under --force) would leave
  // their temporary folders beside the untouched old files.
  abandon_unfinished_files();
  _exit(code);
}

void on_quick_exit() {
  const UserCodeScope* scope = innermost;
  if (!scope) return;
  Line line;
  line << "kvscope: error: ";
  line.site(*scope) << " ended the process with quick_exit()";
  line.callback(*scope) << "; a policy may not end kvscope's process (exit status 1)";
  line.write_to_stderr();
  abandon_unfinished_files();
  _exit(1);
}

void install_traps() {
  for (std::size_t i = 0; i < std::size(kTrapped); ++i) {
    struct sigaction action {};
    action.sa_sigaction = on_crash;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(kTrapped[i], &action, &previous_actions[i]);
  }
  on_exit(on_exit_with, nullptr);
  at_quick_exit(on_quick_exit);
}

}  // namespace

UserCodeScope::UserCodeScope(const char* what, const std::filesystem::path& file, const char* callback, int layer)
    : what_(what), file_(file.c_str()), callback_(callback), layer_(layer), previous_(innermost) {
  static std::once_flag installed;
  std::call_once(installed, install_traps);
  innermost = this;
}

UserCodeScope::~UserCodeScope() { innermost = previous_; }

const UserCodeScope* current_user_code() { return innermost; }

}  // namespace kvscope::policy
