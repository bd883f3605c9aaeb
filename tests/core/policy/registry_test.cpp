// Policy specs: every baseline is reachable by name, its parameters carry paper defaults inside their
// ranges, and mistakes are reported with the valid choices.
#include "core/policy/registry.h"

#include <catch2/catch.hpp>
#include <set>

#include "core/common/error.h"
#include "core/policy/allocation.h"
#include "core/policy/compose_policy.h"

using namespace kvscope;
using namespace kvscope::policy;

TEST_CASE("the baselines are registered", "[registry]") {
  for (const std::string name : {"full", "streaming_llm", "h2o", "tova", "snapkv", "pyramidkv"}) {
    INFO(name);
    const auto inst = make_policy(name);
    REQUIRE(inst.policy != nullptr);
    CHECK(inst.policy->name() == name);
    CHECK(inst.name == name);
  }
}

TEST_CASE("every parameter has a doc line and a default inside its range", "[registry]") {
  for (const auto& info : all_policies()) {
    std::set<std::string> seen;
    for (const auto& p : info.params) {
      INFO(info.name << "." << p.name);
      CHECK(seen.insert(p.name).second);
      CHECK_FALSE(p.doc.empty());
      if (p.kind == ParamSpec::Kind::Choice) {
        CHECK(std::find(p.choices.begin(), p.choices.end(), p.default_choice) != p.choices.end());
      } else {
        CHECK(p.default_number >= p.min);
        CHECK(p.default_number <= p.max);
      }
    }
  }
}

TEST_CASE("paper defaults", "[registry]") {
  auto params = [](const std::string& spec) { return make_policy(spec).params; };
  CHECK(params("streaming_llm").get_int("sinks") == 4);
  CHECK(params("h2o").get_float("recent_ratio") == 0.5);
  CHECK(params("h2o").get_int("block") == 0);
  CHECK(params("snapkv").get_int("window") == 32);
  CHECK(params("snapkv").get_int("kernel") == 7);
  CHECK(params("snapkv").get_choice("pooling") == "avg");
  CHECK(params("snapkv").get_choice("allocation") == "uniform");
  CHECK(params("pyramidkv").get_choice("allocation") == "pyramid");
  CHECK(params("pyramidkv").get_float("beta") == 20.0);
  CHECK(params("tova").get_choice("heads") == "kv");
  CHECK(make_policy("h2o:block=16").policy->prefill_block_size() == 16);
  CHECK(make_policy("snapkv").policy->prefill_block_size() == 0);
}

