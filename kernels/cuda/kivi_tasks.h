#pragma once
// KIVI on the device (kivi2, kivi4; the layout and rules of kernels/cpu/kivi_part.h): the work an append or an
// eviction gives the GPU, as tasks the host plans (kivi_plan.h) and one launch runs (kivi_ops.h), and how attention
// reads one entry of a head's part in place. The per-element math is kernels/common/kivi_math.h, the CPU cache's.
// Host references: kivi_quantize_reference and copy_byte_ranges_reference (kivi_plan.h) run the same tasks with
// the same functions in plain loops. C++17 and no CUDA header, so that the references build without the toolkit.
#include <cstdint>

#include "kernels/common/host_device.h"
#include "kernels/common/kivi_math.h"

namespace kvscope::kernels::cuda {

// Row i of a sequence of `held_rows` contiguous rows (head_dim floats apart) continued by rows `fresh_stride`
// floats apart: a head's float32 residual followed by the rows an append brings ([n][n_kv_heads][head_dim]).
struct KiviRowSource {
  const float* held = nullptr;
  int held_rows = 0;
  const float* fresh = nullptr;
  int fresh_stride = 0;
  KVSCOPE_HD const float* row(int i, int head_dim) const {
    return i < held_rows ? held + static_cast<int64_t>(i) * head_dim
                         : fresh + static_cast<int64_t>(i - held_rows) * fresh_stride;
  }
};

// Quantizes rows [first, first + rows) of `source`: for keys (per_channel) as one group written at `out` (its D
// scales and zero points over those rows, then their code rows), for values as `rows` value rows written one
// after the other from `out`. error_sums, when set, receives [sum (x - x')^2, sum x^2] over those values (x' the
// value read back), as the CPU cache's StorageError adds them.
struct KiviQuantizeTask {
  KiviRowSource source;
  int first = 0, rows = 0;
  uint8_t* out = nullptr;
  int bits = 2;
  int per_channel = 1;
  double* error_sums = nullptr;
};

// One copy of `bytes` bytes (a key group's scales, a code row, a value row, a float32 residual row).
struct ByteCopy {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t bytes = 0;
};

// The largest head_dim the quantize kernel takes (its per-channel ranges live in shared memory).
constexpr int kMaxKiviHeadDim = 128;

// One head's KIVI part as attention reads it: `quantized` entries packed (keys: n_groups groups, group k holding
// entries group_first[k] .. group_first[k + 1] - 1 at byte group_offset[k]; values: rows of value_row_bytes), then
// the float32 residual rows.
struct DeviceKiviHead {
  const uint8_t* packed = nullptr;
  const int32_t* group_first = nullptr;   // keys: [n_groups]
  const int32_t* group_offset = nullptr;  // keys: [n_groups]
  const float* residual = nullptr;        // [entries - quantized][head_dim]
  int n_groups = 0;
  int quantized = 0;
};

// Entry j's channel c as float: from its key group (the group found by binary search over group_first), its value
// row, or the residual.
KVSCOPE_HD inline float kivi_entry_value(const DeviceKiviHead& h, bool per_channel, int bits, int group, int head_dim,
                                         int j, int c) {
  if (j >= h.quantized) return h.residual[static_cast<int64_t>(j - h.quantized) * head_dim + c];
  if (!per_channel)
    return kivi::value_value(h.packed + static_cast<int64_t>(j) * kivi::value_row_bytes(head_dim, group, bits),
                             head_dim, group, bits, c);
  int lo = 0, hi = h.n_groups - 1;  // the last group whose first entry is <= j
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (h.group_first[mid] <= j)
      lo = mid;
    else
      hi = mid - 1;
  }
  return kivi::key_value(h.packed + h.group_offset[lo], head_dim, bits, j - h.group_first[lo], c);
}

// The per-block steps of kivi_quantize, shared with its host reference. Keys: channel c's range over the task's
// rows; byte `byte` of entry j's code row given every channel's range.
KVSCOPE_HD inline kivi::Range kivi_key_range(const KiviQuantizeTask& t, int head_dim, int c) {
  float lo = t.source.row(t.first, head_dim)[c], hi = lo;
  for (int i = 1; i < t.rows; ++i) kivi::extend(lo, hi, t.source.row(t.first + i, head_dim)[c]);
  return kivi::range_from(lo, hi, t.bits);
}

KVSCOPE_HD inline uint8_t kivi_key_code_byte(const KiviQuantizeTask& t, int head_dim, const kivi::Range* ranges, int j,
                                             int byte) {
  const float* x = t.source.row(t.first + j, head_dim);
  return kivi::packed_byte(byte, t.bits, [&](int c) { return kivi::code_of(x[c], ranges[c], t.bits); });
}

// Values: row j's channel group k's range; byte `byte` of its code row given its groups' ranges.
KVSCOPE_HD inline kivi::Range kivi_value_range(const KiviQuantizeTask& t, int head_dim, int group, int j, int k) {
  return kivi::range_of(t.source.row(t.first + j, head_dim) + k * group, group, 1, t.bits);
}

KVSCOPE_HD inline uint8_t kivi_value_code_byte(const KiviQuantizeTask& t, int head_dim, int group,
                                               const kivi::Range* ranges, int j, int byte) {
  const float* x = t.source.row(t.first + j, head_dim);
  return kivi::packed_byte(byte, t.bits, [&](int c) { return kivi::code_of(x[c], ranges[c / group], t.bits); });
}

// (x - x')^2 and x^2 of one value quantized in `r`.
KVSCOPE_HD inline void kivi_add_error(float x, const kivi::Range& r, int bits, double* sums) {
  const double back = kivi::value_of(kivi::code_of(x, r, bits), r.scale, r.zero);
  const double original = x;
  sums[0] += (original - back) * (original - back);
  sums[1] += original * original;
}

}  // namespace kvscope::kernels::cuda
