// kvscope policies: every policy and every layer allocation, with parameters, defaults, ranges and the
// paper each comes from, so a spec like "snapkv:window=32,allocation=pyramid" can be written without
// reading the source.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/subcommands.h"
#include "core/policy/allocation_catalog.h"
#include "core/policy/policy_file.h"
#include "core/policy/protocol.h"
#include "core/policy/registry.h"

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

}  // namespace

Command register_policies(CLI::App& root) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd =
      root.add_subcommand("policies", "list the KV-cache policies and layer allocations with their parameters");
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
                nlohmann::json out{{"name", p.name}, {"summary", p.summary}, {"reference", p.reference},
                                   {"params", params_json(p.params)}, {"provenance", p.provenance}};
                std::cout << out.dump(2) << "\n";
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
              out["allocations"] = nlohmann::json::array();
              for (const auto& a : policy::all_allocations())
                out["allocations"].push_back({{"name", a.name},
                                              {"summary", a.summary},
                                              {"reference", a.reference},
                                              {"params", params_json(a.params)}});
              std::cout << out.dump(2) << "\n";
              return 0;
            }
            std::printf("Policies (--policy NAME:key=value,...; see docs/policies.md)\n\n");
            for (const auto& p : policy::all_policies()) {
              std::printf("%s — %s\n  %s\n", p.name.c_str(), p.summary.c_str(), p.reference.c_str());
              print_params(p.params, true);
              std::printf("\n");
            }
            std::printf(
                "Layer allocations (allocation=NAME on any policy that takes one; their parameters go in the "
                "same spec)\n\n");
            for (const auto& a : policy::all_allocations()) {
              std::printf("%s — %s\n  %s\n", a.name.c_str(), a.summary.c_str(), a.reference.c_str());
              print_params(a.params, false);
              std::printf("\n");
            }
            return 0;
          }};
}

}  // namespace kvscope::app