TEST_CASE("spec errors list the valid values", "[registry]") {
  CHECK_THROWS_AS(make_policy("snapkvv"), UsageError);
  CHECK_THROWS_WITH(make_policy("snapkvv"), Catch::Contains("unknown policy 'snapkvv'") &&
                                                Catch::Contains("streaming_llm") && Catch::Contains("h2o") &&
                                                Catch::Contains("tova") && Catch::Contains("snapkv") &&
                                                Catch::Contains("pyramidkv"));
  CHECK_THROWS_WITH(make_policy("h2o:heavy=3"), Catch::Contains("no parameter 'heavy'") &&
                                                    Catch::Contains("recent_ratio") && Catch::Contains("block") &&
                                                    Catch::Contains("allocation"));
  CHECK_THROWS_WITH(make_policy("h2o:recent_ratio=1.5"), Catch::Contains("out of range") && Catch::Contains("[0, 1]"));
  CHECK_THROWS_WITH(make_policy("streaming_llm:sinks=-1"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(make_policy("streaming_llm:sinks=2.5"), Catch::Contains("not an integer"));
  CHECK_THROWS_WITH(make_policy("snapkv:pooling=mean"), Catch::Contains("avg|max|none"));
  CHECK_THROWS_WITH(make_policy("snapkv:allocation=cone"), Catch::Contains("uniform") && Catch::Contains("pyramid"));
  CHECK_THROWS_WITH(make_policy("snapkv:kernel=4"), Catch::Contains("odd"));
  CHECK_THROWS_WITH(make_policy("pyramidkv:beta=0"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(make_policy("tova:heads=all"), Catch::Contains("kv|layer"));
  CHECK_THROWS_WITH(make_policy("h2o:block"), Catch::Contains("key=value"));
  // A comma or space where the colon belongs names the spec as it should have been written.
  CHECK_THROWS_WITH(make_policy("d2o,swa=skip"), Catch::Contains("after a colon") && Catch::Contains("'d2o:swa=skip'"));
  CHECK_THROWS_WITH(make_policy("snapkv window=16"), Catch::Contains("'snapkv:window=16'"));
  CHECK_THROWS_WITH(make_policy("snapkvv,window=16"), Catch::Contains("valid policies"));
}

TEST_CASE("every scored policy accepts every allocation", "[registry]") {
  for (const std::string name : {"streaming_llm", "h2o", "tova", "snapkv", "pyramidkv"})
    for (const auto& allocation : allocation_names()) {
      INFO(name << " allocation " << allocation);
      // per_layer has no default: its ratios are the user's
      const auto inst = make_policy(name + ":allocation=" + allocation + (allocation == "per_layer" ? ",layer_ratios=0.5" : ""));
      CHECK(inst.params.get_choice("allocation") == allocation);
    }
}

TEST_CASE("compose: two scored policies from one spec, refused with what is wrong", "[registry]") {
  const auto inst = make_policy("compose:first=snapkv,then=h2o,then_ratio=0.5,first.window=16,then.recent_ratio=0.25");
  CHECK(inst.name == "compose");
  CHECK(inst.params.get_int("window") == 16);
  CHECK(inst.params.get_choice("then") == "h2o");
  CHECK(inst.params.get_float("then_ratio") == 0.5);
  CHECK(inst.params.as_text().at("then.recent_ratio") == "0.25");
  // Left out, compose's own parameters take the defaults `kvscope policies` lists for them.
  const auto& info = compose_policy_info();
  CHECK(make_policy("compose:first=snapkv,then=h2o").params.get_float("then_ratio") == 0.5);
  const auto plain = make_policy("compose");
  for (const auto& p : info.params) {
    INFO(p.name);
    CHECK(plain.params.as_text().at(p.name) == p.default_text());
  }
  CHECK_THROWS_WITH(make_policy("compose:then=h2o,first.window=16"),
                    Catch::Contains("first.NAME= or then.NAME= given without first="));
  CHECK_THROWS_WITH(make_policy("compose:first=snapkv,then=full,then_ratio=0.5"),
                    Catch::Contains("then=full is not a scored policy"));
  CHECK_THROWS_WITH(make_policy("compose:first=snapkv,then=h2o,then_ratio=1"),
                    Catch::Contains("then_ratio = '1' is not a number in [0, 1)"));
  CHECK_THROWS_WITH(make_policy("compose:first=snapkv,then=h2o,then_ratio=0.5,second.x=1"),
                    Catch::Contains("unknown key 'second.x'"));
  CHECK_THROWS_WITH(make_policy("compose:first=snapkv,then=h2o,then_ratio=0.5,then.bogus=1"),
                    Catch::Contains("compose: then (h2o:bogus=1): policy 'h2o' has no parameter 'bogus'"));
  CHECK_THROWS_WITH(make_policy("compose:first=snapkv,then=h2o,then_ratio=0.5,first.selection=adakv"),
                    Catch::Contains("both policies must select per head"));
}

TEST_CASE("compose lists its own parameters, offering every scored built-in as first and then", "[registry]") {
  const auto& info = compose_policy_info();
  CHECK(info.name == "compose");
  std::vector<std::string> names;
  for (const auto& p : info.params) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"first", "then", "then_ratio"});
  const auto& choices = info.params[0].choices;
  // Scored policies compose; the full cache and the merging kvmerger (not scored) do not.
  for (const std::string scored : {"snapkv", "h2o", "tova", "streaming_llm", "pyramidkv"})
    CHECK(std::find(choices.begin(), choices.end(), scored) != choices.end());
  CHECK(std::find(choices.begin(), choices.end(), "full") == choices.end());
  for (const auto& name : choices) {
    INFO(name);
    CHECK_NOTHROW(make_policy("compose:first=" + name + ",then=" + name + ",then_ratio=0.25"));
  }
  CHECK(info.params[2].range_text() == "[0, 1)");
  CHECK(info.make(make_policy("compose:first=h2o,then=tova,then_ratio=0.25").params)->name() == "h2o");
}
