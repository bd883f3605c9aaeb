#include "core/model/gguf.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/common/error.h"

// The parser reads fields with memcpy in host byte order, which is GGUF's little-endian order only here.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace kvscope::model {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint64_t kMaxKeyBytes = 65535;  // the GGUF spec's limit on key length
constexpr uint64_t kMaxTensorNameBytes = 64;  // GGML_MAX_NAME, which llama.cpp enforces too
constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;
// Each parsed element costs a GgufValue (40 bytes) however small its encoding, so a file could otherwise
// make the reader allocate 40 times its own size. Real vocabularies and merge lists are far below this.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;
// Smallest encodings, used to reject absurd counts before looping or allocating:
// a key/value pair is a key length, a one-byte key, a type id and a one-byte value;
// a tensor info is a name length, a one-byte name, n_dims, one dimension, a type id and an offset.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

enum ValueTypeId : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

const char* value_type_id_name(uint32_t type) {
  static const char* const names[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                      "bool",  "string", "array", "uint64", "int64",  "float64"};
  return type <= kF64 ? names[type] : "unknown";
}

// Bytes of one encoded value of a fixed-size type; strings count their length prefix only.
uint64_t min_encoded_bytes(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;
    default: return 0;
  }
}

template <class Field>
std::string field_text(const Field& field) {
  if constexpr (std::is_invocable_v<const Field&>)
    return field();
  else
    return std::string(field);
}

// A bounds-checked cursor over the file image. Field names are passed as strings or as lambdas that build
// them, so that the common path never formats a name it will not print.
class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size, std::string file) : data_(data), size_(size), file_(std::move(file)) {}

  uint64_t position() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  uint64_t size() const { return size_; }

  template <class Field>
  [[noreturn]] void fail(const Field& field, const std::string& what) const {
    throw Error(file_ + ": " + field_text(field) + ": " + what);
  }

  template <class Field>
  void need(uint64_t bytes, const Field& field) const {
    if (bytes > remaining())
      fail(field, "file truncated: needs " + std::to_string(bytes) + " bytes at offset " + std::to_string(pos_) +
                      " but the file ends at " + std::to_string(size_));
  }

  template <class T, class Field>
  T read(const Field& field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  template <class Field>
  std::string read_string(const Field& field, uint64_t max_bytes) {
    const auto length = read<uint64_t>([&] { return field_text(field) + " length"; });
    if (length > max_bytes)
      fail([&] { return field_text(field) + " length"; },
           std::to_string(length) + " exceeds the limit of " + std::to_string(max_bytes) + " bytes");
    if (length > remaining())
      fail([&] { return field_text(field) + " length"; },
           std::to_string(length) + " exceeds the " + std::to_string(remaining()) +
               " bytes left in the file (truncated or corrupt)");
    std::string text(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(length));
    pos_ += length;
    return text;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string file_;
};

template <class Field>
GgufValue read_scalar(Reader& reader, uint32_t type, const Field& field) {
  switch (type) {
    case kU8: return reader.read<uint8_t>(field);
    case kI8: return reader.read<int8_t>(field);
    case kU16: return reader.read<uint16_t>(field);
    case kI16: return reader.read<int16_t>(field);
    case kU32: return reader.read<uint32_t>(field);
    case kI32: return reader.read<int32_t>(field);
    case kF32: return reader.read<float>(field);
    case kU64: return reader.read<uint64_t>(field);
    case kI64: return reader.read<int64_t>(field);
    case kF64: return reader.read<double>(field);
    case kString: return reader.read_string(field, std::numeric_limits<uint64_t>::max());
    case kBool: {
      const auto byte = reader.read<uint8_t>(field);
      if (byte > 1) reader.fail(field, "bool byte is " + std::to_string(byte) + " (expected 0 or 1)");
      return byte == 1;
    }
    default:
      reader.fail(field, "type " + std::to_string(type) + " is not a GGUF scalar type");
  }
}

template <class Field>
GgufValue read_array(Reader& reader, const Field& field) {
  const auto element_type = reader.read<uint32_t>([&] { return field_text(field) + " array element type"; });
  if (element_type == kArray)
    reader.fail([&] { return field_text(field) + " array element type"; }, "nested arrays are not supported");
  if (element_type > kF64)
    reader.fail([&] { return field_text(field) + " array element type"; },
                std::to_string(element_type) + " is not a GGUF value type (expected 0..12)");
  const auto count = reader.read<uint64_t>([&] { return field_text(field) + " array length"; });
  const uint64_t element_bytes = min_encoded_bytes(element_type);
  if (count > kMaxArrayElements)
    reader.fail([&] { return field_text(field) + " array length"; },
                std::to_string(count) + " exceeds the limit of " + std::to_string(kMaxArrayElements) + " elements");
  if (count > reader.remaining() / element_bytes)
    reader.fail([&] { return field_text(field) + " array length"; },
                std::to_string(count) + " " + value_type_id_name(element_type) + " elements need at least " +
                    std::to_string(element_bytes) + " bytes each but only " + std::to_string(reader.remaining()) +
                    " bytes are left");
  auto array = std::make_shared<GgufArray>();
  array->element_type = element_type;
  array->values.reserve(static_cast<std::size_t>(count));
  for (uint64_t i = 0; i < count; ++i)
    array->values.push_back(
        read_scalar(reader, element_type, [&] { return field_text(field) + " element #" + std::to_string(i); }));
  return array;
}

template <class Field>
GgufValue read_value(Reader& reader, uint32_t type, const Field& field) {
  if (type == kArray) return read_array(reader, field);
  return read_scalar(reader, type, field);
}

// Converts an integer-valued metadata value; nullopt-like false when it is not an integer or does not fit.
bool integer_value(const GgufValue& value, int64_t& out) {
  return std::visit(
      [&](const auto& v) -> bool {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || !std::is_integral_v<T>) {
          return false;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
          out = static_cast<int64_t>(v);
          return true;
        } else {
          out = static_cast<int64_t>(v);
          return true;
        }
      },
      value);
}

