#include "core/common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/common/error.h"

namespace kvscope {

MappedFile MappedFile::open(const std::filesystem::path& path, const std::string& kind) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(name + ": cannot open " + kind + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(name + ": cannot stat " + kind + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(name + ": not a regular file (expected a " + kind + ")");
  }
  if (st.st_size == 0) {
    ::close(fd);
    throw Error(name + ": file is empty (expected a " + kind + ")");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  void* mapping = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) throw Error(name + ": cannot memory-map " + kind + ": " + std::strerror(map_errno));
  MappedFile file;
  file.mapping_ = mapping;
  file.size_ = size;
  return file;
}

MappedFile MappedFile::copy_of(const uint8_t* data, std::size_t size) {
  MappedFile file;
  file.owned_.assign(data, data + size);
  file.size_ = size;
  return file;
}

void MappedFile::release() {
  if (mapping_) ::munmap(mapping_, static_cast<std::size_t>(size_));
  mapping_ = nullptr;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)), size_(other.size_), owned_(std::move(other.owned_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    mapping_ = std::exchange(other.mapping_, nullptr);
    size_ = other.size_;
    owned_ = std::move(other.owned_);
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

}  // namespace kvscope
