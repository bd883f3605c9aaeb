// Catch2's main, after the trace probe hook: a test that opens a trace through the probe starts this same
// executable as the probe child (core/trace/trace_probe.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "core/eval/sweep_file.h"
#include "core/trace/trace_probe.h"

int main(int argc, char** argv) {
  if (const auto probe_exit = kvscope::trace::run_trace_probe_if_asked(argc, argv)) return *probe_exit;
  if (const auto probe_exit = kvscope::eval::run_sweep_probe_if_asked(argc, argv)) return *probe_exit;
  return Catch::Session().run(argc, argv);
}
