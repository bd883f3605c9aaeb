#include "core/policy/decode_row_buffer.h"

#include <algorithm>

#include "core/common/error.h"

namespace kvscope::policy {

namespace {
// Drops the first `drop` rows of a part of `rows` rows (each part.size() / rows wide).
void drop_rows(std::vector<float>& part, int rows, int drop) {
  if (part.empty() || rows == 0) return;
  const std::size_t width = part.size() / static_cast<std::size_t>(rows);
  part.erase(part.begin(), part.begin() + static_cast<std::ptrdiff_t>(width * drop));
}

void append_part(std::vector<float>& to, const std::vector<float>& part, int buffered_rows, const char* name) {
  // A part asked for in some steps only would misalign the rows: every step of a decode run asks the same.
  if (part.empty() != to.empty() && buffered_rows > 0)
    throw Error(std::string("internal: decode row buffer: obs.") + name + " is present in some decode steps only");
  to.insert(to.end(), part.begin(), part.end());
}
}  // namespace

bool DecodeRowBuffer::carries_rows(const observation::AttentionObservation& obs) {
  return !obs.queries.empty() || !obs.queries_pre_rope.empty() || !obs.keys_pre_rope.empty() ||
         !obs.hidden_states.empty();
}

void DecodeRowBuffer::reset(int layers, int earlier_steps) {
  layers_.assign(layers, Rows{});
  earlier_steps_ = earlier_steps;
}

void DecodeRowBuffer::append(const observation::AttentionObservation& obs) {
  Rows& r = layers_.at(obs.layer);
  const int buffered = static_cast<int>(r.positions.size());
  r.positions.insert(r.positions.end(), obs.query_positions.begin(), obs.query_positions.end());
  append_part(r.queries, obs.queries, buffered, "queries");
  append_part(r.queries_pre_rope, obs.queries_pre_rope, buffered, "queries_pre_rope");
  append_part(r.keys_pre_rope, obs.keys_pre_rope, buffered, "keys_pre_rope");
  append_part(r.hidden_states, obs.hidden_states, buffered, "hidden_states");
  if (!obs.log_sum_exp.empty()) {
    r.log_sum_exp.resize(obs.log_sum_exp.size());
    for (std::size_t h = 0; h < obs.log_sum_exp.size(); ++h)
      r.log_sum_exp[h].insert(r.log_sum_exp[h].end(), obs.log_sum_exp[h].begin(), obs.log_sum_exp[h].end());
  }
}

void DecodeRowBuffer::trim(int layer) {
  Rows& r = layers_.at(layer);
  const int rows = static_cast<int>(r.positions.size()), drop = rows - earlier_steps_;
  if (drop <= 0) return;
  for (auto* part : {&r.queries, &r.queries_pre_rope, &r.keys_pre_rope, &r.hidden_states}) drop_rows(*part, rows, drop);
  r.positions.erase(r.positions.begin(), r.positions.begin() + drop);
  for (auto& lse : r.log_sum_exp) lse.erase(lse.begin(), lse.begin() + drop);
}

observation::AttentionObservation DecodeRowBuffer::take(const observation::AttentionObservation& obs) {
  Rows& r = layers_.at(obs.layer);
  observation::AttentionObservation out = obs;
  out.query_positions = std::move(r.positions);
  out.queries = std::move(r.queries);
  out.queries_pre_rope = std::move(r.queries_pre_rope);
  out.keys_pre_rope = std::move(r.keys_pre_rope);
  out.hidden_states = std::move(r.hidden_states);
  if (!obs.log_sum_exp.empty()) out.log_sum_exp = std::move(r.log_sum_exp);
  r = Rows{};
  return out;
}

}  // namespace kvscope::policy
