// kvscope policies: every policy, compose (two policies in sequence) and every layer allocation, with parameters,
// defaults, ranges and the paper each comes from, so a spec like "snapkv:window=32,allocation=pyramid" can be
// written without reading the source; then the policy files kvscope ships (shipped_policies.h), described as
// `--file` does.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/subcommands.h"
#include "core/policy/allocation_catalog.h"
#include "core/policy/compose_policy.h"
#include "core/policy/policy_file.h"
#include "core/policy/protocol.h"
#include "core/policy/registry.h"
#include "core/policy/shipped_policies.h"
#include "core/policy/user_scorer.h"

namespace kvscope::app {

namespace {

const char* kind_name(policy::ParamSpec::Kind kind) {
  switch (kind) {
    case policy::ParamSpec::Kind::Int:
      return "int";
    case policy::ParamSpec::Kind::Float:
      return "float";
    case policy::ParamSpec::Kind::Choice:
      return "choice";
    case policy::ParamSpec::Kind::Bool:
      return "bool";
    case policy::ParamSpec::Kind::RealList:
      return "list of float";
  }
  return "?";
}

nlohmann::json params_json(const std::vector<policy::ParamSpec>& params) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : params) {
    nlohmann::json j{{"name", p.name},
                     {"kind", kind_name(p.kind)},
                     {"default", p.default_text()},
                     {"range", p.range_text()},
                     {"doc", p.doc}};
    if (p.kind == policy::ParamSpec::Kind::Choice) {
      j["choices"] = p.choices;
    } else if (p.kind != policy::ParamSpec::Kind::Bool) {
      j["min"] = p.min;
      j["max"] = p.max;
      if (p.max_open) j["max_open"] = true;
    }
    out.push_back(std::move(j));
  }
  return out;
}

// Parameters a policy takes from the allocations are listed once, under the allocations.
bool from_allocation(const policy::ParamSpec& p) { return !policy::allocations_declaring(p).empty(); }

void print_params(const std::vector<policy::ParamSpec>& params, bool skip_allocation_params) {
  std::size_t width = 0;
  for (const auto& p : params) width = std::max(width, p.name.size());
  bool any = false;
  for (const auto& p : params) {
    if (skip_allocation_params && from_allocation(p)) continue;
    any = true;
    std::printf("    %-*s  default %-8s %s\n", static_cast<int>(width), p.name.c_str(), p.default_text().c_str(),
                p.range_text().c_str());
    std::printf("    %-*s  %s\n", static_cast<int>(width), "", p.doc.c_str());
  }
  if (!any) std::printf("    (no parameters)\n");
}

nlohmann::json file_json(const policy::PolicyInfo& p) {
  return {{"name", p.name},
          {"summary", p.summary},
          {"reference", p.reference},
          {"params", params_json(p.params)},
          {"provenance", p.provenance}};
}

bool is_framework_or_protocol(const std::string& name) {
  if (name == "allocation" || policy::is_framework_param(name)) return true;
  for (const auto& p : policy::protocol_params(policy::Protocol{}))
    if (p.name == name) return true;
  return false;
}

// A shipped policy file as the listing shows it: described by the same loader as `--file`, or why it could not be.
struct ShippedFile {
  std::filesystem::path path;
  std::optional<policy::PolicyInfo> info;
  std::string error;
};

std::vector<ShippedFile> describe_shipped_files() {
  std::vector<ShippedFile> out;
  for (const auto& path : policy::shipped_policy_files()) {
    ShippedFile f{path, std::nullopt, ""};
    try {
      f.info = policy::describe_policy(policy::policy_file_spec_for(path.string()));
    } catch (const std::exception& e) {
      f.error = e.what();
    }
    out.push_back(std::move(f));
  }
  return out;
}

nlohmann::json shipped_files_json(const std::vector<ShippedFile>& files) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : files) {
    nlohmann::json j{{"file", f.path.string()}};
    if (f.info) {
      j.update(file_json(*f.info));
      j["ports"] = policy::ported_press(f.info->summary);
    } else {
      j["name"] = "python:" + f.path.stem().string();
      j["error"] = f.error;
    }
    out.push_back(std::move(j));
  }
  return out;
}

