// `kvscope trace` on the SmolLM2 Hugging Face folder and on the GGUF it was made from: the same maps in the same
// shapes, with provenance that names the format, the architecture and the tokenizer of each.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/trace/hdf5_reader.h"

using namespace kvscope;

namespace {

int run(const std::string& args) { return std::system((std::string(KVSCOPE_BINARY) + " " + args + " 2>&1").c_str()); }

trace::RunSummary trace_of(const std::string& model_flag, const std::filesystem::path& out) {
  const std::string prompt =
      "The keeper wrote the weather in his log every night: wind, swell and ships. Where was the key?";
  REQUIRE(run("trace --quiet --force " + model_flag + " --prompt '" + prompt +
              "' --policy h2o --budget 12 --max-new-tokens 3 --out " + out.string()) == 0);
  const trace::TraceSummary summary = trace::summarize_trace(out);
  REQUIRE(summary.runs.size() == 1);
  return summary.runs.front();
}

}  // namespace

TEST_CASE("trace on a Hugging Face folder records the same maps as on the GGUF, with its own provenance",
          "[hf][trace]") {
  const auto folder = std::filesystem::path(KVSCOPE_HF_FIXTURES_DIR) / "bf16";
  REQUIRE(std::filesystem::is_directory(folder));
  const auto dir = std::filesystem::temp_directory_path();
  const auto hf_file = dir / ("kvscope_hf_trace_" + std::to_string(::getpid()) + ".h5");
  const auto gguf_file = dir / ("kvscope_gguf_trace_" + std::to_string(::getpid()) + ".h5");
  const trace::RunSummary hf = trace_of("--model " + folder.string(), hf_file);
  const trace::RunSummary gguf = trace_of("", gguf_file);
  std::filesystem::remove(hf_file);
  std::filesystem::remove(gguf_file);

  CHECK(hf.complete);
  CHECK(hf.attributes.at("model") == folder.string());
  CHECK(hf.attributes.at("model_format") == "huggingface");
  CHECK(hf.attributes.at("model_architecture") == "LlamaForCausalLM");
  CHECK(hf.attributes.at("model_sha256").size() == 64);
  CHECK_THAT(hf.attributes.at("tokenizer"),
             Catch::StartsWith("transformers 5.2.0 ") && Catch::EndsWith("decoder ByteLevel), 49152 tokens"));
  CHECK(gguf.attributes.at("model_format") == "gguf");
  CHECK(gguf.attributes.at("model_architecture") == "llama");
  CHECK(hf.attributes.at("model_config") == gguf.attributes.at("model_config"));  // same sizes, whatever the format
  CHECK(hf.n_steps == gguf.n_steps);
  REQUIRE(hf.datasets.size() == gguf.datasets.size());
  for (std::size_t i = 0; i < hf.datasets.size(); ++i) {
    INFO(hf.datasets[i].path);
    CHECK(hf.datasets[i].path == gguf.datasets[i].path);
    CHECK(hf.datasets[i].dtype == gguf.datasets[i].dtype);
    if (hf.datasets[i].path.find("tokens") == std::string::npos &&
        hf.datasets[i].path.find("events") == std::string::npos)
      CHECK(hf.datasets[i].shape == gguf.datasets[i].shape);
  }
}

TEST_CASE("trace --chat runs through the SentencePiece-style Llama 2 and Mistral folders", "[hf][trace][chat]") {
  for (const std::string name : {"llama2", "mistral"}) {
    INFO("checkpoint " << name);
    const auto folder = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_synthetic" / name;
    const auto out =
        std::filesystem::temp_directory_path() / ("kvscope_hf_trace_" + name + std::to_string(::getpid()) + ".h5");
    const trace::RunSummary run_summary = trace_of("--chat --model " + folder.string(), out);
    std::filesystem::remove(out);
    CHECK(run_summary.complete);
    CHECK(run_summary.n_steps > 0);
    CHECK_THAT(run_summary.attributes.at("tokenizer"), Catch::StartsWith("transformers 5.2.0 ") && Catch::Contains("(BPE,"));
  }
}
