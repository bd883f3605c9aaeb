#include "core/trace/trace_view.h"

#include <algorithm>
#include <string>

namespace kvscope::trace {

KeptMask KeptMask::from_head_position_step(int n_kv_heads, int n_positions, int n_steps, const std::vector<uint8_t>& values) {
  KeptMask m;
  m.n_kv_heads = n_kv_heads;
  m.n_positions = n_positions;
  m.n_steps = n_steps;
  const std::size_t row = static_cast<std::size_t>(n_kv_heads) * n_positions;
  AppendOnlyRows<uint8_t> rows(row, static_cast<std::size_t>(n_steps));
  for (int s = 0; s < n_steps; ++s) {
    uint8_t* out = rows.append();
    for (std::size_t i = 0; i < row && i * n_steps + s < values.size(); ++i) out[i] = values[i * n_steps + s];
  }
  m.rows = rows.view();
  return m;
}

bool KeptMask::operator==(const KeptMask& other) const {
  if (n_kv_heads != other.n_kv_heads || n_positions != other.n_positions || n_steps != other.n_steps) return false;
  const std::size_t row = static_cast<std::size_t>(n_kv_heads) * n_positions;
  for (int s = 0; s < n_steps; ++s)
    if (!std::equal(rows.row(s), rows.row(s) + row, other.rows.row(s))) return false;
  return true;
}

std::string format_layer_list(const std::vector<int>& layers) {
  if (layers.empty()) return "none";
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(layers[i]);
    if (j > i) out += "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return out;
}

std::string RunTrace::qk_layers_text() const {
  if (qk.empty()) return "none";
  return qk_layers.empty() ? "all" : format_layer_list(qk_layers);
}

const Map2D* RunTrace::decode_attention_map(int layer, int head) const {
  if (const Map2D* m = find(decode_attention, layer, head)) return m;
  const DecodeRows& d = decode_rows;
  if (d.rows.empty() || layer < 0 || layer >= d.n_layers || head < 0 || head >= d.n_heads) return nullptr;
  std::lock_guard<std::mutex> lock(assembled_.mutex);
  if (const Map2D* m = find(assembled_.maps, layer, head)) return m;
  auto m = std::make_shared<Map2D>();
  m->rows = m->source_rows = static_cast<int>(d.rows.n_rows);
  m->cols = d.cols;
  m->source_cols = d.source_cols;
  m->col_block = d.col_block;
  m->pooling = d.pooling;
  m->values.resize(d.rows.n_rows * static_cast<std::size_t>(d.cols));
  const std::size_t offset = (static_cast<std::size_t>(layer) * d.n_heads + head) * d.cols;
  for (std::size_t s = 0; s < d.rows.n_rows; ++s)
    std::copy_n(d.rows.row(s) + offset, d.cols, m->values.begin() + static_cast<std::ptrdiff_t>(s * d.cols));
  const Map2D* raw = m.get();
  assembled_.maps[{layer, head}] = std::move(m);
  return raw;
}

const Map2D* RunTrace::decode_attention_sink_map(int layer, int head) const {
  if (const Map2D* m = find(decode_attention_sink, layer, head)) return m;
  const DecodeRows& d = decode_rows;
  if (!d.sink || d.rows.empty() || layer < 0 || layer >= d.n_layers || head < 0 || head >= d.n_heads) return nullptr;
  std::lock_guard<std::mutex> lock(assembled_.mutex);
  if (const Map2D* m = find(assembled_.sink_maps, layer, head)) return m;
  auto m = std::make_shared<Map2D>();
  m->rows = m->source_rows = static_cast<int>(d.rows.n_rows);
  m->cols = m->source_cols = 1;
  m->pooling = d.pooling;
  m->values.resize(d.rows.n_rows);
  const std::size_t offset = static_cast<std::size_t>(d.n_layers) * d.n_heads * d.cols +
                             static_cast<std::size_t>(layer) * d.n_heads + head;
  for (std::size_t s = 0; s < d.rows.n_rows; ++s) m->values[s] = d.rows.row(s)[offset];
  const Map2D* raw = m.get();
  assembled_.sink_maps[{layer, head}] = std::move(m);
  return raw;
}

}  // namespace kvscope::trace