bool float_value(const GgufValue& value, double& out) {
  if (const auto* f = std::get_if<float>(&value)) return out = *f, true;
  if (const auto* d = std::get_if<double>(&value)) return out = *d, true;
  int64_t i = 0;
  if (integer_value(value, i)) return out = static_cast<double>(i), true;
  return false;
}

// The first four bytes as text, with non-printable bytes escaped, so the user can recognise the format.
std::string printable_magic(const uint8_t* bytes) {
  std::string text;
  for (int i = 0; i < 4; ++i) {
    if (bytes[i] >= 0x20 && bytes[i] < 0x7F) {
      text += static_cast<char>(bytes[i]);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", bytes[i]);
      text += escaped;
    }
  }
  return text;
}

uint64_t align_up(uint64_t offset, uint64_t alignment) {
  return offset + (alignment - offset % alignment) % alignment;
}

}  // namespace

std::string gguf_value_type_name(const GgufValue& value) {
  static const char* const names[] = {"uint8", "int8",   "uint16", "int16", "uint32",  "int32", "float32",
                                      "bool",  "string", "uint64", "int64", "float64", "array"};
  if (const auto* array = std::get_if<std::shared_ptr<GgufArray>>(&value))
    return std::string("array of ") + value_type_id_name((*array)->element_type);
  return names[value.index()];
}

uint64_t GgufTensorInfo::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // the reader checked that this cannot overflow
  return n;
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile file;
  file.path_ = path;
  file.image_ = MappedFile::open(path, "GGUF model file");
  file.size_ = file.image_.size();
  file.parse(file.image_.data(), file.size_);
  return file;
}

GgufFile GgufFile::open_memory(const uint8_t* data, std::size_t size, const std::string& name) {
  GgufFile file;
  file.path_ = name;
  file.image_ = MappedFile::copy_of(data, size);
  file.size_ = size;
  file.parse(file.image_.data(), size);
  return file;
}

