#include "core/model/chat_template.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/file_text.h"
#include "core/model/chat_date.h"
#include "core/model/gguf.h"
#include "core/model/hf_folder.h"
#include "core/model/tokenizer.h"
#include "core/python/interpreter.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace kvscope::model {
namespace {

// The environment of transformers' apply_chat_template, written for kvscope: what a template sees and may
// call. Rendering and its errors stay Jinja2's own, so a template renders (or raises) here as it does there.
constexpr const char* kJinjaSource = R"PY(
import datetime, json
import jinja2
import jinja2.meta
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

class GenerationBlock(Extension):
    # {% generation %}...{% endgeneration %} marks the assistant's tokens for training masks; rendering
    # writes the block's body unchanged.
    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(["name:endgeneration"], drop_needle=True)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(format):
    return datetime.datetime.now().strftime(format)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
compiled = {}

def template(source):
    if source not in compiled:
        compiled[source] = env.from_string(source)
    return compiled[source]

def render(source, messages_json, add_generation_prompt, variables_json):
    return template(source).render(messages=json.loads(messages_json), tools=None, documents=None,
                                   add_generation_prompt=add_generation_prompt, **json.loads(variables_json))

def variables(source, settable_only):
    # What the template reads before (or without) setting it. Settable: leaving out names it assigns itself
    # (loop variables, `set`), unless it asks whether they are defined (Llama 3.1's date_string).
    ast = env.parse(source)
    read = jinja2.meta.find_undeclared_variables(ast)
    if not settable_only:
        return sorted(read)
    assigned = set()
    for node in ast.find_all((jinja2.nodes.Assign, jinja2.nodes.For)):
        names = [node.target] if isinstance(node.target, jinja2.nodes.Name) else node.target.find_all(jinja2.nodes.Name)
        assigned.update(n.name for n in names)
    tested = {t.node.name for t in ast.find_all(jinja2.nodes.Test)
              if isinstance(t.node, jinja2.nodes.Name) and t.name in ("defined", "undefined")}
    return sorted(v for v in read if v not in assigned or v in tested)

def describe(exc):
    # (kind, line, message): a syntax error names its line; raise_exception's message is the template's own.
    if isinstance(exc, jinja2.exceptions.TemplateSyntaxError):
        return "syntax", exc.lineno or 0, exc.message or str(exc)
    if isinstance(exc, jinja2.exceptions.TemplateError):
        return "template", 0, str(exc)
    return "python", 0, "%s: %s" % (type(exc).__name__, exc)
)PY";

py::dict jinja() {
  try {
    return python::helper_namespace("chat_templates", kJinjaSource);
  } catch (py::error_already_set& e) {
    throw Error(std::string("chat templates need Jinja2 in the embedded Python (Debian's python3-jinja2): ") + e.what());
  }
}

// Error for an exception the template raised while parsing or rendering; GIL held.
[[noreturn]] void throw_template_error(py::dict& ns, py::error_already_set& e, const ChatTemplate& t) {
  const py::tuple d = ns["describe"](e.value());
  const auto kind = d[0].cast<std::string>();
  const int line = d[1].cast<int>();
  const auto message = d[2].cast<std::string>();
  if (kind == "syntax")
    throw Error("the chat template in " + t.origin + " does not parse (line " + std::to_string(line) + "): " + message);
  if (kind == "template") throw Error("the chat template in " + t.origin + " refused the conversation: " + message);
  throw Error("the chat template in " + t.origin + " failed: " + message);
}

std::string token_or_empty(const Tokenizer& tokenizer, int id) { return id >= 0 ? tokenizer.token_text(id) : ""; }

// A template argument as Jinja should see it: JSON when it parses as JSON, else the text itself.
nlohmann::json template_value(const std::string& text) {
  const auto parsed = nlohmann::json::parse(text, nullptr, false);
  return parsed.is_discarded() ? nlohmann::json(text) : parsed;
}

}  // namespace

void check_chat_role(const std::string& role, const std::string& where) {
  if (role == "system" || role == "user" || role == "assistant") return;
  if (role == "tool" || role == "ipython")
    throw UsageError(where + " has role '" + role + "': " + kToolCallingUnsupported);
  throw UsageError(where + " has role '" + role + "' (expected system, user or assistant)");
}

