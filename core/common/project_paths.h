#pragma once
// Where kvscope looks for what `make` set up beside it (.deps/...): under the source tree it was built from,
// then beside an installed binary (<prefix>/bin/kvscope) and beside a build-tree one (<source>/build/app/kvscope).
#include <filesystem>
#include <vector>

namespace kvscope {

// The candidates for `relative` (e.g. ".deps/models/x.gguf"), most likely first; none is checked to exist.
std::vector<std::filesystem::path> project_path_candidates(const std::filesystem::path& relative);

}  // namespace kvscope
