// The run attributes that say what a policy ran with: every parameter as given, overlaid by the settings
// the policy derived, and its warnings, as JSON a reader can parse.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/trace/run_metadata.h"

using namespace kvscope;

TEST_CASE("effective_settings overlays derived settings on the given parameters", "[trace][metadata]") {
  const std::map<std::string, std::string> metadata = {
      {"policy_params", R"({"block": "0", "theta": "0.75", "split": "budget"})"}};
  policy::Diagnostics d;
  d.set_setting("block", "16");
  d.set_setting("theta_used", "[[0.75, 0.5], [0.25, 1]]");
  d.warn("layers 0-3 keep the whole prompt");
  d.warn("layers 0-3 keep the whole prompt");  // a repeat is dropped
  const auto out = trace::policy_outcome_metadata(metadata, d);
  const auto settings = nlohmann::json::parse(out.at("effective_settings"));
  CHECK(settings.at("block") == 16);
  CHECK(settings.at("theta") == "0.75");
  CHECK(settings.at("split") == "budget");
  CHECK(settings.at("theta_used")[1][0] == 0.25);
  const auto warnings = nlohmann::json::parse(out.at("policy_warnings"));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "layers 0-3 keep the whole prompt");
}

TEST_CASE("a run without policy parameters still gets both attributes", "[trace][metadata]") {
  const auto out = trace::policy_outcome_metadata({}, policy::Diagnostics{});
  CHECK(out.at("effective_settings") == "{}");
  CHECK(out.at("policy_warnings") == "[]");
}
