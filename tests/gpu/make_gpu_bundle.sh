#!/bin/bash
# Packs a CUDA-enabled build for a GPU machine that has the NVIDIA driver, CUDA's cuBLAS and Python (h5py, numpy)
# but neither kvscope's build dependencies nor a network: the stripped binaries and every shared library they
# link except glibc's (the machine's own copy of a library wins there: tests/gpu/run_on_gpu_machine.sh), xz'd, and
# the default model xz'd in two parts so that each part fits a transfer of at most 64 MiB with the bundle.
#   tests/gpu/make_gpu_bundle.sh [OUTDIR (default .gpu)]   -> OUTDIR/bundle.tar.xz, OUTDIR/model.xz.part-{a,b}
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/.gpu}
model=${KVSCOPE_MODEL:-$root/.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$out"
binaries=("$root/build/app/kvscope" "$root/build/tests/gpu/test_gpu_kernels")
cp "${binaries[@]}" "$stage/bin/"
strip "$stage"/bin/*
# glibc's libraries stay the machine's: a newer glibc runs programs built against this one.
for lib in $(for b in "${binaries[@]}"; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u |
             grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so'); do
  cp -L "$lib" "$stage/lib/"
done
tar -C "$stage" -cJf "$out/bundle.tar.xz" bin lib
# The model's parts are made once (kept while the model's SHA-256 is the one recorded).
if [ -f "$out/model.sha256" ] && [ "$(sha256sum "$model" | awk '{print $1}')" = "$(cat "$out/model.sha256")" ] &&
   [ -f "$out/model.xz.part-a" ] && [ -f "$out/model.xz.part-b" ]; then ls -l "$out"; exit 0; fi
xz -T0 -c "$model" > "$stage/model.xz"
sha256sum "$model" | awk '{print $1}' > "$out/model.sha256"
half=$(( $(stat -c %s "$stage/model.xz") / 2 ))
head -c "$half" "$stage/model.xz" > "$out/model.xz.part-a"
tail -c +"$((half + 1))" "$stage/model.xz" > "$out/model.xz.part-b"
ls -l "$out"
