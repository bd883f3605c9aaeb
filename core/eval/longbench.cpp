#include "core/eval/longbench.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/json_text.h"
#include "core/eval/longbench_python.h"
#include "core/python/interpreter.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace kvscope::eval {
namespace {

py::dict helpers() { return python::helper_namespace("longbench", kLongBenchPython); }

std::string python_error(py::error_already_set& e) { return python::describe(e, {}).text; }

std::vector<std::string> string_list(const nlohmann::json& value, const std::string& where) {
  std::vector<std::string> out;
  if (value.is_null()) return out;
  if (!value.is_array()) throw Error(where + " is not a list of strings");
  for (const auto& item : value) {
    if (!item.is_string()) throw Error(where + " holds " + std::string(item.type_name()) + " (expected strings)");
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace

LongBenchTask longbench_task(const std::string& name, const std::string& prompts_json) {
  python::Gil gil;
  try {
    const py::dict t = helpers()["task"](name, prompts_json);
    LongBenchTask task;
    task.name = name;
    task.metric = t["metric"].cast<std::string>();
    task.max_new_tokens = t["max_new_tokens"].cast<int>();
    task.prompt_template = t["template"].cast<std::string>();
    task.chat = t["chat"].cast<bool>();
    task.first_line = t["first_line"].cast<bool>();
    task.stop_at_newline = t["stop_at_newline"].cast<bool>();
    return task;
  } catch (py::error_already_set& e) {
    throw UsageError(python_error(e));
  }
}

std::vector<std::string> longbench_task_names() {
  python::Gil gil;
  return helpers()["task_names"]().cast<std::vector<std::string>>();
}

std::vector<LongBenchRecord> read_longbench_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot be read");
  std::vector<LongBenchRecord> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + " line " + std::to_string(number);
    const nlohmann::json j = parse_json_text(line, where);
    if (!j.is_object()) throw Error(where + ": not a JSON object (expected a LongBench record)");
    LongBenchRecord r;
    for (const char* field : {"context", "input"}) {
      if (!j.contains(field)) throw Error(where + ": no '" + field + "' field");
      if (!j[field].is_string()) throw Error(where + ": field '" + field + "' is not a string");
    }
    r.context = j["context"].get<std::string>();
    r.input = j["input"].get<std::string>();
    if (!j.contains("answers")) throw Error(where + ": no 'answers' field");
    r.answers = string_list(j["answers"], where + ": field 'answers'");
    if (r.answers.empty()) throw Error(where + ": field 'answers' is empty");
    if (j.contains("all_classes")) r.all_classes = string_list(j["all_classes"], where + ": field 'all_classes'");
    if (j.contains("dataset") && j["dataset"].is_string()) r.dataset = j["dataset"].get<std::string>();
    if (j.contains("length") && j["length"].is_number_integer()) r.length = j["length"].get<int>();
    if (j.contains("_id") && j["_id"].is_string()) r.id = j["_id"].get<std::string>();
    r.json = line;
    out.push_back(std::move(r));
  }
  if (out.empty()) throw Error(path.string() + ": no records");
  return out;
}

namespace {

// The record's fields through one of the helpers that fill a prompt format (format_prompt, question).
std::string filled(const char* helper, const LongBenchTask& task, const LongBenchRecord& record) {
  python::Gil gil;
  try {
    return helpers()[helper](task.prompt_template, record.json).cast<std::string>();
  } catch (py::error_already_set& e) {
    throw Error("LongBench task " + task.name + ": the prompt format cannot be filled: " + python_error(e));
  }
}

}  // namespace

std::string longbench_prompt(const LongBenchTask& task, const LongBenchRecord& record) {
  return filled("format_prompt", task, record);
}

std::string longbench_question(const LongBenchTask& task, const LongBenchRecord& record) {
  return filled("question", task, record);
}

std::vector<double> longbench_metric_scores(const std::string& metric, const std::vector<MetricPair>& pairs) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : pairs) {
    nlohmann::json item = {p.prediction, p.reference};
    if (!p.classes.empty()) item.push_back(p.classes);
    list.push_back(std::move(item));
  }
  python::Gil gil;
  try {
    return helpers()["metric_scores"](metric, list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "").cast<std::vector<double>>();
  } catch (py::error_already_set& e) {
    throw UsageError(python_error(e));
  }
}

double longbench_record_score(const LongBenchTask& task, const std::string& prediction, const LongBenchRecord& record) {
  // As JSON: text a model wrote may hold bytes that are not UTF-8, which become U+FFFD as in transformers' decode.
  const nlohmann::json payload = {{"prediction", prediction}, {"answers", record.answers}, {"classes", record.all_classes}};
  const std::string text = payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  python::Gil gil;
  try {
    return helpers()["record_score"](task.name, text).cast<double>();
  } catch (py::error_already_set& e) {
    throw Error("LongBench task " + task.name + ": cannot score the prediction: " + python_error(e));
  }
}

}  // namespace kvscope::eval
