#include "core/common/atomic_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "core/common/error.h"

namespace kvscope {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int error) { return std::strerror(error); }

fs::path folder_of(const fs::path& path) { return path.has_parent_path() ? path.parent_path() : fs::path("."); }

std::string already_exists(const std::string& what, const fs::path& path) {
  return what + " '" + path.string() + "' already exists (pass --force to overwrite it)";
}

// Six letters and digits from the kernel's random source: nobody can guess the private folder's name
// ahead of it (and mkdir refuses a name that exists anyway).
std::string random_suffix() {
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  unsigned char bytes[6] = {};
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("getrandom failed: " + errno_text(errno));
    got += static_cast<std::size_t>(n);
  }
  std::string out;
  for (unsigned char b : bytes) out += kLetters[b % (sizeof kLetters - 1)];
  return out;
}

std::string temporary_prefix(const std::string& name) { return "." + name + ".kvscope-"; }

// The writers not yet committed or abandoned, for abandon_unfinished_files(). Never destroyed: an exit
// handler may read them after static destructors would have run.
std::mutex& unfinished_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::set<AtomicFile*>& unfinished() {
  static auto* files = new std::set<AtomicFile*>;
  return *files;
}

}  // namespace

void check_output_path(const fs::path& path, Existing existing, const std::string& what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // absent (a missing folder is reported when the file is created)
  if (S_ISDIR(st.st_mode)) throw Error("cannot write " + what + " '" + path.string() + "': it is a folder");
  if (existing == Existing::Refuse) throw Error(already_exists(what, path));
}

AtomicFile::AtomicFile(const fs::path& path, Existing existing, const std::string& what)
    : path_(path), existing_(existing), what_(what), file_name_(path.filename().string()) {
  auto refuse = [&](const std::string& reason) {
    throw Error("cannot write " + what_ + " '" + path_.string() + "': " + reason);
  };
  if (file_name_.empty() || file_name_ == "." || file_name_ == "..") refuse("it is a folder");
  check_output_path(path_, existing_, what_);
  const fs::path folder = folder_of(path_);
  parent_fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd_ < 0)
    refuse(errno == ENOENT ? "the folder '" + folder.string() + "' does not exist"
                           : errno_text(errno) + " (check that the folder '" + folder.string() + "' is writable)");
  for (int attempt = 0;; ++attempt) {
    dir_name_ = temporary_prefix(file_name_) + random_suffix() + ".tmp";
    if (::mkdirat(parent_fd_, dir_name_.c_str(), 0700) == 0) break;
    const int error = errno;
    if (error == EEXIST && attempt < 100) continue;
    dir_name_.clear();
    ::close(parent_fd_);
    parent_fd_ = -1;
    refuse(errno_text(error) +
           (error == EEXIST ? "" : " (check that the folder '" + folder.string() + "' is writable)"));
  }
  dir_fd_ = ::openat(parent_fd_, dir_name_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd_ >= 0)
    fd_ = ::openat(dir_fd_, file_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd_ < 0) fail(errno_text(errno));
  const std::lock_guard lock(unfinished_mutex());
  unfinished().insert(this);
}

AtomicFile::~AtomicFile() {
  abandon();
  const std::lock_guard lock(unfinished_mutex());
  unfinished().erase(this);
}

void abandon_unfinished_files() noexcept {
  std::unique_lock lock(unfinished_mutex(), std::try_to_lock);
  if (!lock.owns_lock()) return;
  for (AtomicFile* file : unfinished()) file->abandon();
}

fs::path AtomicFile::temp_path() const { return folder_of(path_) / dir_name_ / file_name_; }

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (dir_fd_ >= 0) {
    ::unlinkat(dir_fd_, file_name_.c_str(), 0);
    ::close(dir_fd_);
    dir_fd_ = -1;
  }
  if (parent_fd_ >= 0) {
    if (!dir_name_.empty()) ::unlinkat(parent_fd_, dir_name_.c_str(), AT_REMOVEDIR);
    ::close(parent_fd_);
    parent_fd_ = -1;
  }
}

void AtomicFile::fail(const std::string& reason) {
  abandon();
  throw Error("cannot write " + what_ + " '" + path_.string() + "': " + reason);
}

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0) throw Error("cannot write " + what_ + " '" + path_.string() + "': it is already closed");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno_text(errno) : "nothing was written (disk full?)");
    done += static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error("cannot write " + what_ + " '" + path_.string() + "': it is already closed");
  // A library that wrote the file by name (HDF5) may have replaced it: only our own regular file goes in place.
  struct stat ours {
  }, named{};
  if (::fstat(fd_, &ours) != 0 || ::fstatat(dir_fd_, file_name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
      ours.st_ino != named.st_ino || ours.st_dev != named.st_dev || !S_ISREG(named.st_mode))
    fail("the temporary file '" + temp_path().string() + "' was replaced while it was written");
  if (::fsync(fd_) != 0) fail(errno_text(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail(errno_text(errno));
  }
  fd_ = -1;
  const char* from = file_name_.c_str();
  if (existing_ == Existing::Replace) {
    if (::renameat(dir_fd_, from, parent_fd_, from) != 0) {
      const int error = errno;
      fail(error == EISDIR ? "it is a folder" : "renaming the finished file into place failed: " + errno_text(error));
    }
  } else if (::renameat2(dir_fd_, from, parent_fd_, from, RENAME_NOREPLACE) != 0) {
    int error = errno;
    if (error == EINVAL || error == ENOSYS) {
      // A file system without RENAME_NOREPLACE: a hard link refuses an existing name as atomically.
      error = ::linkat(dir_fd_, from, parent_fd_, from, 0) == 0 ? 0 : errno;
      if (error == 0) ::unlinkat(dir_fd_, from, 0);
    }
    if (error == EEXIST) {
      abandon();
      throw Error(already_exists(what_, path_));
    }
    if (error != 0) fail("renaming the finished file into place failed: " + errno_text(error));
  }
  // The rename is durable once the folder's entry is: a crash after this returns keeps the new file.
  const bool synced = ::fsync(parent_fd_) == 0;
  const int error = errno;
  abandon();
  if (!synced && error != EINVAL)
    throw Error("cannot write " + what_ + " '" + path_.string() + "': syncing its folder failed: " + errno_text(error));
}

void write_file_atomically(const fs::path& path, std::string_view bytes, const std::string& what, Existing existing) {
  AtomicFile file(path, existing, what);
  file.write(bytes);
  file.commit();
}

std::vector<fs::path> leftover_temporary_folders(const fs::path& path) {
  std::vector<fs::path> out;
  const std::string prefix = temporary_prefix(path.filename().string());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_of(path), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0)
      out.push_back(entry.path());
  }
  return out;
}

}  // namespace kvscope
