// Weight-times-activation products. Prefill dequantizes the weight into a per-thread scratch buffer once
// and hands the product to BLAS; decode walks the rows directly, split across threads.
#include <cblas.h>

#include <vector>

#include "kernels/backend.h"
#include "kernels/common/dequantize.h"

namespace kvscope::kernels {

namespace {

float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void matvec_rows(const model::QuantMatrix& w, const float* x, int n, float* y) {
#pragma omp parallel
  {
    std::vector<float> row(w.cols);
#pragma omp for schedule(static)
    for (int r = 0; r < w.rows; ++r) {
      dequantize_row(w.type, w.row(r), row.data(), w.cols);
      for (int i = 0; i < n; ++i) y[static_cast<long>(i) * w.rows + r] = dot(row.data(), x + static_cast<long>(i) * w.cols, w.cols);
    }
  }
}

}  // namespace

void matmul(const model::QuantMatrix& w, const float* x, int n, float* y) {
  if (n <= 4) {
    matvec_rows(w, x, n, y);
    return;
  }
  thread_local std::vector<float> dense;
  dense.resize(static_cast<std::size_t>(w.rows) * w.cols);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < w.rows; ++r) dequantize_row(w.type, w.row(r), dense.data() + static_cast<long>(r) * w.cols, w.cols);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w.rows, w.cols, 1.0f, x, w.cols, dense.data(), w.cols, 0.0f, y,
              w.rows);
}

}  // namespace kvscope::kernels
