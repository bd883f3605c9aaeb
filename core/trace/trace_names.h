#pragma once
// Names and HDF5 types of the trace layout (docs/trace-format.md) that the writer, the recorder and the
// reader must agree on.
#include <string>

#include "core/trace/hdf5_util.h"
#include "core/trace/trace_sink.h"

namespace kvscope::trace {

// "layer_07": a per-layer (or per-head, with another prefix) object name, two digits at least.
std::string indexed_name(const std::string& prefix, int index);

// Where a map lives in a run's group: "attention/layer_03/head_00", "similarity/keys/layer_03/kv_head_01".
std::string map_dataset_path(const MapSlot& slot);
// The units and definition attributes a map of this kind carries.
const char* map_units(MapKind kind);
const char* map_definition(MapKind kind);

// The events table's in-memory compound type (the Event struct with its padding). The file stores the
// same fields packed (H5Tpack of a copy).
h5::Handle event_memory_type();

}  // namespace kvscope::trace
