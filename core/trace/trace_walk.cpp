#include "core/trace/trace_walk.h"

#include <set>
#include <vector>

#include "core/common/error.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/hdf5_util.h"

namespace kvscope::trace {

using h5::Handle;

namespace {

// Our traces are four groups deep (/runs/NAME/attention/layer_03); a damaged link table can make a group
// its own descendant, so depth is bounded and objects are visited once.
constexpr int kMaxDepth = 16;

// A key identifying an object within the file (its header address), for the visited set.
std::string object_key(hid_t obj) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0) return "";
  return std::string(reinterpret_cast<const char*>(&info.token), sizeof info.token);
#else
  H5O_info_t info;
  if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) return "";
  return std::to_string(info.addr);
#endif
}

class MetadataWalker {
 public:
  MetadataWalker(const std::string& file, const std::function<void(const std::string&)>& at) : file_(file), at_(at) {}

  void group(hid_t g, const std::string& path, int depth) {
    attributes(g, path);
    at_(path + " (link table)");
    std::vector<std::string> names;
    try {
      names = h5::list_group(g);
    } catch (const Error& e) {
      // Not left to the reader: when a dense link table fails to decode, libhdf5 1.10 frees the entries it
      // never filled (H5G__link_release_table), which crashes or not depending on what the heap held
      // before; a clean failure here proves nothing about the caller's process.
      throw Error("trace file '" + file_ + "' is damaged: " + e.what() + "; the file cannot be opened safely");
    }
    for (const auto& name : names) {
      const std::string child = path == "/" ? "/" + name : path + "/" + name;
      at_(child + " (link)");
      H5L_info_t link;
      if (H5Lget_info(g, name.c_str(), &link, H5P_DEFAULT) < 0 || link.type != H5L_TYPE_HARD) continue;
      at_(child + " (object header)");
      Handle obj(H5Oopen(g, name.c_str(), H5P_DEFAULT));
      if (!obj.valid()) continue;
      const std::string key = object_key(obj);
      if (key.empty() || !visited_.insert(key).second) continue;
      const H5I_type_t kind = H5Iget_type(obj);
      if (kind == H5I_GROUP && depth < kMaxDepth) group(obj, child, depth + 1);
      if (kind == H5I_DATASET) dataset(obj, child);
    }
  }

 private:
  void attributes(hid_t obj, const std::string& path) {
    at_(path + " (attributes)");
    h5::all_attrs_as_text(obj);
  }

  void dataset(hid_t d, const std::string& path) {
    at_(path + " (type and shape)");
    Handle type(H5Dget_type(d));
    Handle space(H5Dget_space(d));
    if (space.valid()) H5Sget_simple_extent_npoints(space);
    at_(path + " (filters)");
    Handle dcpl(H5Dget_create_plist(d));
    if (dcpl.valid() && H5Pget_layout(dcpl) == H5D_CHUNKED) {
      const int filters = H5Pget_nfilters(dcpl);
      for (int i = 0; i < filters; ++i) {
        unsigned flags = 0, config = 0, values[8];
        std::size_t n_values = 8;
        char name[64];
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &n_values, values, sizeof name, name, &config);
      }
      // Counting the chunks visits every node of the chunk index, which H5Dread later searches.
      at_(path + " (chunk index)");
      hsize_t chunks = 0;
      if (space.valid()) H5Dget_num_chunks(d, space, &chunks);
    }
    attributes(d, path);
    H5Eclear2(H5E_DEFAULT);
  }

  std::string file_;
  const std::function<void(const std::string&)>& at_;
  std::set<std::string> visited_;
};

}  // namespace

void walk_hdf5_structure(const std::filesystem::path& path, const std::function<void(const std::string&)>& at) {
  h5::silence_errors();
  at("the file's superblock");
  if (H5Fis_hdf5(path.string().c_str()) > 0) {
    Handle file = h5::open_read_only(path.string());
    if (file.valid()) MetadataWalker(path.string(), at).group(file, "/", 0);
    H5Eclear2(H5E_DEFAULT);
  }
}

void walk_trace_metadata(const std::filesystem::path& path, const std::function<void(const std::string&)>& at) {
  walk_hdf5_structure(path, at);
  // The reader's own pass: what it refuses here it refuses in the caller, with the same message.
  at("the reader's summary of every run");
  summarize_trace(path);
  at("the reader's pass over tokens, statistics, events and steps");
  ReadOptions metadata_only;
  metadata_only.maps = false;
  metadata_only.qk = false;
  metadata_only.kept_mask = false;
  read_trace(path, metadata_only);
}

}  // namespace kvscope::trace