void print_shipped_files(const std::vector<ShippedFile>& files) {
  const auto dir = policy::shipped_policies_dir();
  if (!dir) {
    std::printf("Shipped policy files: none (no examples/policies beside this kvscope)\n");
    return;
  }
  std::printf("Shipped policy files (--policy python:PATH[,name=value...]; in %s)\n\n", dir->string().c_str());
  for (const auto& f : files) {
    if (!f.info) {
      std::printf("python:%s — cannot be loaded: %s\n  %s\n\n", f.path.stem().string().c_str(), f.error.c_str(),
                  f.path.string().c_str());
      continue;
    }
    const std::string ports = policy::ported_press(f.info->summary);
    const std::string first_line = f.info->summary.substr(0, f.info->summary.find('\n'));
    std::printf("%s — %s\n  %s\n", f.info->name.c_str(),
                ports.empty() ? first_line.c_str() : ("ports " + ports).c_str(), f.path.string().c_str());
    // The framework's parameters (the same on every file but for their defaults) go on one line.
    std::vector<policy::ParamSpec> own;
    std::string framework;
    for (const auto& p : f.info->params) {
      if (from_allocation(p)) continue;
      if (is_framework_or_protocol(p.name))
        framework += (framework.empty() ? "" : ", ") + p.name + "=" + p.default_text();
      else
        own.push_back(p);
    }
    print_params(own, true);
    std::printf("    and the framework's: %s (kvscope policies --file PATH for their ranges)\n\n", framework.c_str());
  }
}

}  // namespace

Command register_policies(CLI::App& root) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = root.add_subcommand(
      "policies", "list the KV-cache policies, layer allocations and shipped policy files with their parameters");
  cmd->add_flag("--json", *json, "print a machine-readable list");
  auto protocols = std::make_shared<bool>(false);
  cmd->add_flag("--protocols", *protocols,
                "print the table of which policy supports which protocol switch (as in docs/policies.md)");

  auto file = std::make_shared<std::string>();
  cmd->add_option("--file", *file,
                  "describe a policy of your own: a Python file (python:PATH.py) or a plugin (plugin:PATH.so; a path "
                  "ending in .py is taken as Python, anything else as a plugin). Loading it runs its code");

  return {cmd, [json, protocols, file]() {
            if (!file->empty()) {
              const policy::PolicyInfo p = policy::describe_policy(policy::policy_file_spec_for(*file));
              if (*json) {
                std::cout << file_json(p).dump(2) << "\n";
                return 0;
              }
              std::printf("%s — %s\n  %s (sha256 %s)\n", p.name.c_str(), p.summary.c_str(), p.reference.c_str(),
                          p.provenance.at("policy_file_sha256").c_str());
              print_params(p.params, true);
              std::printf("\n  and the allocation parameters of `kvscope policies` where it takes `allocation`\n");
              return 0;
            }
            if (*protocols) {
              std::cout << policy::protocol_table_markdown();
              return 0;
            }
            if (*json) {
              nlohmann::json out;
              out["policies"] = nlohmann::json::array();
              for (const auto& p : policy::all_policies())
                out["policies"].push_back({{"name", p.name},
                                           {"summary", p.summary},
                                           {"reference", p.reference},
                                           {"params", params_json(p.params)}});
              // compose is a spec of two policies rather than one registered policy: its own entry, with the
              // rule for the inner policies' parameters.
              const policy::PolicyInfo& compose = policy::compose_policy_info();
              out["compose"] = {{"name", compose.name},
                                {"summary", compose.summary},
                                {"reference", compose.reference},
                                {"params", params_json(compose.params)},
                                {"inner_params", policy::compose_prefix_rule()}};
              out["allocations"] = nlohmann::json::array();
              for (const auto& a : policy::all_allocations())
                out["allocations"].push_back({{"name", a.name},
                                              {"summary", a.summary},
                                              {"reference", a.reference},
                                              {"params", params_json(a.params)}});
              out["files"] = shipped_files_json(describe_shipped_files());
              std::cout << out.dump(2) << "\n";
              return 0;
            }
            std::printf("Policies (--policy NAME:key=value,...; see docs/policies.md)\n\n");
            for (const auto& p : policy::all_policies()) {
              std::printf("%s — %s\n  %s\n", p.name.c_str(), p.summary.c_str(), p.reference.c_str());
              print_params(p.params, true);
              std::printf("\n");
            }
            const policy::PolicyInfo& compose = policy::compose_policy_info();
            std::printf("Composition (--policy compose:first=POLICY,then=POLICY,then_ratio=R,first.NAME=V,...)\n\n");
            std::printf("%s — %s\n  %s\n", compose.name.c_str(), compose.summary.c_str(), compose.reference.c_str());
            print_params(compose.params, false);
            std::printf("    and %s\n\n", policy::compose_prefix_rule().c_str());
            std::printf(
                "Every policy also takes swa=skip|compress|window: what it does on a model's sliding-window layers "
                "(Gemma 2 / 3; default skip, as kvpress; docs/policies.md)\n\n");
            std::printf(
                "Layer allocations (allocation=NAME on any policy that takes one; their parameters go in the "
                "same spec)\n\n");
            for (const auto& a : policy::all_allocations()) {
              std::printf("%s — %s\n  %s\n", a.name.c_str(), a.summary.c_str(), a.reference.c_str());
              print_params(a.params, false);
              std::printf("\n");
            }
            print_shipped_files(describe_shipped_files());
            return 0;
          }};
}

}  // namespace kvscope::app
