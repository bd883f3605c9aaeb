#pragma once
// The `kvscope eval` benchmarks that live in files of their own (cli_eval_longbench.cpp, cli_eval_ruler.cpp),
// added to the eval parser by register_eval.
#include <CLI/CLI.hpp>
#include <functional>

namespace kvscope::app {

struct EvalSubcommand {
  CLI::App* parser = nullptr;
  std::function<int()> run;
};

EvalSubcommand add_eval_longbench(CLI::App& eval);
EvalSubcommand add_eval_ruler(CLI::App& eval);

}  // namespace kvscope::app
