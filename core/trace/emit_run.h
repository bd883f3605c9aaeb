#pragma once
// Sends a run that is already in memory (a live run on screen, or one read from a file) to a sink through
// the same calls a recording makes, so "save" writes what is in memory and never runs the model again.
// Emitted into an Hdf5Writer, a live run gives the file `kvscope trace` would have written for it.
#include <string>

#include "core/trace/trace_sink.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

// `name`: the run's name in the sink (empty: run.name). An incomplete run stays incomplete.
void emit_run(const RunTrace& run, TraceSink& sink, const std::string& name = "");

}  // namespace kvscope::trace
