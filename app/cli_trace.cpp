// kvscope trace: run a prompt under one or more policies and record everything to an HDF5 trace
// (layout: docs/trace-format.md). Each --policy becomes one run in the file, named <policy>_b<budget>.

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "app/run_options.h"
#include "app/subcommands.h"
#include "core/common/error.h"
#include "core/policy/budget_spec.h"
#include "core/policy/registry.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/recorder.h"
#include "core/trace/run_metadata.h"

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
    std::fprintf(stderr, "kvscope trace: %s %s %d/%d\n", run_.c_str(), p.phase == engine::Phase::Prefill ? "prefill" : "decode",
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
  cmd->add_flag("--force", args->force, "overwrite an existing trace file");
  cmd->add_option("--record", args->record,
                  "what to record: 'layers=0,3;heads=0;pooling=max|mean;size=512;similarity=on;decode=on;nmse=off;"
                  "attention=on;stats=on' (layers/heads: stored at full resolution; the rest pooled to size)");
  cmd->add_flag("--record-nmse", args->record_nmse,
                "record the per-layer attention-output error against a shadow full cache (CAOTE Fig. 3)");
  cmd->add_flag("--quiet", args->quiet, "no progress on stderr");
  cmd->add_option("--gzip", args->gzip, "deflate level of the trace's datasets (0 = none, 1 = fastest; default 1: higher levels gain under 1 % on these maps)")
      ->check(CLI::Range(0, 9));

  return {cmd, [args]() {
            trace::RecordOptions record = trace::RecordOptions::parse(args->record);
            if (args->record_nmse) record.nmse = true;
            record.live_view = false;
            std::vector<std::string> specs = args->policies;
            if (specs.empty()) specs.push_back("full");
            const std::string budget = args->generation.budget;
            // Check every policy and name before the model loads, so a typo costs nothing.
            std::vector<std::string> names;
            for (const auto& spec : specs) {
              auto p = policy::make_policy(spec);
              if (p.name != "full" && budget.empty())
                throw UsageError("policy '" + p.name + "' needs --budget (tokens per layer and KV head, or a percentage)");
              std::string name = trace::run_name(spec, p.name == "full" ? "" : budget);
              if (std::find(names.begin(), names.end(), name) != names.end())
                throw UsageError("--policy '" + spec + "' is given twice (run '" + name + "')");
              names.push_back(name);
            }
            std::error_code ec;
            if (std::filesystem::exists(args->out, ec) && !args->force)
              throw Error("trace file '" + args->out + "' already exists (pass --force to overwrite it)");
            const auto options = args->generation.options();
            const model::Model model = args->model.load();
            const std::string text = args->prompt.text();
            const std::vector<int> tokens = args->prompt.tokens(model);

            trace::WriterOptions wopts;
            wopts.force = args->force;
            wopts.gzip_level = args->gzip;
            trace::Hdf5Writer writer(args->out, wopts);
            engine::Engine engine(model);
            for (std::size_t i = 0; i < specs.size(); ++i) {
              auto p = policy::make_policy(specs[i]);
              const auto text_params = p.params.as_text();
              const bool uses_budget = p.name != "full" && !budget.empty();
              trace::RecordedRun run;
              run.name = names[i];
              run.config = model.config;
              run.tokenizer = model.tokenizer.get();
              run.prompt = tokens;
              run.max_new_tokens = options.max_new_tokens;
              run.policy = p.policy.get();
              engine::GenerateOptions run_options = options;
              if (!uses_budget) run_options.budget = {};
              trace::RunDescription description;
              description.policy_name = p.name;
              description.policy_spec = specs[i];
              description.policy_params = text_params;
              description.budget = uses_budget ? budget : "";
              description.prompt = text;
              description.chat = args->prompt.chat;
              description.prompt_tokens = static_cast<int>(tokens.size());
              description.options = run_options;
              description.source = "kvscope trace";
              run.metadata = trace::run_metadata(model, description);
              trace::Recorder recorder(record, &writer, std::move(run));
              engine::RunHooks hooks;
              hooks.policy = p.policy.get();
              hooks.observers.push_back(&recorder);
              ProgressPrinter progress(names[i], args->quiet);
              hooks.progress = [&progress](const engine::Progress& pr) { progress(pr); };
              const engine::RunResult result = engine.generate(tokens, run_options, hooks);
              recorder.finish(result);
              print_policy_warnings(*p.policy);
              if (!args->quiet)
                std::fprintf(stderr, "kvscope trace: %s done: %zu prompt tokens, %zu generated (%s), prefill %.0f ms, decode %.1f ms/token\n",
                             names[i].c_str(), result.prompt_tokens.size(), result.generated_tokens.size(),
                             result.stop_reason.c_str(), result.prefill_ms, result.decode_ms_per_token());
            }
            writer.close();
            std::printf("%s\n", args->out.c_str());
            return 0;
          }};
}

}  // namespace kvscope::app
