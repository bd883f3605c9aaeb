#!/bin/bash
# Where a decode step's host time goes on a GPU machine that has cuda-gdb but no perf or Nsight Systems: a poor
# man's sampler that attaches to a running `kvscope generate --device cuda` every few hundred ms and keeps the
# main thread's innermost frames; the most frequent frames are where the host waits or works.
#   tests/gpu/sample_host_stacks.sh KVSCOPE MODEL PROMPT_FILE SAMPLES [generate options...] > stacks.txt
set -u
binary=$1 model=$2 prompt=$3 samples=$4
shift 4
"$binary" generate --device cuda --model "$model" --prompt-file "$prompt" --max-new-tokens 4000 --ignore-eos \
  "$@" > /dev/null 2>&1 &
pid=$!
sleep 5  # loading, uploading and the prefill: the samples should see decode steps
for i in $(seq "$samples"); do
  kill -0 "$pid" 2>/dev/null || break
  echo "--- sample $i"
  timeout 30 cuda-gdb -q -nx -batch -p "$pid" -ex "thread 1" -ex "bt 14" 2>/dev/null | grep -E "^#[0-9]+ " |
    sed -E 's/ \(.*\) at / at /; s/0x[0-9a-f]+ in //' | cut -c1-160
done
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
