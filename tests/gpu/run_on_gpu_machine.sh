#!/bin/bash
# Runs the GPU checks on a machine with an NVIDIA GPU from a bundle of tests/gpu/make_gpu_bundle.sh, writing logs to
# $OUT (or ./gpu-out). Stages, so that a bundle can arrive in two transfers:
#   kernels  unpack the bundle, list the device, run test_gpu_kernels (and its KIVI cases, "[kivi]", apart: never
#            run before) and CUDA generates (f32, f16, bf16 caches) on a tiny fixture model
#   model    join the model's parts (this transfer's .gpu/model.xz.part-b and the part-a kept from the first), then
#            tests/gpu/cuda_vs_cpu_model.py, tests/gpu/cuda_vs_cpu_policies.py, tests/gpu/cuda_vs_cpu_cache_types.py
#            and bench/gpu_bench.py
#   window   the window on --device cuda by script under Xvfb (Xvfb and Mesa from the Debian packages in
#            .gpu/xdebs/ and the libraries they link in .gpu/xlibs.tar.xz, unpacked under /tmp/xroot; a tiny
#            fixture model), its screenshots in $OUT
# usage: tests/gpu/run_on_gpu_machine.sh kernels|model|window|all
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
stage=${1:-all}
out=${OUT:-$root/gpu-out}
keep=/tmp/kvscope-gpu   # outlives one transfer on a machine kept warm between two
mkdir -p "$out" "$keep"
if [ ! -x "$keep/bin/kvscope" ] && [ -f "$root/.gpu/bundle.tar.xz" ]; then tar -C "$keep" -xJf "$root/.gpu/bundle.tar.xz"; fi
[ -f "$root/.gpu/model.xz.part-a" ] && cp "$root/.gpu/model.xz.part-a" "$root/.gpu/model.sha256" "$keep/"
if [ ! -x "$keep/bin/kvscope" ]; then echo "no bundle: neither .gpu/bundle.tar.xz nor an earlier unpacked one"; exit 1; fi
# Our copy of a library only where the machine has none of that soname.
mkdir -p "$keep/uselib"
for lib in "$keep"/lib/*; do
  name=$(basename "$lib")
  ldconfig -p | grep -q "^[[:space:]]*$name " || ln -sf "$lib" "$keep/uselib/$name"
done
export LD_LIBRARY_PATH=$keep/uselib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -z "${KVSCOPE_CUBLAS_LIBRARY:-}" ] && ! ldconfig -p | grep -q 'libcublas\.so\.13 '; then
  KVSCOPE_CUBLAS_LIBRARY=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublas.so.13*' 2>/dev/null | sort | head -1)
  export KVSCOPE_CUBLAS_LIBRARY
fi
export KVSCOPE_BINARY=$keep/bin/kvscope PYTHONUNBUFFERED=1
echo "cuBLAS: ${KVSCOPE_CUBLAS_LIBRARY:-from the loader path}; our libraries used: $(ls "$keep/uselib" | tr '\n' ' ')"
missing=$(ldd "$KVSCOPE_BINARY" | grep 'not found'); [ -n "$missing" ] && echo "missing libraries: $missing"
python=$(command -v python3)

if [ "$stage" = kernels ] || [ "$stage" = all ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/nvidia-smi.txt"
  "$KVSCOPE_BINARY" info --devices --json > "$out/info.json" 2>&1; tail -c 600 "$out/info.json"; echo
  timeout 300 "$keep/bin/test_gpu_kernels" --durations yes > "$out/test_gpu_kernels.log" 2>&1
  echo "test_gpu_kernels exit $?"; grep -E "FAILED|passed|failed|SKIPPED|assertions" "$out/test_gpu_kernels.log" | tail -40
  # The KIVI cache on the device (kivi_cache_gpu.cpp) against its host references: its own log and exit status.
  timeout 120 "$keep/bin/test_gpu_kernels" "[kivi]" --durations yes > "$out/test_gpu_kivi.log" 2>&1
  echo "test_gpu_kernels [kivi] exit $?"; grep -E "FAILED|passed|failed|assertions" "$out/test_gpu_kivi.log" | tail -20
  tiny=$root/tests/fixtures/hf_synthetic/llama3.gguf
  # The fixture's head_dim (14) takes f32, f16 and bf16 only; the block formats run in the model stage.
  for cache in f32 f16 bf16; do
    for device in cpu cuda; do
      timeout 120 "$KVSCOPE_BINARY" generate --device "$device" --model "$tiny" --prompt "The lighthouse keeper" \
        --max-new-tokens 12 --cache-type "$cache" --json > "$out/tiny_${cache}_$device.json" 2> "$out/tiny_${cache}_$device.err"
      status=$?
      summary=$("$python" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["generated_tokens"], [round(x, 4) for x in j["logprobs"]])' "$out/tiny_${cache}_$device.json" 2>&1 | tail -1)
      echo "tiny $cache $device exit $status: $summary $(tail -c 300 "$out/tiny_${cache}_$device.err")"
    done
  done
fi

if [ "$stage" = model ] || [ "$stage" = all ]; then
  mkdir -p "$root/.deps/models"
  model=$root/.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf
  cat "$keep/model.xz.part-a" "$root/.gpu/model.xz.part-b" | xz -d > "$model" || { echo "model parts missing"; exit 1; }
  [ "$(sha256sum "$model" | cut -d' ' -f1)" = "$(cat "$keep/model.sha256")" ] || { echo "model SHA-256 differs"; exit 1; }
  export KVSCOPE_MODEL=$model OMP_WAIT_POLICY=passive
  timeout 240 "$python" "$root/tests/gpu/cuda_vs_cpu_model.py" --kvscope "$KVSCOPE_BINARY" --model "$model" \
    --out "$out/model" 2>&1 | tee "$out/cuda_vs_cpu_model.log" | grep -v "^ok"
  echo "cuda_vs_cpu_model exit ${PIPESTATUS[0]}"
  KVSCOPE_SOURCE_DIR=$root timeout 150 "$python" "$root/tests/gpu/cuda_vs_cpu_policies.py" > "$out/policies.log" 2>&1
  echo "cuda_vs_cpu_policies exit $?"; grep -v "^ok" "$out/policies.log" | tail -20
  # The quantized cache types on the device (never run on a GPU before this): greedy tokens and bytes vs the CPU.
  timeout 150 "$python" "$root/tests/gpu/cuda_vs_cpu_cache_types.py" --kvscope "$KVSCOPE_BINARY" \
    > "$out/cache_types.log" 2>&1
  echo "cuda_vs_cpu_cache_types exit $?"; tail -20 "$out/cache_types.log"
  timeout 200 "$python" "$root/bench/gpu_bench.py" --kvscope "$KVSCOPE_BINARY" --model "$model" \
    --lengths 1024,4096,8000 2>&1 | tee "$out/gpu_bench.log"
fi

if [ "$stage" = window ]; then
  # Two transfers when they do not fit one: .gpu/xlibs.tar.xz (the libraries Xvfb, xkbcomp and Mesa link, from
  # the build machine) with the bundle, then .gpu/xdebs/*.deb (Xvfb, xkbcomp, xkb data, Mesa); both kept in $x.
  x=/tmp/xroot
  mkdir -p "$x/missing"
  [ -f "$root/.gpu/xlibs.tar.xz" ] && tar -C "$x" -xJf "$root/.gpu/xlibs.tar.xz"
  for deb in "$root"/.gpu/xdebs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" "$x"; done
  if [ ! -x "$x/usr/bin/Xvfb" ]; then echo "window: Xvfb not here yet (the packages come with the next transfer)"; exit 0; fi
  for lib in "$x"/xlibs/*; do
    name=$(basename "$lib")
    ldconfig -p | grep -q "^[[:space:]]*$name " || ln -sf "$lib" "$x/missing/$name"
  done
  # Xvfb runs xkbcomp from /usr/bin and reads /usr/share/X11/xkb, paths compiled in: linked where missing.
  [ -e /usr/bin/xkbcomp ] || ln -s "$x/usr/bin/xkbcomp" /usr/bin/xkbcomp
  [ -e /usr/share/X11/xkb ] || { mkdir -p /usr/share/X11 && ln -s "$x/usr/share/X11/xkb" /usr/share/X11/xkb; }
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$x/usr/lib/x86_64-linux-gnu:$x/missing
  export LIBGL_DRIVERS_PATH=$x/usr/lib/x86_64-linux-gnu/dri
  "$x/usr/bin/Xvfb" :7 -screen 0 1600x1000x24 -nolisten tcp > "$out/xvfb.log" 2>&1 &
  sleep 3
  export DISPLAY=:7
  cat > /tmp/window.kvs <<SCRIPT
prompt The lighthouse keeper wrote the weather in his log every night: wind, swell, and the ships that passed the rocks.
policy h2o
budget 50%
tokens 8
run
wait 300
screenshot $out/window_cuda_b50.png
budget 25%
run
wait 300
screenshot $out/window_cuda_b25.png
save /tmp/window_runs.h5
wait 300
quit
SCRIPT
  timeout 240 "$KVSCOPE_BINARY" gui --device cuda --model "$root/tests/fixtures/hf_synthetic/llama3.gguf" \
    --script /tmp/window.kvs --width 1600 --height 1000 > "$out/window.log" 2>&1
  echo "window exit $?"; tail -5 "$out/window.log"; tail -3 "$out/xvfb.log"
  [ -f /tmp/window_runs.h5 ] && "$python" -c 'import h5py,sys; f=h5py.File(sys.argv[1]); [print(n, dict(f["runs"][n].attrs)) for n in f["runs"]]' /tmp/window_runs.h5 | cut -c1-400
fi