ChatTemplateSource read_chat_template(const std::filesystem::path& folder) {
  std::error_code ec;
  const auto jinja_file = folder / "chat_template.jinja";
  if (std::filesystem::is_regular_file(jinja_file, ec)) {
    auto text = read_file_text(jinja_file);
    if (!text) throw Error(jinja_file.string() + ": cannot be read");
    return {std::move(*text), "chat_template.jinja"};
  }
  const auto config_file = folder / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(config_file, ec)) return {std::nullopt, ""};
  const nlohmann::json config = read_json_file(config_file);
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return {std::nullopt, ""};
  const auto& field = config["chat_template"];
  const std::string origin = "tokenizer_config.json chat_template";
  if (field.is_string()) return {field.get<std::string>(), origin};
  if (field.is_array())
    for (const auto& named : field)
      if (named.is_object() && named.value("name", std::string()) == "default" && named.contains("template") &&
          named["template"].is_string())
        return {named["template"].get<std::string>(), origin + " (\"default\")"};
  throw Error(config_file.string() + ": field 'chat_template': " + field.dump().substr(0, 120) +
              " (expected a string, or a list of {name, template} with one named \"default\")");
}

ChatTemplateSource read_chat_template(const GgufFile& file) {
  if (!file.has("tokenizer.chat_template")) return {std::nullopt, ""};
  return {file.get_string("tokenizer.chat_template"), "GGUF tokenizer.chat_template"};
}

ChatTemplateSource read_chat_template_file(const std::filesystem::path& file) {
  auto text = read_file_text(file);
  if (!text) throw UsageError("--chat-template '" + file.string() + "' cannot be read");
  return {std::move(*text), file.string()};
}

const ChatTemplate& ChatTemplateChoice::get() const {
  if (!chat_template) throw Error("--chat: " + description);
  return *chat_template;
}

ChatTemplateChoice choose_chat_template(const ChatTemplateSource& source, const Tokenizer& tokenizer) {
  ChatTemplateChoice choice;
  if (!source.jinja) {
    choice.description = "the model has no chat template (transformers refuses such a model too); give one with "
                         "--chat-template FILE";
    return choice;
  }
  ChatTemplate t;
  t.jinja = *source.jinja;
  t.origin = source.origin;
  for (const auto& [name, id] : {std::pair<const char*, int>{"bos_token", tokenizer.bos_id()}, {"eos_token", tokenizer.eos_id()}})
    if (const std::string text = token_or_empty(tokenizer, id); !text.empty()) t.special_tokens[name] = text;
  choice.description = "Jinja2 template in " + source.origin;
  choice.chat_template = std::move(t);
  return choice;
}

namespace {

// The template's free variables less the ones every rendering passes; `settable_only` as in kJinjaSource.
std::vector<std::string> free_variables(const ChatTemplate& t, bool settable_only) {
  python::Gil gil;
  py::dict ns = jinja();
  std::vector<std::string> all;
  try {
    all = ns["variables"](t.jinja, settable_only).cast<std::vector<std::string>>();
  } catch (py::error_already_set& e) {
    throw_template_error(ns, e, t);
  }
  std::vector<std::string> out;
  for (const auto& v : all)
    if (v != "messages" && v != "add_generation_prompt" && v != "tools" && v != "documents" && !t.special_tokens.count(v) &&
        v != "raise_exception" && v != "strftime_now")
      out.push_back(v);
  return out;
}

}  // namespace

std::vector<std::string> chat_template_variables(const ChatTemplate& t) { return free_variables(t, true); }

std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSettings& settings) {
  for (size_t i = 0; i < messages.size(); ++i) check_chat_role(messages[i].role, "message " + std::to_string(i));
  nlohmann::json variables = nlohmann::json::object();
  for (const auto& [name, text] : chat_template.special_tokens) variables[name] = text;
  std::vector<std::pair<std::string, std::string>> asked;  // (variable, the option that set it)
  if (!settings.date.empty()) {
    variables["date_string"] = checked_chat_date(settings.date);
    asked.emplace_back("date_string", "--chat-date");
  }
  if (!settings.enable_thinking) {
    variables["enable_thinking"] = false;
    asked.emplace_back("enable_thinking", "--no-think");
  }
  for (const auto& [name, text] : settings.variables) {
    variables[name] = template_value(text);
    asked.emplace_back(name, "--template-arg " + name);
  }
  // A setting the template never reads would be dropped without a word; say so instead.
  if (!asked.empty()) {
    const auto reads = free_variables(chat_template, false);
    for (const auto& [name, option] : asked)
      if (std::find(reads.begin(), reads.end(), name) == reads.end()) {
        std::string known;
        for (const auto& r : reads) known += (known.empty() ? "" : ", ") + r;
        throw UsageError(option + ": the chat template in " + chat_template.origin + " does not read '" + name +
                         "' (it reads: " + (known.empty() ? "no variables of its own" : known) + ")");
      }
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();  // role before content, as a template iterating a message sees it
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  python::Gil gil;
  py::dict ns = jinja();
  try {
    return ns["render"](chat_template.jinja, list.dump(), add_generation_prompt, variables.dump()).cast<std::string>();
  } catch (py::error_already_set& e) {
    throw_template_error(ns, e, chat_template);
  }
}

}  // namespace kvscope::model
