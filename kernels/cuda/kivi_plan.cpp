#include "kernels/cuda/kivi_plan.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/error.h"

namespace kvscope::kernels::cuda {
namespace {

// Value rows go to the GPU in tasks of at most this many rows (a block each), so that a prefill spreads over
// blocks while a decode step's one row is one task.
constexpr int kValueRowsPerTask = 32;

std::size_t key_group_bytes(const KiviLayout& l, std::size_t entries) {
  return l.key_group_meta_bytes() + entries * l.code_row_bytes();
}

ByteCopy copy_of(const void* src, void* dst, std::size_t bytes) {
  return {static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), static_cast<int64_t>(bytes)};
}

}  // namespace

std::vector<int32_t> KiviPartState::group_firsts() const {
  std::vector<int32_t> firsts;
  int32_t entry = 0;
  for (uint16_t n : group_sizes) {
    firsts.push_back(entry);
    entry += n;
  }
  return firsts;
}

std::vector<int32_t> KiviPartState::group_offsets() const {
  std::vector<int32_t> offsets;
  std::size_t offset = 0;
  for (uint16_t n : group_sizes) {
    offsets.push_back(static_cast<int32_t>(offset));
    offset += key_group_bytes(layout, n);
  }
  return offsets;
}

KiviAppendShape kivi_append_shape(const KiviPartState& state, std::size_t n) {
  const KiviLayout& l = state.layout;
  const std::size_t g = l.group, r = l.residual, total = state.residual_rows + n;
  KiviAppendShape shape;
  if (l.per_channel) {
    while (total - shape.ready >= r + g) shape.ready += g;
    shape.packed_growth = shape.ready / g * key_group_bytes(l, g);
  } else {
    shape.ready = total > r ? total - r : 0;
    shape.packed_growth = shape.ready * l.value_row_bytes();
  }
  shape.residual_after = total - shape.ready;
  return shape;
}

void kivi_plan_append(KiviPartState& state, const KiviAppendShape& shape, uint8_t* packed, const float* residual,
                      const float* fresh, int fresh_stride, float* residual_out, double* error_sums,
                      std::vector<KiviQuantizeTask>& quantize, std::vector<ByteCopy>& copies) {
  const KiviLayout& l = state.layout;
  const int d = l.head_dim;
  const std::size_t held = state.residual_rows, total = shape.ready + shape.residual_after;
  const bool in_place = residual_out == residual && shape.ready == 0;
  if (residual_out == residual && shape.ready > 0 && shape.residual_after > 0)
    throw Error("KIVI append plan: the residual moves, so it needs a second buffer");
  const KiviRowSource source{residual, static_cast<int>(held), fresh, fresh_stride};
  uint8_t* out = packed + state.packed_bytes;
  if (l.per_channel) {
    for (std::size_t i = 0; i < shape.ready; i += l.group) {
      KiviQuantizeTask t;
      t.source = source, t.first = static_cast<int>(i), t.rows = l.group, t.out = out;
      t.bits = l.bits, t.per_channel = 1, t.error_sums = error_sums;
      quantize.push_back(t);
      out += key_group_bytes(l, l.group);
      state.group_sizes.push_back(static_cast<uint16_t>(l.group));
    }
  } else {
    for (std::size_t i = 0; i < shape.ready; i += kValueRowsPerTask) {
      KiviQuantizeTask t;
      t.source = source, t.first = static_cast<int>(i);
      t.rows = static_cast<int>(std::min<std::size_t>(kValueRowsPerTask, shape.ready - i));
      t.out = out + i * l.value_row_bytes();
      t.bits = l.bits, t.per_channel = 0, t.error_sums = error_sums;
      quantize.push_back(t);
    }
  }
  // Rows that stay float32: all of them move down past the ready ones, unless none left (then the held rows stay
  // where they are and only the new ones are copied).
  const std::size_t row_bytes = static_cast<std::size_t>(d) * sizeof(float);
  for (std::size_t i = in_place ? held : shape.ready; i < total; ++i)
    copies.push_back(copy_of(source.row(static_cast<int>(i), d), residual_out + (i - shape.ready) * d, row_bytes));
  state.quantized += shape.ready;
  state.residual_rows = shape.residual_after;
  state.packed_bytes += shape.packed_growth;
}

void kivi_plan_compact(KiviPartState& state, std::span<const int32_t> keep, const uint8_t* packed, uint8_t* packed_out,
                       const float* residual, float* residual_out, std::vector<ByteCopy>& copies) {
  const KiviLayout& l = state.layout;
  const std::size_t d = l.head_dim;
  auto it = keep.begin();
  std::size_t kept_quantized = 0, write = 0;
  if (l.per_channel) {
    const std::size_t meta = l.key_group_meta_bytes(), code_row = l.code_row_bytes();
    std::vector<uint16_t> sizes;
    std::size_t begin = 0, offset = 0;
    for (uint16_t n : state.group_sizes) {
      const std::size_t stop = begin + n;
      uint16_t survivors = 0;
      std::size_t group_write = write + meta;
      for (; it != keep.end() && static_cast<std::size_t>(*it) < stop; ++it, ++survivors) {
        copies.push_back(copy_of(packed + offset + meta + (static_cast<std::size_t>(*it) - begin) * code_row,
                                 packed_out + group_write, code_row));
        group_write += code_row;
      }
      if (survivors > 0) {
        copies.push_back(copy_of(packed + offset, packed_out + write, meta));
        write = group_write;
        sizes.push_back(survivors);
        kept_quantized += survivors;
      }
      begin = stop;
      offset += key_group_bytes(l, n);
    }
    state.group_sizes.swap(sizes);
  } else {
    const std::size_t row_bytes = l.value_row_bytes();
    for (; it != keep.end() && static_cast<std::size_t>(*it) < state.quantized; ++it, ++kept_quantized)
      copies.push_back(copy_of(packed + static_cast<std::size_t>(*it) * row_bytes,
                               packed_out + kept_quantized * row_bytes, row_bytes));
    write = kept_quantized * row_bytes;
  }
  std::size_t kept_residual = 0;
  for (; it != keep.end(); ++it, ++kept_residual)
    copies.push_back(copy_of(residual + (static_cast<std::size_t>(*it) - state.quantized) * d,
                             residual_out + kept_residual * d, d * sizeof(float)));
  state.quantized = kept_quantized;
  state.residual_rows = kept_residual;
  state.packed_bytes = write;
}

