#include "core/analysis/similarity.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvscope::analysis {

Map2D cosine_similarity_map(const float* x, int n, int d, int max_size, Pooling mode) {
  const PoolShape shape = PoolShape::fit(n, n, max_size, max_size, mode);
  MapCollector collector(shape);
  if (n == 0) return collector.take();

  std::vector<float> unit(static_cast<std::size_t>(n) * d);
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<std::size_t>(i) * d;
    double norm = 0.0;
    for (int t = 0; t < d; ++t) norm += static_cast<double>(xi[t]) * xi[t];
    const float inv = norm > 0.0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
    for (int t = 0; t < d; ++t) unit[static_cast<std::size_t>(i) * d + t] = xi[t] * inv;
  }

  // The map is symmetric and row and column blocks are equal, so only the lower triangle (through the
  // diagonal block) is computed, halving the BLAS work; the upper triangle is mirrored afterwards.
  const int block = shape.row_block;
  // Batches of about 256 rows: large enough that BLAS threads pay off, small enough (2 MiB at n = 2048)
  // to stay in cache.
  const int batch = block * std::max(1, (256 + block - 1) / block);
  std::vector<float> sims(static_cast<std::size_t>(batch) * n);
  RowPooler pooler(shape, collector.sink());
  for (int r0 = 0; r0 < n; r0 += batch) {
    const int rows = std::min(batch, n - r0);
    const int cols = r0 + rows;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, 1.0f, unit.data() + static_cast<std::size_t>(r0) * d,
                d, unit.data(), d, 0.0f, sims.data(), cols);
    for (int r = 0; r < rows; ++r)
      pooler.add_row(r0 + r, std::span<const float>(sims.data() + static_cast<std::size_t>(r) * cols, static_cast<std::size_t>(cols)));
  }
  pooler.finish();
  Map2D map = collector.take();
  for (int r = 0; r < map.rows; ++r)
    for (int c = r + 1; c < map.cols; ++c)
      map.values[static_cast<std::size_t>(r) * map.cols + c] = map.values[static_cast<std::size_t>(c) * map.cols + r];
  return map;
}

Map2D cache_similarity_map(const cache::KVCache& cache, int layer, int kv_head, CachedVectors which, int max_size,
                           Pooling mode) {
  const int n = cache.size(layer, kv_head);
  const auto data = which == CachedVectors::Keys ? cache.keys(layer, kv_head) : cache.values(layer, kv_head);
  Map2D map = cosine_similarity_map(data.data(), n, cache.head_dim(), max_size, mode);
  const auto positions = cache.positions(layer, kv_head);
  bool contiguous = true;
  for (int i = 0; i < n && contiguous; ++i) contiguous = positions[i] == i;
  if (!contiguous) map.source_positions.assign(positions.begin(), positions.end());
  return map;
}

}  // namespace kvscope::analysis
