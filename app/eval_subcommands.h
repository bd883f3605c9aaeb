#pragma once
// The `kvscope eval` benchmarks that live in files of their own (cli_eval_longbench.cpp, cli_eval_ruler.cpp),
// added to the eval parser by register_eval; each returns its parser and runner like a subcommand.
#include "app/subcommands.h"

namespace kvscope::app {

Command add_eval_longbench(CLI::App& eval);
Command add_eval_ruler(CLI::App& eval);

}  // namespace kvscope::app
