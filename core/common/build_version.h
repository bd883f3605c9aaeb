#pragma once
// Provenance of this build, stamped into traces and `--version`. Defined in a file generated at build
// time (cmake/write_build_version.cmake) so that a new commit recompiles only that file.

namespace kvscope {

const char* build_version();     // the project version from CMakeLists.txt
const char* build_git_commit();  // short hash, "-dirty" when tracked files differ from it, or "unknown"

}  // namespace kvscope
