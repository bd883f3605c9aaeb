#pragma once
// Names and HDF5 types of the trace layout (docs/trace-format.md) that the writer, the recorder and the
// reader must agree on.
#include <string>

#include "core/trace/hdf5_util.h"

namespace kvscope::trace {

// "layer_07": a per-layer (or per-head, with another prefix) object name, two digits at least.
std::string indexed_name(const std::string& prefix, int index);

// The events table's in-memory compound type (the Event struct with its padding). The file stores the
// same fields packed (H5Tpack of a copy).
h5::Handle event_memory_type();

}  // namespace kvscope::trace