void GgufFile::parse(const uint8_t* data, uint64_t size) {
  Reader reader(data, size, path_.string());
  if (size < 4) reader.fail("magic", "file is " + std::to_string(size) + " bytes, too short for a GGUF header");
  const auto magic = reader.read<uint32_t>("magic");
  if (magic != kMagic)
    reader.fail("magic", "found '" + printable_magic(data) + "' (expected 'GGUF'; is this a GGUF model file?)");

  version_ = reader.read<uint32_t>("version");
  if (version_ == 1)
    reader.fail("version", "GGUF v1 is not supported (expected 2 or 3); convert the model again with current llama.cpp");
  if (version_ != 2 && version_ != 3) {
    if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3)
      reader.fail("version", "this is a big-endian GGUF file, which is not supported (expected little-endian)");
    reader.fail("version", std::to_string(version_) + " is not supported (expected 2 or 3)");
  }

  const auto tensor_count = reader.read<uint64_t>("tensor_count");
  const auto kv_count = reader.read<uint64_t>("kv_count");
  if (kv_count > reader.remaining() / kMinKvBytes)
    reader.fail("kv_count", std::to_string(kv_count) + " entries cannot fit in the " +
                                std::to_string(reader.remaining()) + " bytes left in the file");

  for (uint64_t i = 0; i < kv_count; ++i) {
    const auto key_field = [&] { return "metadata key #" + std::to_string(i); };
    std::string key = reader.read_string(key_field, kMaxKeyBytes);
    if (key.empty()) reader.fail(key_field, "key is empty");
    const auto field = [&] { return "metadata key #" + std::to_string(i) + " '" + key + "'"; };
    const auto type = reader.read<uint32_t>([&] { return field() + " value type"; });
    if (type > kF64)
      reader.fail([&] { return field() + " value type"; },
                  std::to_string(type) + " is not a GGUF value type (expected 0..12)");
    GgufValue value = read_value(reader, type, [&] { return field() + " value"; });
    if (!metadata_.emplace(key, std::move(value)).second) reader.fail(field, "duplicate key");
  }

  alignment_ = kDefaultAlignment;
  if (has("general.alignment")) {
    const GgufValue& value = metadata_.at("general.alignment");
    int64_t alignment = 0;
    const bool is_integer = integer_value(value, alignment);
    if (!is_integer || alignment <= 0 || alignment > (int64_t{1} << 30) ||
        !std::has_single_bit(static_cast<uint64_t>(alignment)))
      reader.fail("metadata 'general.alignment'",
                  "found " + (is_integer ? std::to_string(alignment) : gguf_value_type_name(value)) +
                      " (expected a power of two between 1 and 2^30)");
    alignment_ = static_cast<uint64_t>(alignment);
  }

  if (tensor_count > reader.remaining() / kMinTensorInfoBytes)
    reader.fail("tensor_count", std::to_string(tensor_count) + " tensors cannot fit in the " +
                                    std::to_string(reader.remaining()) + " bytes left in the file");
  tensors_.reserve(static_cast<std::size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo info;
    info.name = reader.read_string([&] { return "tensor #" + std::to_string(i) + " name"; }, kMaxTensorNameBytes);
    const auto field = [&](const char* part) { return "tensor '" + info.name + "' " + part; };

    const auto n_dims = reader.read<uint32_t>([&] { return field("n_dims"); });
    if (n_dims < 1 || n_dims > kMaxDims)
      reader.fail([&] { return field("n_dims"); }, std::to_string(n_dims) + " (expected 1..4)");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim_field = [&] { return field("dimension #") + std::to_string(d); };
      const auto extent = reader.read<uint64_t>(dim_field);
      if (extent < 1 || extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / elements)
        reader.fail(dim_field, std::to_string(extent) + " (expected >= 1 with at most 2^63-1 elements in all)");
      elements *= extent;
      info.shape.push_back(extent);
    }

    const auto type_id = reader.read<uint32_t>([&] { return field("type"); });
    const GgmlTypeTraits* traits = ggml_type_traits(type_id);
    if (!traits) reader.fail([&] { return field("type"); }, "unknown ggml type id " + std::to_string(type_id));
    info.type = static_cast<GgmlType>(type_id);
    info.offset = reader.read<uint64_t>([&] { return field("offset"); });

    const auto block = static_cast<uint64_t>(traits->block_elements);
    if (info.shape[0] % block != 0)
      reader.fail([&] { return field("dimension #0"); },
                  std::to_string(info.shape[0]) + " is not a multiple of the " + traits->name + " block size " +
                      std::to_string(block));
    const uint64_t blocks = elements / block;  // shape[0] divides, so the blocks tile every row exactly
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(traits->block_bytes))
      reader.fail([&] { return field("size"); }, "byte size overflows 64 bits");
    info.n_bytes = blocks * static_cast<uint64_t>(traits->block_bytes);

    if (!tensor_index_.emplace(info.name, tensors_.size()).second)
      reader.fail([&] { return field("name"); }, "duplicate tensor name");
    tensors_.push_back(std::move(info));
  }

  const uint64_t data_start = align_up(reader.position(), alignment_);
  for (auto& info : tensors_) {
    const auto field = [&](const char* part) { return "tensor '" + info.name + "' " + part; };
    if (info.offset % alignment_ != 0)
      reader.fail(field("offset"), std::to_string(info.offset) + " is not a multiple of the alignment " +
                                       std::to_string(alignment_));
    const uint64_t data_bytes = data_start <= size ? size - data_start : 0;
    if (info.offset > data_bytes || info.n_bytes > data_bytes - info.offset)
      reader.fail(field("data"), std::to_string(info.n_bytes) + " bytes at offset " + std::to_string(info.offset) +
                                     " of the data section (which starts at byte " + std::to_string(data_start) +
                                     ") run past the end of the file (" + std::to_string(size) + " bytes)");
    info.data = data + data_start + info.offset;
  }
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  if (const GgufTensorInfo* info = find_tensor(name)) return *info;
  throw Error(path_.string() + ": tensor '" + name + "': not found in the file");
}

