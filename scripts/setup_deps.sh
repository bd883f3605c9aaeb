#!/usr/bin/env bash
# Installs everything kvscope needs on a fresh Debian machine, doing only what is missing:
# apt packages, a project-local Python venv with pinned PyPI packages, and the default model file.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="$root/.deps"
mkdir -p "$deps"

apt_packages=(cmake g++ make pkg-config libopenblas-dev libhdf5-dev catch2 nlohmann-json3-dev
              libcli11-dev libssl-dev libdeflate-dev zlib1g-dev libglfw3-dev libgl-dev libstb-dev fonts-dejavu-core xvfb xauth xdotool imagemagick librsvg2-bin python3-venv
              python3-dev pybind11-dev python3-numpy python3-jinja2 ccache)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The embedded Python's own packages (transformers, which tokenizes Hugging Face folders), in a venv of
# Debian's python3 that sees its numpy and jinja2. kvscope finds it beside its sources (core/python).
embedded_venv="$deps/embedded-venv"
embedded_req="$root/scripts/requirements-embedded.txt"
embedded_want="$(sha256sum "$embedded_req" | cut -d' ' -f1)"
if [ ! -x "$embedded_venv/bin/python" ] || [ "$(cat "$embedded_venv/.requirements.sha256" 2>/dev/null)" != "$embedded_want" ]; then
  echo "setup: creating $embedded_venv (transformers for the embedded Python)"
  rm -rf "$embedded_venv"
  /usr/bin/python3 -m venv --system-site-packages "$embedded_venv"
  "$embedded_venv/bin/pip" install -q --disable-pip-version-check -r "$embedded_req"
  echo "$embedded_want" > "$embedded_venv/.requirements.sha256"
fi

# `make run` (KVSCOPE_SETUP=run) needs the model and the GUI sources only: the venvs below serve tests and tools.
if [ "${KVSCOPE_SETUP:-all}" = "run" ]; then
  "$root/scripts/fetch_model.sh"
  "$root/scripts/fetch_imgui.sh"
  exit 0
fi

# Pinned PyPI packages for tests and tools, in a venv that never touches the system Python.
venv="$deps/venv"
req="$root/scripts/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi

# Ray, only for `kvscope sweep --ray` and its test, in a venv of its own: it is large (about 280 MB,
# two minutes to install here), so KVSCOPE_NO_RAY=1 skips it and the Ray test then reports itself skipped.
ray_venv="$deps/ray-venv"
ray_req="$root/tools/requirements-ray.txt"
ray_want="$(sha256sum "$ray_req" | cut -d' ' -f1)"
if [ "${KVSCOPE_NO_RAY:-0}" != "1" ] && { [ ! -x "$ray_venv/bin/python" ] || [ "$(cat "$ray_venv/.requirements.sha256" 2>/dev/null)" != "$ray_want" ]; }; then
  echo "setup: creating $ray_venv (Ray for sweep --ray; KVSCOPE_NO_RAY=1 skips it)"
  python3 -m venv "$ray_venv"
  "$ray_venv/bin/pip" install -q --disable-pip-version-check -r "$ray_req"
  echo "$ray_want" > "$ray_venv/.requirements.sha256"
fi

"$root/scripts/fetch_model.sh"
"$root/scripts/fetch_imgui.sh"
