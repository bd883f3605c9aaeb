#include "core/model/fused_tensors.h"

#include <string>

#include "core/common/error.h"

namespace kvscope::model {

kernels::QuantMatrix row_block(const kernels::QuantMatrix& m, int first_row, int rows) {
  if (first_row < 0 || rows < 0 || first_row + rows > m.rows)
    throw Error("internal: rows " + std::to_string(first_row) + ".." + std::to_string(first_row + rows) +
                " are outside a matrix of " + std::to_string(m.rows) + " rows");
  kernels::QuantMatrix block = m;
  block.rows = rows;
  block.data = m.row(first_row);
  return block;
}

std::vector<kernels::QuantMatrix> split_rows(const kernels::QuantMatrix& m, const std::vector<int>& heights) {
  std::vector<kernels::QuantMatrix> blocks;
  int first = 0;
  for (int rows : heights) {
    blocks.push_back(row_block(m, first, rows));
    first += rows;
  }
  if (first != m.rows)
    throw Error("internal: row blocks of " + std::to_string(first) + " rows do not cover a matrix of " +
                std::to_string(m.rows));
  return blocks;
}

std::vector<kernels::QuantMatrix> split_experts(const kernels::QuantMatrix& merged, int n_experts) {
  if (n_experts <= 0 || merged.rows % n_experts != 0)
    throw Error("internal: " + std::to_string(merged.rows) + " rows do not split into " + std::to_string(n_experts) +
                " experts");
  return split_rows(merged, std::vector<int>(static_cast<std::size_t>(n_experts), merged.rows / n_experts));
}

}  // namespace kvscope::model
