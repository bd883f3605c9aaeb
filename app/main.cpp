// kvscope: see what KV-cache compression policies do to a real language model.
// Exit codes: 0 success, 1 runtime error, 2 bad usage.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "app/openmp_wait_policy.h"
#include "app/subcommands.h"
#include "app/sweep_workers.h"
#include "core/common/build_version.h"
#include "core/common/error.h"
#include "core/eval/sweep_file.h"
#include "core/trace/trace_probe.h"

int main(int argc, char** argv) {
  using namespace kvscope;
  // A probe child (core/trace/trace_probe.h, core/eval/sweep_file.h) does nothing else.
  if (const auto probe_exit = trace::run_trace_probe_if_asked(argc, argv)) return *probe_exit;
  if (const auto probe_exit = eval::run_sweep_probe_if_asked(argc, argv)) return *probe_exit;
  CLI::App root{"kvscope: inspect KV-cache compression policies on a real language model"};
  root.require_subcommand(1);
  root.set_version_flag("--version", std::string(build_version()) + " (" + build_git_commit() + ")");

  const std::vector<app::Command> commands = {
      app::register_info(root),
      app::register_generate(root),
      app::register_trace(root),
      app::register_inspect(root),
      app::register_policies(root),
      app::register_gui(root),
      app::register_figure(root),
      app::register_explain(root),
      app::register_eval(root),
      app::register_sweep(root),
      app::register_tokenize(root),
  };

  app::set_command_line(argc, argv);
  try {
    root.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = root.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const auto& command : commands)
      if (command.parser->parsed()) {
        const std::string name = command.parser->get_name();
        if (name == "generate" || name == "trace" || name == "eval" || name == "sweep") app::prefer_bounded_openmp_spin();
        return command.run();
      }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kvscope: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscope: error: %s\n", e.what());
    return 1;
  }
  return 2;
}
