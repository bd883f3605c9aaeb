#include "core/model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/common/shape_text.h"

static_assert(std::endian::native == std::endian::little, "the safetensors reader assumes a little-endian host");

namespace kvscope::model {
namespace {

// The reference implementation's limit; real headers are a few hundred kilobytes at most.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Tensor entries are objects holding arrays: depth 3. Anything deeper is not a safetensors header, and a
// limit keeps hostile nesting from exhausting the stack.
constexpr int kMaxJsonDepth = 4;
constexpr std::size_t kMaxDims = 8;

struct DtypeInfo {
  const char* name;
  GgmlType type;
  uint64_t bytes;
};
// U8 holds raw bytes (gpt-oss's MXFP4 expert blocks and scales); ggml has no unsigned byte type, so it is
// given I8's, which no kernel takes as weights.
constexpr DtypeInfo kSupportedDtypes[] = {{"F32", GgmlType::F32, 4},
                                          {"F16", GgmlType::F16, 2},
                                          {"BF16", GgmlType::BF16, 2},
                                          {"U8", GgmlType::I8, 1}};

class HeaderReader {
 public:
  explicit HeaderReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const { throw Error(file_ + ": " + what); }
  [[noreturn]] void fail(const std::string& tensor, const std::string& field, const std::string& what) const {
    throw Error(file_ + ": tensor '" + tensor + "' field '" + field + "': " + what);
  }

  const DtypeInfo& dtype(const std::string& tensor, const nlohmann::json& value) const {
    if (!value.is_string())
      fail(tensor, "dtype", value.dump() + " is not a string (expected \"F32\", \"F16\", \"BF16\" or \"U8\")");
    const auto& name = value.get_ref<const std::string&>();
    for (const DtypeInfo& info : kSupportedDtypes)
      if (name == info.name) return info;
    fail(tensor, "dtype", "\"" + name + "\" is not supported (supported: F32, F16, BF16, U8)");
  }

  std::vector<uint64_t> shape(const std::string& tensor, const nlohmann::json& value) const {
    if (!value.is_array() || value.size() > kMaxDims)
      fail(tensor, "shape", value.dump() + " (expected an array of at most " + std::to_string(kMaxDims) + " sizes)");
    std::vector<uint64_t> dims;
    for (const auto& d : value) {
      if (!d.is_number_unsigned()) fail(tensor, "shape", value.dump() + " (expected non-negative integers)");
      dims.push_back(d.get<uint64_t>());
    }
    return dims;
  }

  std::pair<uint64_t, uint64_t> offsets(const std::string& tensor, const nlohmann::json& value) const {
    const bool pair =
        value.is_array() && value.size() == 2 && value[0].is_number_unsigned() && value[1].is_number_unsigned();
    if (!pair || value[0].get<uint64_t>() > value[1].get<uint64_t>())
      fail(tensor, "data_offsets", value.dump() + " (expected [begin, end] with 0 <= begin <= end)");
    return {value[0].get<uint64_t>(), value[1].get<uint64_t>()};
  }

  // Elements times element size, refusing sizes that overflow 64 bits.
  uint64_t byte_size(const std::string& tensor, const std::vector<uint64_t>& dims, uint64_t element_bytes) const {
    uint64_t bytes = element_bytes;
    for (uint64_t d : dims) {
      if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / d)
        fail(tensor, "shape", "the tensor's byte size overflows 64 bits");
      bytes *= d;
    }
    return bytes;
  }

 private:
  std::string file_;
};

nlohmann::json parse_header_json(const HeaderReader& reader, const char* begin, const char* end) {
  const nlohmann::json::parser_callback_t depth_limit = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth)
      reader.fail("header: JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels (expected tensor entries)");
    return true;
  };
  try {
    return nlohmann::json::parse(begin, end, depth_limit);
  } catch (const nlohmann::json::exception& e) {
    reader.fail(std::string("header: not valid JSON (") + e.what() + ")");
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  file.image_ = MappedFile::open(path, "safetensors file");
  file.parse();
  return file;
}

SafetensorsFile SafetensorsFile::open_memory(const uint8_t* data, std::size_t size, const std::string& name) {
  SafetensorsFile file;
  file.path_ = name;
  file.image_ = MappedFile::copy_of(data, size);
  file.parse();
  return file;
}

const SafetensorsTensor* SafetensorsFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse() {
  const HeaderReader reader(path_.string());
  const uint64_t size = image_.size();
  if (size < 8) reader.fail("file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, image_.data(), 8);
  if (header_bytes < 2 || header_bytes > kMaxHeaderBytes || header_bytes > size - 8)
    reader.fail("header length " + std::to_string(header_bytes) + " does not fit (expected 2.." +
                std::to_string(std::min(kMaxHeaderBytes, size - 8)) + " for a file of " + std::to_string(size) +
                " bytes; is this a safetensors file?)");
  const char* text = reinterpret_cast<const char*>(image_.data() + 8);
  if (text[0] != '{') reader.fail("header: does not start with '{' (expected a JSON object)");
  const nlohmann::json header = parse_header_json(reader, text, text + header_bytes);
  if (!header.is_object()) reader.fail("header: not a JSON object");

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = size - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) reader.fail("header: '__metadata__' is not an object (expected string pairs)");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) reader.fail("header: '__metadata__' entry '" + key + "' is not a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object())
      reader.fail("header: tensor '" + name + "' is not an object (expected dtype, shape, data_offsets)");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) reader.fail(name, field, "missing");
    SafetensorsTensor tensor;
    tensor.name = name;
    const DtypeInfo& dtype = reader.dtype(name, entry["dtype"]);
    tensor.dtype = dtype.name;
    tensor.type = dtype.type;
    tensor.shape = reader.shape(name, entry["shape"]);
    const auto [begin, end] = reader.offsets(name, entry["data_offsets"]);
    const uint64_t expected = reader.byte_size(name, tensor.shape, dtype.bytes);
    if (end - begin != expected)
      reader.fail(name, "data_offsets",
                  "[" + std::to_string(begin) + ", " + std::to_string(end) + "] holds " + std::to_string(end - begin) +
                      " bytes, but " + dtype.name + " " + shape_text(tensor.shape) + " needs " +
                      std::to_string(expected));
    if (end > data_bytes)
      reader.fail(name, "data_offsets",
                  "ends at byte " + std::to_string(end) + " of a data section of " + std::to_string(data_bytes) +
                      " bytes (is the file truncated?)");
    tensor.offset = begin;
    tensor.n_bytes = expected;
    tensor.data = image_.data() + data_start + begin;
    tensor_index_[name] = tensors_.size();
    tensors_.push_back(std::move(tensor));
  }

  // As the reference requires, the byte ranges tile the data section: no overlaps, no gaps, nothing after.
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->n_bytes < b->n_bytes;
  });
  uint64_t covered = 0;
  for (const SafetensorsTensor* t : by_offset) {
    if (t->offset != covered)
      reader.fail(t->name, "data_offsets",
                  "starts at byte " + std::to_string(t->offset) + " (expected " + std::to_string(covered) +
                      ": tensors must tile the data without gaps or overlaps)");
    covered += t->n_bytes;
  }
  if (covered != data_bytes)
    reader.fail("the tensors cover " + std::to_string(covered) + " of the " + std::to_string(data_bytes) +
                " data bytes (expected them to cover the data section exactly)");
}

}  // namespace kvscope::model
