// kvscope inspect: summarise a trace file: runs, their groups and dataset shapes, completeness, policy,
// budget and event counts. Reads no maps, so it is quick on large files.
#include <cctype>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "app/subcommands.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/trace_probe.h"

namespace kvscope::app {

namespace {

struct InspectArgs {
  std::string file;
  bool all = false;
  bool json = false;
};

std::string shape_text(const std::vector<unsigned long long>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "attention/layer_03/head_07" -> "attention/layer_*/head_*".
std::string wildcard(const std::string& path) {
  std::string out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '_' && i + 1 < path.size() && std::isdigit(static_cast<unsigned char>(path[i + 1]))) {
      out += "_*";
      ++i;
      while (i < path.size() && std::isdigit(static_cast<unsigned char>(path[i]))) ++i;
    } else {
      out += path[i++];
    }
  }
  return out;
}

std::string attr(const trace::RunSummary& r, const std::string& key, const std::string& fallback = "-") {
  auto it = r.attributes.find(key);
  return it == r.attributes.end() || it->second.empty() ? fallback : it->second;
}

void print_text(const std::string& file, const trace::TraceSummary& s, bool all) {
  std::printf("%s: %s format %s, %zu run(s)\n", file.c_str(),
              s.attributes.count("format") ? s.attributes.at("format").c_str() : "?",
              s.attributes.count("format_version") ? s.attributes.at("format_version").c_str() : "?", s.runs.size());
  if (s.attributes.count("created_by")) std::printf("created by %s\n", s.attributes.at("created_by").c_str());
  for (const auto& r : s.runs) {
    std::printf("\nrun %s%s\n", r.name.c_str(), r.complete ? "" : "   [INCOMPLETE: complete = 0]");
    std::printf("  policy %s  params %s\n", attr(r, "policy").c_str(), attr(r, "policy_params").c_str());
    std::printf("  budget %s (%s tokens per layer and kv head)  allocation %s\n", attr(r, "budget", "whole prompt").c_str(),
                attr(r, "budget_tokens").c_str(), attr(r, "allocation").c_str());
    std::printf("  model %s  (%s layers, %s heads, %s kv heads)\n", attr(r, "model_name").c_str(), attr(r, "n_layers").c_str(),
                attr(r, "n_heads").c_str(), attr(r, "n_kv_heads").c_str());
    std::printf("  prompt %s tokens, generated %lld, steps %lld, stop %s\n", attr(r, "prompt_length").c_str(), r.n_generated,
                r.n_steps, attr(r, "stop_reason").c_str());
    std::printf("  events %lld (evicted %lld, merged %lld)\n", r.n_events, r.n_evicted, r.n_merged);
    // Datasets grouped by path with layer and head numbers wildcarded, so 270 attention maps read as one line.
    std::map<std::string, std::vector<const trace::DatasetInfo*>> groups;
    for (const auto& d : r.datasets) groups[all ? d.path : wildcard(d.path)].push_back(&d);
    std::printf("  datasets:\n");
    for (const auto& [key, list] : groups) {
      const auto* first = list.front();
      if (list.size() == 1)
        std::printf("    %-40s %-22s %s\n", first->path.c_str(), shape_text(first->shape).c_str(), first->dtype.c_str());
      else
        std::printf("    %-40s %3zu datasets, e.g. %s %s %s\n", key.c_str(), list.size(), first->path.c_str(),
                    shape_text(first->shape).c_str(), first->dtype.c_str());
    }
  }
  for (const auto& w : s.warnings) std::fprintf(stderr, "kvscope inspect: warning: %s\n", w.c_str());
}

nlohmann::json to_json(const trace::TraceSummary& s) {
  nlohmann::json j;
  j["attributes"] = s.attributes;
  j["warnings"] = s.warnings;
  j["runs"] = nlohmann::json::array();
  for (const auto& r : s.runs) {
    nlohmann::json jr;
    jr["name"] = r.name;
    jr["complete"] = r.complete;
    jr["attributes"] = r.attributes;
    jr["events"] = {{"total", r.n_events}, {"evicted", r.n_evicted}, {"merged", r.n_merged}};
    jr["steps"] = r.n_steps;
    jr["generated"] = r.n_generated;
    for (const auto& d : r.datasets) jr["datasets"][d.path] = {{"shape", d.shape}, {"dtype", d.dtype}};
    j["runs"].push_back(jr);
  }
  return j;
}

}  // namespace

Command register_inspect(CLI::App& root) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = root.add_subcommand("inspect", "summarise a trace file: runs, groups, shapes, policy, budget, events");
  cmd->add_option("file", args->file, "trace file (.h5)")->required();
  cmd->add_flag("--all", args->all, "list every dataset instead of grouping similar ones");
  cmd->add_flag("--json", args->json, "print the summary as JSON");
  return {cmd, [args]() {
            trace::probe_trace(args->file);
            const trace::TraceSummary s = trace::summarize_trace(args->file);
            if (args->json)
              std::cout << to_json(s).dump(2) << "\n";
            else
              print_text(args->file, s, args->all);
            return 0;
          }};
}

}  // namespace kvscope::app
