#include "core/trace/hdf5_util.h"

#include <hdf5_hl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "core/common/error.h"
#include "core/trace/chunk_deflate.h"
#include "core/trace/float16.h"

namespace kvscope::trace::h5 {

void Handle::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
herr_t collect_error(unsigned, const H5E_error2_t* e, void* out) {
  auto* messages = static_cast<std::vector<std::string>*>(out);
  if (e->desc && *e->desc) messages->emplace_back(e->desc);
  return 0;
}
}  // namespace

std::string last_error() {
  std::vector<std::string> messages;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "";
  // The outermost entry says what failed, the innermost why ("truncated file: eof = ...").
  if (messages.size() == 1 || messages.front() == messages.back()) return messages.front();
  return messages.front() + ": " + messages.back();
}

std::string name_of(hid_t obj) {
  char buf[512];
  const ssize_t n = H5Iget_name(obj, buf, sizeof buf);
  return n > 0 ? std::string(buf) : std::string("?");
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) {
    const std::string reason = last_error();
    throw Error(what + (reason.empty() ? "" : " (HDF5: " + reason + ")"));
  }
  return id;
}

void check_status(herr_t status, const std::string& what) {
  if (status < 0) {
    const std::string reason = last_error();
    throw Error(what + (reason.empty() ? "" : " (HDF5: " + reason + ")"));
  }
}

hid_t half_type() {
  static hid_t type = [] {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    H5Tlock(t);
    return t;
  }();
  return type;
}

hid_t utf8_string_type() {
  static hid_t type = [] {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    H5Tlock(t);
    return t;
  }();
  return type;
}

Handle fixed_string_type(std::size_t bytes) {
  Handle t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t, std::max<std::size_t>(bytes, 1));
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

Handle open_read_only(const std::string& path) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl, false, true);
#endif
  return Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
}

bool exists(hid_t loc, const std::string& path) {
  std::size_t start = path.empty() || path[0] != '/' ? 0 : 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string prefix = path.substr(0, end);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    start = end + 1;
  }
  return true;
}

namespace {

Handle new_attr(hid_t obj, const std::string& name, hid_t type, hid_t space) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  return Handle(check(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                      "cannot create attribute '" + name + "' on '" + name_of(obj) + "'"));
}

Handle open_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return Handle();
  }
  return Handle(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
}

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void set_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle space(H5Screate(H5S_SCALAR));
  Handle type = fixed_string_type(value.size());
  Handle attr = new_attr(obj, name, type, space);
  std::string padded = value;
  padded.resize(H5Tget_size(type), '\0');
  check_status(H5Awrite(attr, type, padded.data()), "cannot write attribute '" + name + "' on '" + name_of(obj) + "'");
}

void set_attr(hid_t obj, const std::string& name, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr = new_attr(obj, name, H5T_STD_I64LE, space);
  check_status(H5Awrite(attr, H5T_NATIVE_INT64, &value), "cannot write attribute '" + name + "' on '" + name_of(obj) + "'");
}

void set_attr(hid_t obj, const std::string& name, double value) {
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr = new_attr(obj, name, H5T_IEEE_F64LE, space);
  check_status(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), "cannot write attribute '" + name + "' on '" + name_of(obj) + "'");
}

void set_attr(hid_t obj, const std::string& name, const std::vector<int32_t>& values) {
  const hsize_t n = values.size();
  Handle space(n == 0 ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr));
  Handle attr = new_attr(obj, name, H5T_STD_I32LE, space);
  if (n > 0)
    check_status(H5Awrite(attr, H5T_NATIVE_INT32, values.data()),
                 "cannot write attribute '" + name + "' on '" + name_of(obj) + "'");
}