void kivi_quantize_reference(std::span<const KiviQuantizeTask> tasks, int head_dim, int group) {
  std::vector<kivi::Range> ranges(head_dim);
  for (const KiviQuantizeTask& t : tasks) {
    const int code_row = kivi::code_row_bytes(head_dim, t.bits);
    double sums[2] = {0.0, 0.0};
    if (t.per_channel) {
      for (int c = 0; c < head_dim; ++c) {
        ranges[c] = kivi_key_range(t, head_dim, c);
        kivi::store_key_range(t.out, head_dim, c, ranges[c]);
      }
      uint8_t* codes = t.out + kivi::key_meta_bytes(head_dim);
      for (int j = 0; j < t.rows; ++j)
        for (int b = 0; b < code_row; ++b)
          codes[j * code_row + b] = kivi_key_code_byte(t, head_dim, ranges.data(), j, b);
      for (int j = 0; j < t.rows; ++j)
        for (int c = 0; c < head_dim; ++c)
          kivi_add_error(t.source.row(t.first + j, head_dim)[c], ranges[c], t.bits, sums);
    } else {
      const int row_bytes = kivi::value_row_bytes(head_dim, group, t.bits);
      for (int j = 0; j < t.rows; ++j) {
        uint8_t* row = t.out + static_cast<std::size_t>(j) * row_bytes;
        for (int k = 0; k < head_dim / group; ++k) {
          ranges[k] = kivi_value_range(t, head_dim, group, j, k);
          kivi::store_value_range(row, head_dim, group, k, ranges[k]);
        }
        for (int b = 0; b < code_row; ++b)
          row[kivi::value_meta_bytes(head_dim, group) + b] =
              kivi_value_code_byte(t, head_dim, group, ranges.data(), j, b);
        for (int c = 0; c < head_dim; ++c)
          kivi_add_error(t.source.row(t.first + j, head_dim)[c], ranges[c / group], t.bits, sums);
      }
    }
    if (t.error_sums) {
      t.error_sums[0] += sums[0];
      t.error_sums[1] += sums[1];
    }
  }
}

void copy_byte_ranges_reference(std::span<const ByteCopy> copies) {
  for (const ByteCopy& c : copies)
    if (c.bytes > 0) std::memmove(c.dst, c.src, static_cast<std::size_t>(c.bytes));
}

void kivi_load_rows(const KiviPartState& state, const uint8_t* packed, const float* residual, std::size_t first,
                    std::size_t count, float* out) {
  const KiviLayout& l = state.layout;
  const std::vector<int32_t> firsts = state.group_firsts(), offsets = state.group_offsets();
  DeviceKiviHead head;
  head.packed = packed, head.group_first = firsts.data(), head.group_offset = offsets.data();
  head.residual = residual, head.n_groups = static_cast<int>(firsts.size());
  head.quantized = static_cast<int>(state.quantized);
  for (std::size_t i = 0; i < count; ++i)
    for (int c = 0; c < l.head_dim; ++c)
      out[i * l.head_dim + c] =
          kivi_entry_value(head, l.per_channel, l.bits, l.group, l.head_dim, static_cast<int>(first + i), c);
}

cpu::KiviPart to_kivi_part(KiviHostPart part) {
  cpu::KiviPart out(part.state.layout);
  out.assign(std::move(part.packed), std::move(part.state.group_sizes), std::move(part.residual), part.state.quantized);
  return out;
}

KiviHostPart from_kivi_part(const cpu::KiviPart& part) {
  KiviHostPart out;
  out.state.layout = part.layout();
  out.state.group_sizes = part.group_sizes();
  out.state.quantized = part.quantized();
  out.state.residual_rows = part.residual_rows();
  out.state.packed_bytes = part.packed().size();
  out.packed = part.packed();
  out.residual = part.residual();
  return out;
}

void kivi_edit_on_host(KiviHostPart& keys, KiviHostPart& values, std::span<const int32_t> keep,
                       std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges,
                       StorageError errors[2]) {
  cpu::KiviPart parts[2] = {to_kivi_part(std::move(keys)), to_kivi_part(std::move(values))};
  const auto merged =
      merge_results(parts[0].layout().head_dim, merges, value_merges, [&](KVPart part, int32_t i, float* out) {
        parts[part == KVPart::Values].load(static_cast<std::size_t>(i), 1, out);
      });
  for (int p = 0; p < 2; ++p) {
    const std::vector<std::pair<int32_t, std::vector<float>>> rows(merged[p].begin(), merged[p].end());
    parts[p].store(rows, &errors[p]);
    parts[p].compact(keep);
  }
  keys = from_kivi_part(parts[0]);
  values = from_kivi_part(parts[1]);
}

}  // namespace kvscope::kernels::cuda
