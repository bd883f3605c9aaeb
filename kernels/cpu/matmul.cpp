// Weight-times-activation products. Prefill dequantizes the weight into a per-thread scratch buffer once
// and hands the product to BLAS; decode walks the rows directly, split across threads.
#include <cblas.h>
#include <omp.h>

#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/common/dequantize.h"
#include "kernels/cpu/quant_dot.h"

namespace kvscope::kernels {

namespace {

bool has_block_dot(const QuantMatrix& w) {
  return w.cols % 32 == 0 &&
         (w.type == GgmlType::Q4_1 || w.type == GgmlType::Q4_0 || w.type == GgmlType::Q8_0);
}

// y_i[r] for row r of w and input row i; `sums` holds x's 32-element block sums for the block dot products.
void matvec_row(const QuantMatrix& w, int r, const float* x, const float* sums, int n, float* y,
                std::vector<float>& row) {
  const bool block_dot = has_block_dot(w);
  if (!block_dot) {
    row.resize(w.cols);
    dequantize_row(w.type, w.row(r), row.data(), w.cols);
  }
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<long>(i) * w.cols;
    const float* si = sums + static_cast<long>(i) * (w.cols / 32);
    float value;
    switch (block_dot ? w.type : GgmlType::F32) {
      case GgmlType::Q4_1: value = dot_q4_1(w.row(r), xi, si, w.cols); break;
      case GgmlType::Q4_0: value = dot_q4_0(w.row(r), xi, si, w.cols); break;
      case GgmlType::Q8_0: value = dot_q8_0(w.row(r), xi, w.cols); break;
      default: value = dot(row.data(), xi, w.cols);
    }
    y[static_cast<long>(i) * w.rows + r] = value;
  }
}

// Decode: all matrices' rows in one parallel loop, so a layer pays one barrier for q, k and v together.
void matvec_rows(std::span<const MatmulTarget> targets, const float* x, int n) {
  const int cols = targets.front().w->cols;
  std::vector<float> sums(static_cast<std::size_t>(n) * (cols / 32));
  if (cols % 32 == 0)
    for (int i = 0; i < n; ++i) block_sums32(x + static_cast<long>(i) * cols, cols, sums.data() + static_cast<long>(i) * (cols / 32));
  std::vector<int> starts{0};
  for (const auto& t : targets) starts.push_back(starts.back() + t.w->rows);
#pragma omp parallel
  {
    std::vector<float> row;
#pragma omp for schedule(static)
    for (int global = 0; global < starts.back(); ++global) {
      std::size_t m = 0;
      while (global >= starts[m + 1]) ++m;
      matvec_row(*targets[m].w, global - starts[m], x, sums.data(), n, targets[m].y, row);
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
