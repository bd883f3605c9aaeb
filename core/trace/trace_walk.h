#pragma once
// What a trace probe's child process does (trace_probe.h): touch every piece of HDF5 metadata that the
// reader or the window can later make libhdf5 parse, so that a damaged file crashes the child and not
// the caller. Map data is not read; only the chunk index that locates it.
#include <filesystem>
#include <functional>
#include <string>

namespace kvscope::trace {

// Calls `at` with the object about to be touched ("/runs/h2o/attention/layer_03/head_00 (chunk index)")
// before touching it, so that a crash can be located. Walks every group (its attributes and links),
// every dataset (type, shape, filters, attributes, chunk index), then runs the reader's own metadata pass
// (summarize_trace, and read_trace without maps). Throws Error as the reader does when the file is
// refused cleanly, and also when a link table fails to decode (see trace_walk.cpp: that error path of
// libhdf5 1.10 is itself unsafe in the caller's process).
void walk_trace_metadata(const std::filesystem::path& path, const std::function<void(const std::string&)>& at);

// The first half of walk_trace_metadata for any HDF5 file: every group's attributes and links, every
// dataset's type, shape, filters, attributes and chunk index. Not an HDF5 file: returns (the reader that
// follows refuses it with its own message).
void walk_hdf5_structure(const std::filesystem::path& path, const std::function<void(const std::string&)>& at);

}  // namespace kvscope::trace
