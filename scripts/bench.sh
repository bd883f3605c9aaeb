#!/usr/bin/env bash
# Benchmarks (not part of make test): sets up the peers' venv, then runs each benchmark under bench/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build}"
venv="$root/.deps/bench-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  echo "bench: building llama-cpp-python from source (several minutes)"
  # llama.cpp's native build turns on AMX where /proc/cpuinfo lists it; its AMX matrix product crashes
  # (SIGSEGV in ggml_backend_amx_mul_mat, 0.3.36) on VMs that list AMX, so it is left out. Everything else
  # the CPU has (AVX-512, VNNI) stays on.
  CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    "$venv/bin/pip" install -q --no-cache-dir -r "$root/bench/requirements.txt"
fi
"$venv/bin/python" "$root/bench/engine_vs_llamacpp.py" --kvscope "$root/$build/app/kvscope" --threads "$(nproc)"
"$venv/bin/python" "$root/bench/engine_vs_llamacpp.py" --kvscope "$root/$build/app/kvscope" --threads 1
"$root/.deps/venv/bin/python" "$root/bench/trace_overhead.py" --build "$root/$build"
"$root/.deps/venv/bin/python" "$root/bench/sweep_speed.py" --build "$root/$build"
