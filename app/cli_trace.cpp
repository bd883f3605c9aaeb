// kvscope trace: run a prompt under one or more policies and record everything to an HDF5 trace
// (layout: docs/trace-format.md). Each --policy becomes one run in the file, named <policy>_b<budget>.

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "app/run_options.h"
#include "app/subcommands.h"
#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/run/execute.h"
#include "core/trace/hdf5_writer.h"

namespace kvscope::app {

namespace {

struct TraceArgs {
  ModelOptions model;
  PromptOptions prompt;
  GenerationFlags generation;
  std::vector<std::string> policies;
  std::string out;
  bool force = false;
  std::string record;
  bool record_nmse = false;
  bool quiet = false;
  int gzip = 1;
};

// Prints progress at most twice a second, so long prompts show life without flooding a log.
class ProgressPrinter {
 public:
  ProgressPrinter(std::string run, bool quiet) : run_(std::move(run)), quiet_(quiet) {}
  void operator()(const engine::Progress& p) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool last = p.done == p.total;
    if (!last && now - last_ < std::chrono::milliseconds(500)) return;
    last_ = now;
    std::fprintf(stderr, "kvscope trace: %s %s %d/%d\n", run_.c_str(), p.phase == observation::Phase::Prefill ? "prefill" : "decode",
                 p.done, p.total);
  }

 private:
  std::string run_;
  bool quiet_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

Command register_trace(CLI::App& root) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App* cmd = root.add_subcommand("trace", "run a prompt under one or more policies and record everything to HDF5");
  args->model.add_to(cmd);
  args->prompt.add_to(cmd);
  args->generation.add_to(cmd);
  cmd->add_option("--policy", args->policies,
                  "policy spec, e.g. h2o or snapkv:window=32 (repeat for several runs in one file; default full)");
  cmd->add_option("--out", args->out, "trace file to write (.h5)")->required();
  cmd->add_flag("--force", args->force,
                "replace an existing trace file (a link at --out is replaced, never written through)");
  cmd->add_option("--record", args->record,
                  "what to record: 'layers=0,3;heads=0;pooling=max|mean;size=512;similarity=on;decode=on;nmse=off;"
                  "attention=on;stats=on;qk=off' (layers/heads: stored at full resolution; the rest pooled to size; "
                  "qk=on: queries, keys and log-sum-exp for exact attention at any zoom, ~41 KB per token; qk=layers:0-3,14: "
                  "those layers' only)");
  cmd->add_flag("--record-nmse", args->record_nmse,
                "record the per-layer attention-output error against a shadow full cache (CAOTE Fig. 3)");
  cmd->add_flag("--quiet", args->quiet, "no progress on stderr");
  cmd->add_option("--gzip", args->gzip, "deflate level of the trace's datasets (0 = none, 1 = fastest; default 1: higher levels gain under 1 % on these maps)")
      ->check(CLI::Range(0, 9));

  return {cmd, [args]() {
            std::string record = args->record;
            if (args->record_nmse) record += std::string(record.empty() ? "" : ";") + "nmse=on";
            std::vector<std::string> policies = args->policies;
            if (policies.empty()) policies.push_back("full");
            // Check every run before the model loads, so a typo costs nothing.
            std::vector<run::RunSpec> specs;
            std::vector<std::string> names;
            for (const auto& policy : policies) {
              run::RunSpec spec = args->generation.spec(args->prompt, policy, "kvscope trace");
              spec.record = record;
              const std::string name = run::check(spec).run_name;
              if (std::find(names.begin(), names.end(), name) != names.end())
                throw UsageError("--policy '" + policy + "' is given twice (run '" + name + "')");
              names.push_back(name);
              specs.push_back(std::move(spec));
            }
            print_device_path_warning(specs.front());  // every run shares the device and the cache type
            refuse_output_that_is_input({"--out", args->out}, run_input_files(&args->model, &args->prompt, policies));
            check_output_path(args->out, existing_policy(args->force), "trace file");
            const model::Model model = args->model.load();
            // Everything that can be refused is refused before the file is touched.
            for (const auto& spec : specs) run::check_fits(spec, model);

            trace::WriterOptions wopts;
            wopts.force = args->force;
            wopts.gzip_level = args->gzip;
            trace::Hdf5Writer writer(args->out, wopts);
            // Runs of one prompt share its prefill when their policies compress after it (the maps are kept in
            // memory between runs for that).
            run::PrefillStore prefills(1, specs.size() > 1);
            for (std::size_t i = 0; i < specs.size(); ++i) {
              ProgressPrinter progress(names[i], args->quiet);
              run::RunSinks sinks;
              sinks.traces.push_back(&writer);
              sinks.progress = [&progress](const engine::Progress& pr) { progress(pr); };
              sinks.prefills = specs.size() > 1 ? &prefills : nullptr;
              const run::RunOutcome outcome = run::execute(specs[i], model, sinks);
              const engine::RunResult& result = outcome.result;
              print_policy_warnings(outcome.policy_warnings);
              const std::string reused = outcome.prefill_reused ? " (reused)"
                                         : result.prefill_share_from_blocks > 0.0
                                             ? " (" + std::to_string(result.prefill_percent_from_blocks()) +
                                                   " % of layers from the previous runs' blocks)"
                                             : "";
              if (!args->quiet)
                std::fprintf(stderr, "kvscope trace: %s done: %zu prompt tokens, %zu generated (%s), prefill %.0f ms%s, decode %.1f ms/token\n",
                             names[i].c_str(), result.prompt_tokens.size(), result.generated_tokens.size(),
                             result.stop_reason.c_str(), result.prefill_ms, reused.c_str(), result.decode_ms_per_token());
            }
            writer.close();
            std::printf("%s\n", args->out.c_str());
            return 0;
          }};
}

}  // namespace kvscope::app
