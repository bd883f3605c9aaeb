#pragma once
// Each subcommand lives in its own cli_*.cpp and registers itself with the root parser. The returned
// runner is called after parsing when that subcommand was chosen; it returns the process exit code.
#include <CLI/CLI.hpp>
#include <functional>

namespace kvscope::app {

struct Command {
  CLI::App* parser = nullptr;
  std::function<int()> run;
};

Command register_info(CLI::App& root);
Command register_generate(CLI::App& root);
Command register_trace(CLI::App& root);
Command register_inspect(CLI::App& root);
Command register_policies(CLI::App& root);
Command register_gui(CLI::App& root);
Command register_figure(CLI::App& root);
Command register_explain(CLI::App& root);
Command register_eval(CLI::App& root);
Command register_sweep(CLI::App& root);
Command register_tokenize(CLI::App& root);

}  // namespace kvscope::app
