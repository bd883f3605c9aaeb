#pragma once
// The host side of the CUDA cache's KIVI parts: what it records of one head's part on the device (the sizes that
// kernels/cpu/kivi_part.h's KiviPart keeps beside its bytes) and the tasks (kivi_tasks.h) into which it turns an
// append and an eviction, by the CPU cache's rules; the host references that run those tasks in plain loops; and
// the merge path, which runs the CPU's own KiviPart code on a head's bytes brought to the host. Plain C++: the
// device cache and its CPU-side reference test (tests/kernels/cuda_stored_references_test.cpp) plan alike, with
// device or host pointers.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/kivi_part.h"
#include "kernels/cuda/kivi_tasks.h"
#include "kernels/kv_storage.h"

namespace kvscope::kernels::cuda {

using cpu::KiviLayout;

// One head's KIVI part as the host records it: `quantized` entries in `packed_bytes` bytes (keys: groups of
// group_sizes entries, G or fewer after an eviction), then residual_rows float32 rows.
struct KiviPartState {
  KiviLayout layout;
  std::vector<uint16_t> group_sizes;
  std::size_t quantized = 0, residual_rows = 0, packed_bytes = 0;

  std::size_t size() const { return quantized + residual_rows; }
  std::size_t row_floats() const { return static_cast<std::size_t>(layout.head_dim); }
  // As KiviPart::entry_bytes and paged_bytes: payload, scales and zero points, and the float32 rows.
  std::size_t entry_bytes() const { return packed_bytes + residual_rows * row_floats() * sizeof(float); }
  std::size_t paged_bytes(int page_tokens) const {
    return cpu::kivi_paged_bytes(layout, group_sizes.size(), quantized, residual_rows, page_tokens);
  }
  // Keys: each group's first entry and byte offset (DeviceKiviHead's tables).
  std::vector<int32_t> group_firsts() const;
  std::vector<int32_t> group_offsets() const;
};

// An append of n rows: the oldest `ready` of the held and new rows leave full precision (the residual rule of
// kivi_part.h), the packed store grows by packed_growth bytes and residual_after rows stay float32.
struct KiviAppendShape {
  std::size_t ready = 0, packed_growth = 0, residual_after = 0;
};
KiviAppendShape kivi_append_shape(const KiviPartState& state, std::size_t n);

// The tasks of that append, appended to `quantize` and `copies`: the ready rows of (residual, then fresh rows
// fresh_stride floats apart) quantized at packed + state.packed_bytes (keys a group of G at a time, values as
// rows), and the rows that stay float32 copied to residual_out (which must not be `residual`). Updates the state.
void kivi_plan_append(KiviPartState& state, const KiviAppendShape& shape, uint8_t* packed, const float* residual,
                      const float* fresh, int fresh_stride, float* residual_out, double* error_sums,
                      std::vector<KiviQuantizeTask>& quantize, std::vector<ByteCopy>& copies);

// The copies of an eviction to `keep` (strictly increasing): kept key groups re-packed in place (each keeps its
// scales and zero points and its survivors' code rows; a group without survivors is dropped), kept value rows and
// residual rows moved whole, from packed / residual into packed_out / residual_out. Updates the state.
void kivi_plan_compact(KiviPartState& state, std::span<const int32_t> keep, const uint8_t* packed, uint8_t* packed_out,
                       const float* residual, float* residual_out, std::vector<ByteCopy>& copies);

// The host references of the kernels (kivi_ops.h): the same tasks in plain loops over host memory, through the
// same per-element functions.
void kivi_quantize_reference(std::span<const KiviQuantizeTask> tasks, int head_dim, int group);
void copy_byte_ranges_reference(std::span<const ByteCopy> copies);

// Rows [first, first + count) of a head's part as float, from its bytes on the host (kivi_entry_value).
void kivi_load_rows(const KiviPartState& state, const uint8_t* packed, const float* residual, std::size_t first,
                    std::size_t count, float* out);

// A head's part brought to the host: its state and bytes, as a KiviPart (to run the CPU cache's code on) and back.
struct KiviHostPart {
  KiviPartState state;
  std::vector<uint8_t> packed;  // state.packed_bytes
  std::vector<float> residual;  // state.residual_rows rows
};
cpu::KiviPart to_kivi_part(KiviHostPart part);
KiviHostPart from_kivi_part(const cpu::KiviPart& part);

// An edit with merges of one head, keys and values on the host: the merge results computed in float32 from the
// rows as stored (merge_results), stored by KiviPart::store (a value row quantized again alone, a key group with a
// merged entry quantized again whole, a residual row exact), then KiviPart::compact: the CPU cache's edit. The
// merged rows' storage error is added to errors[keys, values].
void kivi_edit_on_host(KiviHostPart& keys, KiviHostPart& values, std::span<const int32_t> keep,
                       std::span<const RowMerge> merges, std::span<const ValueMerge> value_merges,
                       StorageError errors[2]);

}  // namespace kvscope::kernels::cuda
