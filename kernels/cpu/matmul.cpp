// Weight-times-activation products. Prefill dequantizes the weight into a per-thread scratch buffer once
// and hands the product to BLAS; decode walks the rows directly, split across threads.
#include <cblas.h>
#include <omp.h>

#include <vector>

#include "kernels/backend.h"
#include "kernels/common/dequantize.h"
#include "kernels/cpu/quant_dot.h"

namespace kvscope::kernels {

namespace {

float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void matvec_rows(const model::QuantMatrix& w, const float* x, int n, float* y) {
  const bool quantized_dot = w.cols % 32 == 0 && (w.type == model::GgmlType::Q4_1 || w.type == model::GgmlType::Q4_0 ||
                                                   w.type == model::GgmlType::Q8_0);
  std::vector<float> sums(quantized_dot ? static_cast<std::size_t>(n) * (w.cols / 32) : 0);
  for (int i = 0; i < (quantized_dot ? n : 0); ++i)
    block_sums32(x + static_cast<long>(i) * w.cols, w.cols, sums.data() + static_cast<long>(i) * (w.cols / 32));
#pragma omp parallel
  {
    std::vector<float> row(quantized_dot ? 0 : w.cols);
#pragma omp for schedule(static)
    for (int r = 0; r < w.rows; ++r) {
      if (!quantized_dot) dequantize_row(w.type, w.row(r), row.data(), w.cols);
      for (int i = 0; i < n; ++i) {
        const float* xi = x + static_cast<long>(i) * w.cols;
        const float* si = sums.data() + static_cast<long>(i) * (w.cols / 32);
        float value;
        switch (quantized_dot ? w.type : model::GgmlType::F32) {
          case model::GgmlType::Q4_1: value = dot_q4_1(w.row(r), xi, si, w.cols); break;
          case model::GgmlType::Q4_0: value = dot_q4_0(w.row(r), xi, si, w.cols); break;
          case model::GgmlType::Q8_0: value = dot_q8_0(w.row(r), xi, w.cols); break;
          default: value = dot(row.data(), xi, w.cols);
        }
        y[static_cast<long>(i) * w.rows + r] = value;
      }
    }
  }
}

}  // namespace

void matmul(const model::QuantMatrix& w, const float* x, int n, float* y) {
  if (n <= 4) {
    matvec_rows(w, x, n, y);
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

}  // namespace kvscope::kernels
