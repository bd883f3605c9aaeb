// What a decode step's attention costs per cache type (printed, not a timed test: hidden from ctest, run with
// `test_kernels "[.cost]"`). The default model's shape: 9 query heads over 3 KV heads of 64 dimensions, one layer.
// KIVI at its defaults (G = 32, R = 128): the newest 128 to 159 keys and 128 values are float32.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/observation/attention_observation.h"
#include "kernels/backend.h"

using namespace kvscope;

TEST_CASE("decode attention time per cache type", "[.cost]") {
  const int n_heads = 9, n_kv = 3, d = 64, repeats = 200;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (int n : {977, 4096}) {
    std::vector<float> k(static_cast<std::size_t>(n) * n_kv * d), v(k.size()), q(static_cast<std::size_t>(n_heads) * d);
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    for (auto& x : q) x = dist(rng);
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n; ++i) positions[i] = i;
    double f32_us = 0.0;
    for (kernels::KVCacheTypes type :
         {kernels::KVCacheTypes(kernels::CacheType::F32), kernels::KVCacheTypes(kernels::CacheType::F16),
          kernels::KVCacheTypes(kernels::CacheType::BF16), kernels::KVCacheTypes(kernels::CacheType::Q8_0),
          kernels::KVCacheTypes(kernels::CacheType::Q4_1), kernels::KVCacheTypes(kernels::CacheType::Q4_0),
          kernels::KVCacheTypes(kernels::CacheType::KIVI4), kernels::KVCacheTypes(kernels::CacheType::KIVI2)}) {
      cache::KVCache c(1, n_kv, d, type);
      c.append(0, k.data(), v.data(), n, positions.data());
      std::vector<float> out(q.size());
      const int32_t query_position = n;
      double best = 1e300;
      for (int r = 0; r < repeats; ++r) {
        observation::AttentionObservation side;
        const auto t0 = std::chrono::steady_clock::now();
        kernels::default_cpu_backend().attention(c.storage(), {0, n_heads, q.data(), 1, &query_position}, {}, nullptr,
                                                 side, out.data());
        best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      if (type == kernels::KVCacheTypes(kernels::CacheType::F32)) f32_us = best;
      std::printf("%5d keys  %-5s  %7.1f us per layer (best of %d)  x%.2f of f32  %6.2f MB of K/V per layer\n", n,
                  kernels::cache_type_name(type).c_str(), best, repeats, best / f32_us, c.entry_bytes() / 1e6);
    }
  }
  SUCCEED();
}

// What storing one decoded token costs per cache type (quantizing its key and value rows in every layer and KV
// head): the default model's 30 layers x 3 KV heads x 64, 512 tokens appended one at a time after 977, the mean
// per token (KIVI's key groups are quantized every G tokens, so the mean spreads them). Printed, not timed.
TEST_CASE("quantization cost per appended token per cache type", "[.cost]") {
  const int layers = 30, n_kv = 3, d = 64, prompt = 977, tokens = 512, repeats = 5;
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  std::vector<float> k(static_cast<std::size_t>(prompt + tokens) * n_kv * d), v(k.size());
  for (auto& x : k) x = dist(rng);
  for (auto& x : v) x = dist(rng);
  std::vector<int32_t> positions(prompt + tokens);
  for (int i = 0; i < prompt + tokens; ++i) positions[i] = i;
  const std::size_t row = static_cast<std::size_t>(n_kv) * d;
  double f32_us = 0.0;
  for (kernels::KVCacheTypes type :
       {kernels::KVCacheTypes(kernels::CacheType::F32), kernels::KVCacheTypes(kernels::CacheType::F16),
        kernels::KVCacheTypes(kernels::CacheType::BF16), kernels::KVCacheTypes(kernels::CacheType::Q8_0),
        kernels::KVCacheTypes(kernels::CacheType::Q4_1), kernels::KVCacheTypes(kernels::CacheType::Q4_0),
        kernels::KVCacheTypes(kernels::CacheType::KIVI4), kernels::KVCacheTypes(kernels::CacheType::KIVI2)}) {
    double best = 1e300;
    for (int r = 0; r < repeats; ++r) {
      cache::KVCache c(layers, n_kv, d, type);
      for (int l = 0; l < layers; ++l) c.append(l, k.data(), v.data(), prompt, positions.data());
      const auto t0 = std::chrono::steady_clock::now();
      for (int t = prompt; t < prompt + tokens; ++t)
        for (int l = 0; l < layers; ++l) c.append(l, k.data() + t * row, v.data() + t * row, 1, positions.data() + t);
      best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / tokens);
    }
    if (type == kernels::KVCacheTypes(kernels::CacheType::F32)) f32_us = best;
    std::printf("%-5s  %6.2f us per appended token (%d layers x %d KV heads, keys and values; best of %d)  x%.2f of f32\n",
                kernels::cache_type_name(type).c_str(), best, layers, n_kv, repeats, best / f32_us);
  }
  SUCCEED();
}
