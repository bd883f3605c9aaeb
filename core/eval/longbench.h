#pragma once
// LongBench (v1) as kvscope runs it: the task table (prompt format, new tokens, metric, chat template or not),
// its records (JSONL with context, input, answers, all_classes, length, dataset), and its scoring rules,
// equal to LongBench's own numbers (the rules run in the embedded Python: longbench_python.h).
#include <filesystem>
#include <string>
#include <vector>

namespace kvscope::eval {

struct LongBenchTask {
  std::string name;
  std::string metric;  // qa_f1, rouge_l, classification, retrieval, count, code_sim
  int max_new_tokens = 0;
  std::string prompt_template;  // with {context} and {input}
  bool chat = true;             // pred.py wraps it in the model's chat template (not for few-shot / code tasks)
  bool first_line = false;      // eval.py scores the prediction's first line only
  bool stop_at_newline = false; // pred.py stops generation at a newline (samsum)
};

// Throws Error for an unknown or Chinese task. prompts_json: a JSON object of task -> template overriding the
// built-in formats (empty: none).
LongBenchTask longbench_task(const std::string& name, const std::string& prompts_json = "");
std::vector<std::string> longbench_task_names();

struct LongBenchRecord {
  std::string dataset;
  std::string context, input;
  std::vector<std::string> answers;
  std::vector<std::string> all_classes;
  int length = 0;  // the record's own `length` field (words), kept for reports
  std::string id;  // `_id` when present
  std::string json;  // the whole record, for the prompt format
};
// Reads a LongBench JSONL file; throws Error naming the file and line for a record that is not an object with
// string context/input and a list of string answers.
std::vector<LongBenchRecord> read_longbench_jsonl(const std::filesystem::path& path);

// pred.py: the prompt format filled with the record's fields.
std::string longbench_prompt(const LongBenchTask& task, const LongBenchRecord& record);

// The filled prompt format after {context} (the question and the answer cue): what --protocol query-agnostic
// appends after the context is compressed.
std::string longbench_question(const LongBenchTask& task, const LongBenchRecord& record);

// One score per (prediction, reference[, classes]) pair with one of the metrics (0-1 scale). Throws Error for
// an unknown metric or a pair the metric cannot score (a retrieval reference without "Paragraph N").
struct MetricPair {
  std::string prediction, reference;
  std::vector<std::string> classes;
};
std::vector<double> longbench_metric_scores(const std::string& metric, const std::vector<MetricPair>& pairs);

// eval.py's scorer for one record: its first line for some tasks, the best score over the answers.
double longbench_record_score(const LongBenchTask& task, const std::string& prediction, const LongBenchRecord& record);

}  // namespace kvscope::eval
