#pragma once
// A shell command run by a test: its standard output (add 2>&1 to the command for standard error too)
// and exit code; -1 when it could not be started or did not exit normally.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kvscope::test {

struct CommandOutcome {
  int exit_code = -1;
  std::string output;
};

inline CommandOutcome run_command(const std::string& command) {
  CommandOutcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return outcome;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) outcome.output += buffer.data();
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

}  // namespace kvscope::test
