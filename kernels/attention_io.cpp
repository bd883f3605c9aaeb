#include "kernels/attention_io.h"

#include <algorithm>

namespace kvscope::kernels {

void AttentionRequest::merge(const AttentionRequest& other) {
  window = std::max(window, other.window);
  column_sums = column_sums || other.column_sums;
  window_sums = window_sums || other.window_sums;
  window_rows = window_rows || other.window_rows;
  last_row = last_row || other.last_row;
  rows = rows || other.rows;
  log_sum_exp = log_sum_exp || other.log_sum_exp;
  queries = queries || other.queries;
  queries_pre_rope = queries_pre_rope || other.queries_pre_rope;
  keys_pre_rope = keys_pre_rope || other.keys_pre_rope;
  hidden_states = hidden_states || other.hidden_states;
}

}  // namespace kvscope::kernels
