#pragma once
// Drives a Recorder exactly the way the engine does (append, rows block by block, observation, edit with
// the cache before it, step end), on a tiny model shape with made-up attention, so the trace can be
// checked against numbers this file knows independently.
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/engine/engine.h"
#include "core/trace/recorder.h"

namespace kvscope::test {

struct FakeRun {
  model::ModelConfig config;
  int prompt = 40;
  int max_new = 5;
  cache::KVCache cache;
  std::mt19937 rng{42};
  // What was fed: prefill probabilities [layer][head] as dense S x S (position space), decode rows
  // [step][layer][head] in position space over prompt + max_new positions.
  std::map<std::pair<int, int>, std::vector<float>> prefill;
  std::vector<std::map<std::pair<int, int>, std::vector<float>>> decode;
  int expected_evicted = 0, expected_merged = 0;

  static model::ModelConfig small_config() {
    model::ModelConfig c;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 4;
    c.dim = 16;
    return c;
  }

  FakeRun() : config(small_config()), cache(config.n_layers, config.n_kv_heads, config.head_dim) {}

  trace::RecordedRun recorded_run(const std::string& name) const {
    trace::RecordedRun r;
    r.name = name;
    r.metadata = {{"policy", "fake"}, {"budget", "30"}, {"prompt", "a made-up prompt"}};
    r.config = config;
    for (int i = 0; i < prompt; ++i) r.prompt.push_back(100 + i);
    r.max_new_tokens = max_new;
    return r;
  }

  void append(int layer, int first_position, int n) {
    std::normal_distribution<float> g;
    std::vector<float> k(static_cast<std::size_t>(n) * config.n_kv_heads * config.head_dim), v(k.size());
    for (auto& x : k) x = g(rng);
    for (auto& x : v) x = g(rng);
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n; ++i) positions[i] = first_position + i;
    cache.append(layer, k.data(), v.data(), n, positions.data());
  }

  // Softmax of random logits over the entries of (layer, kv head) visible to a query at `position`.
  std::vector<float> row(int layer, int kv, int position, int n_cols) {
    std::normal_distribution<float> g(0.0f, 2.0f);
    const auto pos = cache.positions(layer, kv);
    std::vector<float> p(n_cols, 0.0f);
    double z = 0;
    for (int j = 0; j < n_cols; ++j)
      if (pos[j] <= position) z += p[j] = std::exp(g(rng));
    for (auto& x : p) x = static_cast<float>(x / z);
    return p;
  }

  void prefill_step(engine::RunObserver& obs) {
    const int group = config.n_heads / config.n_kv_heads;
    observation::StepInfo step{observation::Phase::Prefill, 0, prompt, true};
    for (int l = 0; l < config.n_layers; ++l) {
      append(l, 0, prompt);
      for (int h = 0; h < config.n_heads; ++h) {
        std::vector<float> dense(static_cast<std::size_t>(prompt) * prompt, 0.0f);
        // Two query blocks, each seeing the prefix of keys up to its last query (as the kernel does).
        for (int i0 = 0; i0 < prompt; i0 += 25) {
          const int rows = std::min(25, prompt - i0), m_block = i0 + rows;
          std::vector<float> block(static_cast<std::size_t>(rows) * m_block);
          for (int r = 0; r < rows; ++r) {
            const auto p = row(l, h / group, i0 + r, m_block);
            std::copy(p.begin(), p.end(), block.begin() + static_cast<std::size_t>(r) * m_block);
            std::copy(p.begin(), p.end(), dense.begin() + static_cast<std::size_t>(i0 + r) * prompt);
          }
          obs.on_rows(l, h, i0, rows, m_block, block.data());
        }
        prefill[{l, h}] = std::move(dense);
      }
      observation::AttentionObservation o;
      o.layer = l;
      o.phase = observation::Phase::Prefill;
      o.n_heads = config.n_heads;
      o.n_kv_heads = config.n_kv_heads;
      for (int i = 0; i < prompt; ++i) o.query_positions.push_back(i);
      obs.on_observation(o);
    }
    // Post-prefill compression: layer 0 kv 0 evicts 5, 6, 7 and merges 9 into 8; layer 1 kv 1 evicts 0, 1.
    cache::CacheEdit edit;
    cache::HeadEdit a{0, 0, {}, {}, {}, {}, {}};
    for (int i = 0; i < prompt; ++i)
      if (i != 5 && i != 6 && i != 7 && i != 9) a.keep.push_back(i);
    a.merges.push_back({8, {9}, {0.75f, 0.25f}});
    for (int i = 0; i < prompt; ++i) a.scores.push_back(static_cast<float>(i));
    cache::HeadEdit b{1, 1, {}, {}, {}, {}, {}};
    for (int i = 2; i < prompt; ++i) b.keep.push_back(i);
    edit.heads = {a, b};
    expected_evicted += 5;
    expected_merged += 1;
    obs.on_edit(edit, cache, step);
    cache.apply(edit);
    obs.on_step_end(step, cache, 7, -0.5f);
  }

  void decode_step(engine::RunObserver& obs, int t) {
    const int group = config.n_heads / config.n_kv_heads;
    const int position = prompt + t;
    observation::StepInfo step{observation::Phase::Decode, t, position + 1, true};
    std::map<std::pair<int, int>, std::vector<float>> rows;
    for (int l = 0; l < config.n_layers; ++l) {
      append(l, position, 1);
      for (int h = 0; h < config.n_heads; ++h) {
        const int kv = h / group;
        const int m = cache.size(l, kv);
        const auto p = row(l, kv, position, m);
        obs.on_rows(l, h, 0, 1, m, p.data());
        std::vector<float> dense(prompt + max_new, 0.0f);
        const auto pos = cache.positions(l, kv);
        for (int j = 0; j < m; ++j) dense[pos[j]] = p[j];
        rows[{l, h}] = std::move(dense);
      }
    }
    decode.push_back(std::move(rows));
    if (t == 1) {
      // One eviction per step for layer 1 kv 0: its oldest entry.
      cache::CacheEdit edit;
      cache::HeadEdit e{1, 0, {}, {}, {}, {}, {}};
      for (int i = 1; i < cache.size(1, 0); ++i) e.keep.push_back(i);
      edit.heads = {e};
      ++expected_evicted;
      obs.on_edit(edit, cache, step);
      cache.apply(edit);
    }
    obs.on_step_end(step, cache, 200 + t, -1.0f - t);
  }

  engine::RunResult result() const {
    engine::RunResult r;
    for (int i = 0; i < max_new; ++i) r.generated_tokens.push_back(i == 0 ? 7 : 200 + i - 1);
    r.stop_reason = "max_new_tokens";
    r.layer_budgets = {30, 30};
    return r;
  }

  // A complete run: prefill then max_new - 1 decode steps, then finish.
  void run_all(trace::Recorder& rec) {
    prefill_step(rec);
    for (int t = 0; t + 1 < max_new; ++t) decode_step(rec, t);
    rec.finish(result());
  }
};

}  // namespace kvscope::test
