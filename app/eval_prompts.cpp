#include "app/eval_prompts.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/progress_line.h"
#include "core/common/error.h"
#include "core/eval/eval_protocol.h"
#include "core/eval/needle.h"

namespace kvscope::app {

namespace fs = std::filesystem;

std::vector<eval::EvalPrompt> load_prompts(const PromptOptions& options, const std::string& prompts_dir,
                                           const model::Model* model) {
  const int sources =
      !options.prompt.empty() + !options.prompt_file.empty() + !options.messages_file.empty() + !prompts_dir.empty();
  if (sources != 1)
    throw UsageError("give exactly one of --prompt TEXT, --prompt-file FILE, --messages FILE or --prompts DIR");
  // The chat flags and the messages file are checked with or without a model; without one (flags checked
  // before loading it) the chat template is not applied.
  const run::ChatSpec chat_spec = options.chat_spec();
  const bool chat = chat_spec.enabled && model;
  auto text = [&](const std::string& body) { return chat ? run::prompt_text(*model, body, chat_spec) : body; };
  if (prompts_dir.empty()) {
    const std::string& file = options.messages_file.empty() ? options.prompt_file : options.messages_file;
    const std::string name = file.empty() ? "prompt" : fs::path(file).filename().string();
    return {{name, text(options.body()), "", chat, chat_spec.parse_special}};
  }
  std::error_code ec;
  fs::directory_iterator it(prompts_dir, ec);
  if (ec) throw UsageError("cannot read the prompt folder '" + prompts_dir + "': " + ec.message());
  std::vector<fs::path> files;
  for (const auto& entry : it)
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError("the prompt folder '" + prompts_dir + "' holds no files");
  std::vector<eval::EvalPrompt> prompts;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    if (!in || !(ss << in.rdbuf())) throw UsageError("cannot read prompt file '" + path.string() + "'");
    if (ss.str().empty()) throw UsageError("prompt file '" + path.string() + "' is empty");
    prompts.push_back({path.filename().string(), text(ss.str()), "", chat, chat_spec.parse_special});
  }
  return prompts;
}

std::vector<double> parse_depths(const std::vector<std::string>& percents) {
  std::vector<double> depths;
  for (const auto& text : percents) {
    std::size_t used = 0;
    double v = -1.0;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
    }
    if (used != text.size() || !(v >= 0.0 && v <= 100.0))
      throw UsageError("needle depth '" + text + "' is not a percentage from 0 to 100");
    depths.push_back(v / 100.0);
  }
  if (depths.empty()) throw UsageError("no needle depths given");
  return depths;
}

std::vector<eval::EvalPrompt> needle_prompts(const model::Model& model, const NeedleGrid& grid) {
  if (grid.lengths.empty()) throw UsageError("no needle context lengths given");
  const eval::NeedleSource source = eval::load_needle_source(eval::default_needle_dir());
  std::vector<eval::EvalPrompt> prompts;
  for (int length : grid.lengths) {
    if (length > model.config.context_length)
      throw UsageError("needle length " + std::to_string(length) + " exceeds the model's context of " +
                       std::to_string(model.config.context_length) + " tokens");
    for (double depth : grid.depths) {
      const int percent = static_cast<int>(std::lround(depth * 100.0));
      const uint64_t seed =
          grid.seed * 1000003ULL + static_cast<uint64_t>(length) * 101ULL + static_cast<uint64_t>(percent);
      // BOS and the answer fit inside the requested length, so every length up to the context runs.
      const auto c = eval::make_needle_case(source, *model.tokenizer, length - 1 - grid.answer_tokens, depth, seed);
      eval::EvalPrompt prompt{"needle_L" + std::to_string(length) + "_D" + std::to_string(percent), c.prompt, c.value};
      prompt.evidence = c.evidence;
      prompt.key = c.key;
      prompts.push_back(std::move(prompt));
    }
  }
  return prompts;
}

std::vector<eval::RulerSample> ruler_samples(const model::Model& model, const eval::RulerSettings& requested,
                                             bool chat) {
  eval::RulerSettings settings = requested;
  if (settings.length > model.config.context_length)
    throw UsageError("RULER length " + std::to_string(settings.length) + " exceeds the model's context of " +
                     std::to_string(model.config.context_length) + " tokens");
  settings.length -= eval::wrapping_tokens(model, chat);  // the chat template's tokens count too
  const std::size_t tasks = settings.tasks.empty() ? eval::ruler_task_names().size() : settings.tasks.size();
  ProgressLine line("generating RULER samples", static_cast<long>(tasks * static_cast<std::size_t>(settings.samples)));
  auto samples = eval::generate_ruler(
      settings, [&](const std::string& text) { return static_cast<int>(model.tokenizer->encode(text, true).size()); },
      [&](std::size_t done, std::size_t) { line.update(static_cast<long>(done)); });
  line.finish();
  return samples;
}

std::vector<eval::EvalPrompt> ruler_prompts(const model::Model& model, const eval::RulerSettings& settings, bool chat) {
  std::vector<eval::EvalPrompt> out;
  for (const auto& s : ruler_samples(model, settings, chat)) {
    eval::EvalPrompt p;
    p.name = s.task + "#" + std::to_string(s.index);
    p.text = s.input;
    p.question = s.question;
    p.answer_prefix = s.answer_prefix;
    p.outputs = s.outputs;
    p.max_new_tokens = s.max_new_tokens;
    p.evidence = s.evidence;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace kvscope::app
