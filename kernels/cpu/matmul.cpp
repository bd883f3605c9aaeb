// Weight-times-activation products. Prefill dequantizes the weight into a per-thread scratch buffer once
// and hands the product to BLAS; decode reads the quantized rows directly, split across threads.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/common/dequantize.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/row_groups.h"

namespace kvscope::kernels {

namespace {

// Rows r0..r1 of w times each of the n inputs. Block formats are read in place (quant_dot.h); any other
// type is dequantized a row at a time.
void matvec_rows_of(const QuantMatrix& w, int r0, int r1, const float* x, const float* sums, int n, float* y,
                    std::vector<float>& row) {
  if (has_quant_dot(w)) {
    // One input after the other over the same rows: the second input finds the rows in cache.
    for (int i = 0; i < n; ++i)
      quant_dot_rows(w, r0, r1, x + static_cast<long>(i) * w.cols, sums + static_cast<long>(i) * (w.cols / 32),
                     y + static_cast<long>(i) * w.rows + r0);
    return;
  }
  row.resize(w.cols);
  for (int r = r0; r < r1; ++r) {
    dequantize_row(w.type, w.row(r), row.data(), w.cols);
    for (int i = 0; i < n; ++i)
      y[static_cast<long>(i) * w.rows + r] = dot(row.data(), x + static_cast<long>(i) * w.cols, w.cols);
  }
}

// Decode: all matrices' rows in one parallel region, so a layer pays one join for q, k and v together. Each
// thread takes one contiguous share of the matrices' rows laid end to end, in whole row groups, so its
// prefetches run ahead along the rows it will read next.
void matvec_rows(std::span<const MatmulTarget> targets, const float* x, int n) {
  const int cols = targets.front().w->cols;
  std::vector<float> sums(static_cast<std::size_t>(n) * (cols / 32));
  if (cols % 32 == 0)
    for (int i = 0; i < n; ++i) block_sums32(x + static_cast<long>(i) * cols, cols, sums.data() + static_cast<long>(i) * (cols / 32));
  std::vector<int> starts{0};
  for (const auto& t : targets) starts.push_back(starts.back() + t.w->rows);
  const int total = starts.back();
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    auto share_start = [&](int thread) {
      return thread == threads ? total : static_cast<int>(static_cast<long>(total) * thread / threads) / kRowGroup * kRowGroup;
    };
    const int g0 = share_start(t), g1 = share_start(t + 1);
    std::vector<float> row;
    for (std::size_t m = 0; m < targets.size(); ++m) {
      const int r0 = std::max(g0, starts[m]) - starts[m], r1 = std::min(g1, starts[m + 1]) - starts[m];
      if (r0 < r1) matvec_rows_of(*targets[m].w, r0, r1, x, sums.data(), n, targets[m].y, row);
    }
  }
}

}  // namespace

void matmul(const QuantMatrix& w, const float* x, int n, float* y) {
  if (n <= 4) {
    const MatmulTarget target{&w, y};
    matvec_rows({&target, 1}, x, n);
    return;
  }
  // Each thread dequantizes its own slice of output rows and multiplies it with single-threaded BLAS, so
  // there is one thread pool (OpenMP) and no BLAS threads spinning against it.
  thread_local std::vector<float> dense;
  dense.resize(static_cast<std::size_t>(w.rows) * w.cols);
  float* scratch = dense.data();  // thread_local to the caller: workers reach it through this pointer
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int r0 = static_cast<int>(static_cast<long>(w.rows) * t / threads);
    const int r1 = static_cast<int>(static_cast<long>(w.rows) * (t + 1) / threads);
    for (int r = r0; r < r1; ++r) dequantize_row(w.type, w.row(r), scratch + static_cast<long>(r) * w.cols, w.cols);
    if (r1 > r0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, r1 - r0, w.cols, 1.0f, x, w.cols,
                  scratch + static_cast<long>(r0) * w.cols, w.cols, 0.0f, y + r0, w.rows);
  }
}

void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int n) {
  if (n <= 4) {
    matvec_rows(targets, x, n);
    return;
  }
  for (const auto& t : targets) matmul(*t.w, x, n, t.y);
}

}  // namespace kvscope::kernels