std::optional<std::string> get_string_attr(hid_t obj, const std::string& name) {
  Handle attr = open_attr(obj, name);
  if (!attr.valid()) return std::nullopt;
  Handle type(H5Aget_type(attr));
  if (H5Tget_class(type) != H5T_STRING) return std::nullopt;
  Handle space(H5Aget_space(attr));
  if (H5Sget_simple_extent_npoints(space) != 1) return std::nullopt;
  if (H5Tis_variable_str(type) > 0) {
    char* data = nullptr;
    // Same character set as stored: HDF5 converts neither way between ASCII and UTF-8 strings, and
    // files from other tools often hold ASCII ones.
    Handle mem(H5Tcopy(utf8_string_type()));
    H5Tset_cset(mem, H5Tget_cset(type));
    check_status(H5Aread(attr, mem, &data), "cannot read attribute '" + name + "' of '" + name_of(obj) + "'");
    std::string value = data ? data : "";
    H5free_memory(data);
    return value;
  }
  const std::size_t size = H5Tget_size(type);
  std::string value(size, '\0');
  // The stored type itself: a null-terminated memory type would give up the last byte of a null-padded
  // string that fills its whole width, as ours do.
  check_status(H5Aread(attr, type, value.data()), "cannot read attribute '" + name + "' of '" + name_of(obj) + "'");
  value.resize(std::min(value.find('\0'), value.size()));
  return value;
}

