#include "core/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/error.h"

namespace kvscope {

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, const std::string& what) {
  const std::filesystem::path partial = path.string() + ".partial";
  auto fail = [&](const std::string& reason) {
    std::error_code ec;
    std::filesystem::remove(partial, ec);
    throw Error("cannot write " + what + " '" + path.string() + "': " + reason);
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("it is a folder");
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string reason = std::strerror(errno);
    throw Error("cannot write " + what + " '" + path.string() + "': " + reason +
                " (check that the folder exists and is writable)");
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      fail(reason);
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const std::string sync_error = synced ? "" : std::strerror(errno);
  ::close(fd);
  if (!synced) fail(sync_error);
  std::filesystem::rename(partial, path, ec);
  if (ec) fail("renaming the finished file into place failed: " + ec.message());
}

}  // namespace kvscope
