#include "core/trace/trace_names.h"

#include <cstddef>
#include <cstdio>

#include "core/trace/trace_view.h"

namespace kvscope::trace {

std::string indexed_name(const std::string& prefix, int index) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%02d", index);
  return prefix + digits;
}

std::string map_dataset_path(const MapSlot& slot) {
  switch (slot.kind) {
    case MapKind::Attention: return "attention/" + indexed_name("layer_", slot.layer) + "/" + indexed_name("head_", slot.index);
    case MapKind::KeySimilarity:
      return "similarity/keys/" + indexed_name("layer_", slot.layer) + "/" + indexed_name("kv_head_", slot.index);
    case MapKind::AttentionSink:
      return "attention_sink/" + indexed_name("layer_", slot.layer) + "/" + indexed_name("head_", slot.index);
    case MapKind::ValueSimilarity: break;
  }
  return "similarity/values/" + indexed_name("layer_", slot.layer) + "/" + indexed_name("kv_head_", slot.index);
}

const char* map_units(MapKind kind) {
  return kind == MapKind::Attention || kind == MapKind::AttentionSink ? "probability" : "cosine similarity";
}

const char* map_definition(MapKind kind) {
  switch (kind) {
    case MapKind::Attention:
      return "softmax(q k^T / sqrt(d)) of the prefill queries (rows, by position) over key positions (columns); keys a "
             "query could not see, or that were evicted before it ran, are 0; pooled over row_block x col_block cells";
    case MapKind::KeySimilarity: return "KVMerger Fig. 2: cos(k_i, k_j) of the post-RoPE keys cached at the end of prefill";
    case MapKind::AttentionSink:
      return "the head's sink logit's share of each prefill query row's softmax (gpt-oss: the sink joins the "
             "denominator and attends to no value), 1 - the row's key probabilities; one column, pooled over the "
             "attention map's row blocks as the map is";
    case MapKind::ValueSimilarity: break;
  }
  return "cos(v_i, v_j) of the values cached at the end of prefill (KVMerger: no locality)";
}

h5::Handle event_memory_type() {
  h5::Handle action(H5Tenum_create(H5T_NATIVE_UINT8));
  uint8_t v = static_cast<uint8_t>(EventAction::Evicted);
  H5Tenum_insert(action, "evicted", &v);
  v = static_cast<uint8_t>(EventAction::Merged);
  H5Tenum_insert(action, "merged", &v);
  h5::Handle t(H5Tcreate(H5T_COMPOUND, sizeof(Event)));
  H5Tinsert(t, "step", offsetof(Event, step), H5T_NATIVE_INT32);
  H5Tinsert(t, "phase", offsetof(Event, phase), H5T_NATIVE_UINT8);
  H5Tinsert(t, "layer", offsetof(Event, layer), H5T_NATIVE_INT16);
  H5Tinsert(t, "kv_head", offsetof(Event, kv_head), H5T_NATIVE_INT16);
  H5Tinsert(t, "position", offsetof(Event, position), H5T_NATIVE_INT32);
  H5Tinsert(t, "score", offsetof(Event, score), H5T_NATIVE_FLOAT);
  H5Tinsert(t, "secondary_score", offsetof(Event, secondary_score), H5T_NATIVE_FLOAT);
  H5Tinsert(t, "action", offsetof(Event, action), action);
  H5Tinsert(t, "merge_target", offsetof(Event, merge_target), H5T_NATIVE_INT32);
  H5Tinsert(t, "merge_weight", offsetof(Event, merge_weight), H5T_NATIVE_FLOAT);
  return t;
}

}  // namespace kvscope::trace
