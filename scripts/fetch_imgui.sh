#!/usr/bin/env bash
# Fetches Dear ImGui (docking branch, 1.93.0) and ImPlot sources for the GUI from the pinned PyPI sdist of
# imgui-bundle, which vendors both under external/. Only the C++ sources we compile are extracted, into
# .deps/imgui (never in git). The sdist's checksum is pinned so a changed upload cannot slip in.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="$root/.deps/imgui"
package="imgui-bundle==1.93.0"
file="imgui_bundle-1.93.0.tar.gz"
sha="10ad1dab8258a6787b4f07bb926b08d0efc648a7906242568c8dd778c5e719bf"
stamp="$target/.sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha" ] && [ -f "$target/imgui/imgui.h" ] && [ -f "$target/implot/implot.h" ]; then
  exit 0
fi

cache="$root/.deps/downloads"
mkdir -p "$cache"
archive="$cache/$file"
if ! { [ -f "$archive" ] && echo "$sha  $archive" | sha256sum -c --status; }; then
  rm -f "$archive"
  echo "setup: downloading $package (Dear ImGui + ImPlot sources)"
  pip=(python3 -m pip)
  [ -x "$root/.deps/venv/bin/pip" ] && pip=("$root/.deps/venv/bin/pip")
  # The sdist (its wheels carry only compiled Python modules). --no-binary for this package alone: its
  # build tools then come as wheels (with :all: pip built them from source, minutes on a fresh machine).
  "${pip[@]}" download -q --disable-pip-version-check --no-deps --no-binary imgui-bundle -d "$cache" "$package"
fi
if ! echo "$sha  $archive" | sha256sum -c --status; then
  echo "setup: checksum mismatch for $file (expected sha256 $sha)" >&2
  rm -f "$archive"
  exit 1
fi

tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
top="imgui_bundle-1.93.0/external"
# The bundle's imgui fork includes imgui_stacklayout.* from imgui.h, so every top-level file is needed.
tar -xzf "$archive" -C "$tmp" --wildcards --no-wildcards-match-slash \
  "$top/imgui/imgui/*.h" "$top/imgui/imgui/*.cpp" "$top/imgui/imgui/LICENSE.txt" \
  "$top/imgui/imgui/backends/imgui_impl_glfw.*" "$top/imgui/imgui/backends/imgui_impl_opengl3*" \
  "$top/implot/implot/*.h" "$top/implot/implot/*.cpp" "$top/implot/implot/LICENSE"
rm -rf "$target"
mkdir -p "$target"
mv "$tmp/$top/imgui/imgui" "$target/imgui"
mv "$tmp/$top/implot/implot" "$target/implot"
echo "$sha" > "$stamp"
echo "setup: Dear ImGui and ImPlot sources ready in $target"