std::optional<int64_t> get_int_attr(hid_t obj, const std::string& name) {
  Handle attr = open_attr(obj, name);
  if (!attr.valid()) return std::nullopt;
  Handle type(H5Aget_type(attr));
  const H5T_class_t cls = H5Tget_class(type);
  Handle space(H5Aget_space(attr));
  if (H5Sget_simple_extent_npoints(space) != 1) return std::nullopt;
  if (cls == H5T_INTEGER || cls == H5T_ENUM) {
    int64_t v = 0;
    if (H5Aread(attr, H5T_NATIVE_INT64, &v) < 0) return std::nullopt;
    return v;
  }
  if (cls == H5T_FLOAT) {
    double v = 0;
    if (H5Aread(attr, H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  return std::nullopt;
}

std::optional<double> get_double_attr(hid_t obj, const std::string& name) {
  Handle attr = open_attr(obj, name);
  if (!attr.valid()) return std::nullopt;
  Handle type(H5Aget_type(attr));
  const H5T_class_t cls = H5Tget_class(type);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return std::nullopt;
  Handle space(H5Aget_space(attr));
  if (H5Sget_simple_extent_npoints(space) != 1) return std::nullopt;
  double v = 0;
  if (H5Aread(attr, H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
  return v;
}

std::vector<int32_t> get_int_array_attr(hid_t obj, const std::string& name) {
  Handle attr = open_attr(obj, name);
  if (!attr.valid()) return {};
  Handle type(H5Aget_type(attr));
  if (H5Tget_class(type) != H5T_INTEGER) return {};
  Handle space(H5Aget_space(attr));
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n <= 0) return {};
  std::vector<int32_t> values(static_cast<std::size_t>(n));
  if (H5Aread(attr, H5T_NATIVE_INT32, values.data()) < 0) return {};
  return values;
}

namespace {
herr_t collect_attr(hid_t obj, const char* name, const H5A_info_t*, void* out) {
  auto* attrs = static_cast<std::map<std::string, std::string>*>(out);
  Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr.valid()) return 0;
  Handle type(H5Aget_type(attr));
  Handle space(H5Aget_space(attr));
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  switch (H5Tget_class(type)) {
    case H5T_STRING: {
      if (auto v = get_string_attr(obj, name)) (*attrs)[name] = *v;
      break;
    }
    case H5T_INTEGER:
    case H5T_ENUM:
    case H5T_FLOAT: {
      if (n <= 0) {
        (*attrs)[name] = "";
        break;
      }
      std::vector<double> values(static_cast<std::size_t>(n));
      if (H5Aread(attr, H5T_NATIVE_DOUBLE, values.data()) < 0) break;
      std::string text;
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (i) text += ",";
        const double v = values[i];
        text += (std::floor(v) == v && std::fabs(v) < 1e15) ? std::to_string(static_cast<long long>(v)) : format_double(v);
      }
      (*attrs)[name] = text;
      break;
    }
    default: break;
  }
  return 0;
}
}  // namespace

std::map<std::string, std::string> all_attrs_as_text(hid_t obj) {
  std::map<std::string, std::string> attrs;
  hsize_t idx = 0;
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &attrs);
  H5Eclear2(H5E_DEFAULT);
  return attrs;
}

Handle ensure_group(hid_t loc, const std::string& path) {
  std::size_t start = 0;
  Handle current;
  hid_t parent = loc;
  while (start < path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(start, end - start);
    start = end + 1;
    if (part.empty()) continue;
    Handle next;
    if (H5Lexists(parent, part.c_str(), H5P_DEFAULT) > 0)
      next = Handle(check(H5Gopen2(parent, part.c_str(), H5P_DEFAULT), "cannot open group '" + part + "' in '" + name_of(parent) + "'"));
    else
      next = Handle(check(H5Gcreate2(parent, part.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                          "cannot create group '" + part + "' in '" + name_of(parent) + "'"));
    current = std::move(next);
    parent = current.get();
  }
  if (!current.valid()) current = Handle(check(H5Oopen(loc, ".", H5P_DEFAULT), "cannot open '" + name_of(loc) + "'"));
  return current;
}

Handle create_dataset(hid_t loc, const std::string& name, const DatasetSpec& spec) {
  const int rank = static_cast<int>(spec.dims.size());
  const std::vector<hsize_t>& max_dims = spec.max_dims.empty() ? spec.dims : spec.max_dims;
  Handle space(check(H5Screate_simple(rank, spec.dims.data(), max_dims.data()), "cannot create dataspace for '" + name + "'"));
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (!spec.chunk.empty()) {
    std::vector<hsize_t> chunk = spec.chunk;
    for (hsize_t& c : chunk) c = std::max<hsize_t>(c, 1);
    check_status(H5Pset_chunk(dcpl, rank, chunk.data()), "cannot set chunking of '" + name + "'");
    if (spec.gzip > 0) {
      if (H5Tget_size(spec.type) > 1) H5Pset_shuffle(dcpl);
      H5Pset_deflate(dcpl, static_cast<unsigned>(spec.gzip));
    }
  }
  Handle dataset(check(H5Dcreate2(loc, name.c_str(), spec.type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                       "cannot create dataset '" + name + "' in '" + name_of(loc) + "'"));
  // H5DSset_label keeps variable-length strings (H5DSget_label of HDF5 1.10 reads nothing else); kvscope never
  // reads these labels, only h5py and HDFView users do, so a damaged global heap cannot reach our reader.
  for (std::size_t i = 0; i < spec.labels.size() && static_cast<int>(i) < rank; ++i)
    H5DSset_label(dataset, static_cast<unsigned>(i), spec.labels[i].c_str());
  return dataset;
}

std::vector<hsize_t> dataset_dims(hid_t dataset) {
  Handle space(check(H5Dget_space(dataset), "cannot read the shape of '" + name_of(dataset) + "'"));
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

void write_slab(hid_t dataset, hid_t mem_type, const std::vector<hsize_t>& offset, const std::vector<hsize_t>& count,
                const void* data) {
  for (hsize_t c : count)
    if (c == 0) return;
  // Whole chunks of data already in the file's type skip HDF5's (slower) filter pipeline.
  Handle file_type(check(H5Dget_type(dataset), "cannot get the type of '" + name_of(dataset) + "'"));
  if (H5Tequal(file_type, mem_type) > 0 && write_whole_chunks(dataset, offset, count, data, H5Tget_size(file_type))) return;
  Handle file_space(check(H5Dget_space(dataset), "cannot get the dataspace of '" + name_of(dataset) + "'"));
  check_status(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset.data(), nullptr, count.data(), nullptr),
               "cannot select rows of '" + name_of(dataset) + "'");
  Handle mem_space(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr));
  check_status(H5Dwrite(dataset, mem_type, mem_space, file_space, H5P_DEFAULT, data), "cannot write '" + name_of(dataset) + "'");
}

void extend(hid_t dataset, int axis, hsize_t size) {
  std::vector<hsize_t> dims = dataset_dims(dataset);
  if (dims[axis] >= size) return;
  dims[axis] = size;
  check_status(H5Dset_extent(dataset, dims.data()), "cannot extend '" + name_of(dataset) + "'");
}

hsize_t append_rows(hid_t dataset, hid_t mem_type, hsize_t rows, const void* data) {
  std::vector<hsize_t> dims = dataset_dims(dataset);
  const hsize_t old_rows = dims[0];
  if (rows == 0) return old_rows;
  dims[0] += rows;
  check_status(H5Dset_extent(dataset, dims.data()), "cannot extend '" + name_of(dataset) + "'");
  std::vector<hsize_t> offset(dims.size(), 0), count = dims;
  offset[0] = old_rows;
  count[0] = rows;
  write_slab(dataset, mem_type, offset, count, data);
  return dims[0];
}

namespace {
hsize_t element_count(hid_t dataset) {
  hsize_t n = 1;
  for (hsize_t d : dataset_dims(dataset)) n *= d;
  return n;
}

template <typename T>
std::vector<T> read_native(hid_t dataset, hid_t mem_type) {
  std::vector<T> values(element_count(dataset));
  if (!values.empty())
    check_status(H5Dread(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "cannot read '" + name_of(dataset) + "'");
  return values;
}
}  // namespace

std::vector<float> read_floats(hid_t dataset) {
  Handle type(H5Dget_type(dataset));
  if (H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 2) {
    const std::vector<uint16_t> bits = read_native<uint16_t>(dataset, half_type());
    std::vector<float> values(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) values[i] = half_to_float(bits[i]);
    return values;
  }
  return read_native<float>(dataset, H5T_NATIVE_FLOAT);
}

std::vector<double> read_doubles(hid_t dataset) { return read_native<double>(dataset, H5T_NATIVE_DOUBLE); }
std::vector<int32_t> read_ints(hid_t dataset) { return read_native<int32_t>(dataset, H5T_NATIVE_INT32); }
std::vector<int64_t> read_int64s(hid_t dataset) { return read_native<int64_t>(dataset, H5T_NATIVE_INT64); }
std::vector<uint8_t> read_bytes(hid_t dataset) { return read_native<uint8_t>(dataset, H5T_NATIVE_UINT8); }
std::vector<uint16_t> read_half_bits(hid_t dataset) { return read_native<uint16_t>(dataset, half_type()); }

std::vector<std::string> read_strings(hid_t dataset) {
  Handle type(H5Dget_type(dataset));
  if (H5Tget_class(type) != H5T_STRING) throw Error("'" + name_of(dataset) + "' is not a string dataset");
  const hsize_t n = element_count(dataset);
  std::vector<std::string> out;
  out.reserve(n);
  if (n == 0) return out;
  if (H5Tis_variable_str(type) > 0) {
    std::vector<char*> raw(n, nullptr);
    Handle mem(H5Tcopy(utf8_string_type()));
    H5Tset_cset(mem, H5Tget_cset(type));  // as for attributes: no ASCII <-> UTF-8 conversion exists
    check_status(H5Dread(dataset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), "cannot read '" + name_of(dataset) + "'");
    for (char* s : raw) out.emplace_back(s ? s : "");
    Handle space(H5Dget_space(dataset));
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, raw.data());
    return out;
  }
  const std::size_t size = H5Tget_size(type);
  std::vector<char> raw(n * size);
  check_status(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()),
               "cannot read '" + name_of(dataset) + "'");
  for (hsize_t i = 0; i < n; ++i) {
    std::string s(raw.data() + i * size, size);
    s.resize(std::min(s.find('\0'), s.size()));
    out.push_back(std::move(s));
  }
  return out;
}

void write_strings(hid_t dataset, const std::vector<std::string>& values, hsize_t offset) {
  Handle type(check(H5Dget_type(dataset), "cannot get the type of '" + name_of(dataset) + "'"));
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0)
    throw Error("'" + name_of(dataset) + "' is not a fixed-length string dataset");
  const std::size_t width = H5Tget_size(type);
  std::vector<char> packed(values.size() * width, '\0');
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].size() > width)
      throw Error("string of " + std::to_string(values[i].size()) + " bytes does not fit the " + std::to_string(width) +
                  "-byte elements of '" + name_of(dataset) + "'");
    std::copy(values[i].begin(), values[i].end(), packed.begin() + static_cast<std::ptrdiff_t>(i * width));
  }
  write_slab(dataset, type, {offset}, {values.size()}, packed.data());
}

namespace {
herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> list_group(hid_t group) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  check_status(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_link, &names),
               "cannot list group '" + name_of(group) + "'");
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kvscope::trace::h5