namespace {

[[noreturn]] void metadata_error(const std::filesystem::path& path, const std::string& key,
                                 const std::string& what) {
  throw Error(path.string() + ": metadata '" + key + "': " + what);
}

const GgufValue& required(const std::map<std::string, GgufValue>& metadata, const std::filesystem::path& path,
                          const std::string& key, const char* expected) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) metadata_error(path, key, std::string("missing (expected ") + expected + ")");
  return it->second;
}

const GgufArray& required_array(const std::map<std::string, GgufValue>& metadata, const std::filesystem::path& path,
                                const std::string& key, const char* expected) {
  const GgufValue& value = required(metadata, path, key, expected);
  const auto* array = std::get_if<std::shared_ptr<GgufArray>>(&value);
  if (!array) metadata_error(path, key, std::string("expected ") + expected + ", found " + gguf_value_type_name(value));
  return **array;
}

}  // namespace

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& value = required(metadata_, path_, key, "an integer");
  int64_t result = 0;
  if (!integer_value(value, result))
    metadata_error(path_, key, "expected an integer that fits in int64, found " + gguf_value_type_name(value));
  return result;
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& value = required(metadata_, path_, key, "a number");
  double result = 0;
  if (!float_value(value, result)) metadata_error(path_, key, "expected a number, found " + gguf_value_type_name(value));
  return result;
}

double GgufFile::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const GgufValue& value = metadata_.at(key);
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  metadata_error(path_, key, "expected a bool, found " + gguf_value_type_name(value));
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& value = required(metadata_, path_, key, "a string");
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  metadata_error(path_, key, "expected a string, found " + gguf_value_type_name(value));
}

std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufArray& array = required_array(metadata_, path_, key, "an array of string");
  if (array.element_type != kString)
    metadata_error(path_, key, std::string("expected an array of string, found array of ") +
                                   value_type_id_name(array.element_type));
  std::vector<std::string> result;
  result.reserve(array.values.size());
  for (const auto& v : array.values) result.push_back(std::get<std::string>(v));
  return result;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const GgufArray& array = required_array(metadata_, path_, key, "an array of numbers");
  std::vector<float> result;
  result.reserve(array.values.size());
  for (const auto& v : array.values) {
    double d = 0;
    if (!float_value(v, d))
      metadata_error(path_, key, std::string("expected an array of numbers, found array of ") +
                                     value_type_id_name(array.element_type));
    result.push_back(static_cast<float>(d));
  }
  return result;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufArray& array = required_array(metadata_, path_, key, "an array of integers");
  std::vector<int64_t> result;
  result.reserve(array.values.size());
  for (std::size_t i = 0; i < array.values.size(); ++i) {
    int64_t n = 0;
    if (!integer_value(array.values[i], n))
      metadata_error(path_, key, "element #" + std::to_string(i) + ": expected an integer that fits in int64, found " +
                                     gguf_value_type_name(array.values[i]));
    result.push_back(n);
  }
  return result;
}

}  // namespace kvscope::model
