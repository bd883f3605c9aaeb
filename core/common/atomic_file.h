#pragma once
// Every file kvscope writes goes through here: a whole file at PATH or none, never written through a link
// and never over a file the caller did not agree to replace.
//
// The new file is created in a private folder beside the target, `.NAME.kvscope-XXXXXX.tmp/` (mode 0700, a
// random name made with mkdir, which never follows a link), as `NAME` inside it with O_CREAT | O_EXCL |
// O_NOFOLLOW (mode 0666 less the umask). Nothing another user or process creates beforehand can redirect
// it, and a library that opens files by name (HDF5) opens it inside that folder, where nobody else can put
// anything. commit() fsyncs the file, renames it to PATH and fsyncs PATH's folder:
//   - Existing::Refuse (no --force): the rename itself refuses an existing PATH (renameat2 RENAME_NOREPLACE,
//     or link + unlink where the file system lacks it), so no other writer can slip in between a check
//     and the write. A link at PATH, even a dangling one, is an existing PATH.
//   - Existing::Replace (--force): the rename replaces PATH; a link at PATH is replaced itself, and the file
//     it points to is never written.
// A failed or abandoned write (an exception, the destructor without commit) removes the folder and leaves
// any previous PATH untouched. A process killed mid-write leaves only `.NAME.kvscope-XXXXXX.tmp/`, a
// hidden folder that never passes for the output.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

enum class Existing { Refuse, Replace };

// The "--force" flag every command that writes a file takes.
inline Existing existing_policy(bool force) { return force ? Existing::Replace : Existing::Refuse; }

// Throws Error "<what> '<path>' already exists (pass --force to overwrite it)" when PATH (or a link at PATH)
// exists and `existing` is Refuse, and "... is a folder" whatever `existing` says. A command calls it before
// its run so that a refusal costs nothing; commit() refuses again, atomically.
void check_output_path(const std::filesystem::path& path, Existing existing, const std::string& what = "file");

class AtomicFile {
 public:
  // Creates the private folder and the empty file; throws Error "cannot write <what> '<path>': <reason>".
  AtomicFile(const std::filesystem::path& path, Existing existing, const std::string& what = "file");
  ~AtomicFile();  // without commit(): removes the file and its folder
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Where the file is being written, for a library that opens it by name (HDF5 with H5F_ACC_TRUNC): inside
  // the private folder, so the name cannot be redirected.
  std::filesystem::path temp_path() const;
  // Appends bytes; throws Error naming PATH (disk full ...).
  void write(std::string_view bytes);
  // fsync, rename into place (as `existing` says), fsync the folder. Throws Error naming PATH on failure,
  // after removing the temporary file; PATH is then as it was.
  void commit();
  // Removes the temporary file now (the destructor does the same).
  void abandon() noexcept;

 private:
  [[noreturn]] void fail(const std::string& reason);

  std::filesystem::path path_;
  Existing existing_;
  std::string what_;
  std::string dir_name_;   // the private folder's name in the target's folder
  std::string file_name_;  // the file's name in the private folder (and the target's)
  int parent_fd_ = -1, dir_fd_ = -1, fd_ = -1;
};

// The whole bytes through an AtomicFile. Throws Error "cannot write <what> '<path>': <reason>".
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, const std::string& what = "file",
                           Existing existing = Existing::Replace);

// Abandons every AtomicFile of the process that is not committed yet. For a process that is ending without
// unwinding (a user's plugin called exit()): its writers' destructors never run, and their temporary folders
// would stay. Never blocks: a writer another thread is creating at that moment is skipped.
void abandon_unfinished_files() noexcept;

// The temporary folders a killed writer of PATH left beside it (`.NAME.kvscope-*.tmp`).
std::vector<std::filesystem::path> leftover_temporary_folders(const std::filesystem::path& path);

}  // namespace kvscope
