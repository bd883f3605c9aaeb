#pragma once
// Small RAII and helper layer over the HDF5 C API shared by the trace writer and reader. Every failing
// call becomes an Error whose message names the file and the object, plus HDF5's own innermost reason;
// HDF5's automatic error printing is switched off on every thread that uses these helpers.
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::trace::h5 {

inline constexpr const char* kFormatName = "kvscope-trace";
inline constexpr int kFormatVersion = 1;

// Owns one hid_t and closes it with the right H5?close for its kind.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Silences HDF5's stderr error printing for the calling thread (the library is built thread-safe, so
// the setting is per thread).
void silence_errors();
// HDF5's innermost error description on this thread's stack, or "" (then clears the stack).
std::string last_error();

// The path of an open object ("/runs/full/events"), or "?".
std::string name_of(hid_t obj);

// Throws Error("<what>: <HDF5 reason>") when id / status < 0. Callers put the object's path in `what`;
// the writer and reader prefix the file name.
hid_t check(hid_t id, const std::string& what);
void check_status(herr_t status, const std::string& what);

// Types. half_type: h5py's own recipe for '<f2' (IEEE binary16, little endian).
hid_t half_type();         // owned by this module; do not close
hid_t utf8_string_type();  // variable-length UTF-8 (read side only); owned by this module
// A fixed-length UTF-8 string of `bytes` bytes (at least 1), null-padded; the caller owns it. The writer
// stores every string this way: variable-length strings live in the global heap, whose addresses a damaged
// file can point anywhere (libhdf5 1.10 follows them without checks).
Handle fixed_string_type(std::size_t bytes);

// Opens an HDF5 file read-only without file locking (traces are read while copied, synced or written).
// Returns an invalid handle when HDF5 refuses it; last_error() says why.
Handle open_read_only(const std::string& path);

bool exists(hid_t loc, const std::string& path);  // every link along a '/' path

// Attributes (replaced when present).
void set_attr(hid_t obj, const std::string& name, const std::string& value);
void set_attr(hid_t obj, const std::string& name, int64_t value);
void set_attr(hid_t obj, const std::string& name, double value);
void set_attr(hid_t obj, const std::string& name, const std::vector<int32_t>& values);
std::optional<std::string> get_string_attr(hid_t obj, const std::string& name);
std::optional<int64_t> get_int_attr(hid_t obj, const std::string& name);
std::optional<double> get_double_attr(hid_t obj, const std::string& name);
std::vector<int32_t> get_int_array_attr(hid_t obj, const std::string& name);
// Every attribute, numbers formatted as text.
std::map<std::string, std::string> all_attrs_as_text(hid_t obj);

// Creates (or opens) the groups along a path.
Handle ensure_group(hid_t loc, const std::string& path);

struct DatasetSpec {
  hid_t type = H5I_INVALID_HID;
  std::vector<hsize_t> dims, max_dims, chunk;  // max_dims empty: same as dims; H5S_UNLIMITED allowed
  int gzip = 4;                                // 0: no filters
  std::vector<std::string> labels;             // dimension labels (H5DSset_label)
};
Handle create_dataset(hid_t loc, const std::string& name, const DatasetSpec& spec);

std::vector<hsize_t> dataset_dims(hid_t dataset);
// Writes a hyperslab [offset, offset+count) of the dataset from a contiguous buffer of mem_type.
void write_slab(hid_t dataset, hid_t mem_type, const std::vector<hsize_t>& offset, const std::vector<hsize_t>& count,
                const void* data);
// Grows dimension `axis` to at least `size`.
void extend(hid_t dataset, int axis, hsize_t size);
// Appends rows along axis 0 (the other dims fixed) and returns the new row count.
hsize_t append_rows(hid_t dataset, hid_t mem_type, hsize_t rows, const void* data);

// Whole-dataset reads into native types.
std::vector<float> read_floats(hid_t dataset);  // float32, float64 or our half type
std::vector<double> read_doubles(hid_t dataset);
std::vector<int32_t> read_ints(hid_t dataset);
std::vector<int64_t> read_int64s(hid_t dataset);
std::vector<uint8_t> read_bytes(hid_t dataset);
std::vector<uint16_t> read_half_bits(hid_t dataset);  // float16 as stored (bits), for data kept in half
std::vector<std::string> read_strings(hid_t dataset);  // fixed- or variable-length
// Writes into a fixed-length string dataset; throws Error naming the dataset when a value is longer than
// its element size.
void write_strings(hid_t dataset, const std::vector<std::string>& values, hsize_t offset);

// Every link name in a group, sorted.
std::vector<std::string> list_group(hid_t group);

}  // namespace kvscope::trace::h5
