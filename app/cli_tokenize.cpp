// kvscope tokenize: the ids and pieces a prompt becomes for a model (chat template included with --chat),
// exactly what generate, trace and eval would run, without running the model; for checking a folder's
// tokenizer and template against transformers.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/run_options.h"
#include "app/subcommands.h"
#include "core/common/error.h"
#include "core/run/run_spec.h"

namespace kvscope::app {

namespace {

struct TokenizeArgs {
  ModelOptions model;
  PromptOptions prompt;
  std::string text;
  bool json = false;
  bool bare = false;  // the text alone, nothing added around it (transformers' add_special_tokens=False)
};

// A piece as one printable line: control characters and the line break shown escaped.
std::string printable(const std::string& piece) {
  std::string out;
  for (const unsigned char c : piece) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

Command register_tokenize(CLI::App& root) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = root.add_subcommand(
      "tokenize", "print the token ids and pieces a prompt becomes (with --chat: after the model's chat template)");
  args->model.add_to(cmd);
  args->prompt.add_to(cmd);
  cmd->add_option("text", args->text, "the prompt text (or --prompt, --prompt-file, --messages)");
  cmd->add_flag("--json", args->json, "print {\"text\", \"ids\", \"pieces\"} as JSON");
  cmd->add_flag("--bare", args->bare,
                "without what the tokenizer adds around a plain prompt (BOS, ...): transformers' "
                "add_special_tokens=False, llama.cpp's add_special=false");

  return {cmd, [args]() {
            PromptOptions prompt = args->prompt;
            if (!args->text.empty()) {
              if (!prompt.prompt.empty() || !prompt.prompt_file.empty())
                throw UsageError("give the text once: as an argument, --prompt or --prompt-file");
              prompt.prompt = args->text;
            }
            const run::ChatSpec chat = prompt.chat_spec();
            const std::string body = prompt.body();  // empty with --messages
            // The tokenizer and template only: no weights to map or check (a vocabulary-only GGUF works too).
            const model::ModelText model = model::load_model_text(args->model.path());
            const std::string text = run::prompt_text(*model.tokenizer, model.chat_template, body, chat);
            if (args->bare && chat.enabled) throw UsageError("--bare is for plain prompts (a chat is tokenized bare already)");
            const std::vector<int> ids = args->bare ? model.tokenizer->encode(text, chat.parse_special)
                                                    : run::encode_prompt(*model.tokenizer, model.chat_template, body, chat);
            std::vector<std::string> pieces;
            for (const int id : ids) pieces.push_back(model.tokenizer->token_text(id));
            if (args->json) {
              std::cout << nlohmann::json{{"text", text}, {"ids", ids}, {"pieces", pieces}}.dump(2) << "\n";
              return 0;
            }
            std::printf("%zu tokens (%s)\n", ids.size(), model.tokenizer_description.c_str());
            for (std::size_t i = 0; i < ids.size(); ++i)
              std::printf("%6zu  %7d  %s\n", i, ids[i], printable(pieces[i]).c_str());
            return 0;
          }};
}

}  // namespace kvscope::app
