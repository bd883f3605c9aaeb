"""A trace damaged where issue 15's first crash was (a variable-length string read through the global heap,
H5HG_read's memcpy) must give a clean error naming the file, from `kvscope inspect`, `kvscope figure` and
the window, and the probe child on its own must die there: so the error is the probe's doing, not luck.

The file is made here with h5py: a kvscope-shaped trace whose root attribute `created_by` is a
variable-length string (as every string was before fixed-length strings), then the size field of that
string's object in the global heap collection ("GCOL") is overwritten with 256 MiB, so libhdf5 1.10 copies
256 MiB out of a 4 KiB heap. Also checks that the same file, undamaged, opens.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable.
`test_damaged_trace.py --write-damaged OUT` only writes the damaged file (the window's end-to-end test).
"""
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

FAILURES = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        FAILURES.append(what)


def write_trace(path):
    """The smallest file kvscope accepts as a trace: root attributes, one complete run with its shape."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_(b"kvscope-trace")  # fixed-length, as kvscope writes it
        f.attrs["format_version"] = np.int64(1)
        f.attrs["created_by"] = "a marker string in the global heap"  # h5py: variable-length UTF-8
        r = f.create_group("runs/tiny")
        for key, value in (("complete", 1), ("n_layers", 1), ("n_heads", 1), ("n_kv_heads", 1), ("head_dim", 4),
                           ("prompt_length", 2)):
            r.attrs[key] = np.int64(value)
        r.create_dataset("tokens/prompt_ids", data=np.array([1, 2], dtype=np.int32))


def damage_global_heap(path):
    data = bytearray(open(path, "rb").read())
    marker = b"a marker string in the global heap"
    at = data.find(marker)
    gcol = data.rfind(b"GCOL", 0, at)
    if at < 0 or gcol < 0:
        return False
    # Heap object header: index (2), reference count (2), reserved (4), size (8), then the data.
    size_at = at - 8
    (size,) = struct.unpack_from("<Q", data, size_at)
    if size != len(marker):
        return False
    struct.pack_into("<Q", data, size_at, 256 << 20)
    open(path, "wb").write(bytes(data))
    return True


def write_damaged_trace(path):
    write_trace(path)
    if not damage_global_heap(path):
        sys.exit(f"could not find the global heap object to damage in {path}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--write-damaged":  # for tests/e2e/gui_e2e_test.sh
        write_damaged_trace(sys.argv[2])
        return
    binary = os.environ.get("KVSCOPE_BINARY")
    if not binary or not os.path.exists(binary):
        print(f"KVSCOPE_BINARY is not set to an executable (got {binary!r})")
        sys.exit(2)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        good, bad = os.path.join(tmp, "good.h5"), os.path.join(tmp, "damaged.h5")
        write_trace(good)
        res = subprocess.run([binary, "inspect", good], capture_output=True, text=True, env=env)
        check(res.returncode == 0 and "run tiny" in res.stdout, f"the undamaged file opens ({res.stderr.strip()})")

        shutil.copy(good, bad)
        check(damage_global_heap(bad), "found the string's object in the global heap and damaged its size")

        probe = subprocess.run([binary, "__probe-trace", bad], capture_output=True, text=True, env=env)
        check(probe.returncode == -signal.SIGSEGV or probe.returncode == -signal.SIGBUS
              or "Sanitizer" in probe.stderr,
              f"libhdf5 crashes on it in the probe child (exit {probe.returncode}; last report: "
              f"{probe.stdout.strip().splitlines()[-1:]})")

        for name, cmd in (("inspect", [binary, "inspect", bad]),
                          ("figure", [binary, "figure", bad, "--out", os.path.join(tmp, "x.png")])):
            res = subprocess.run(cmd, capture_output=True, text=True, env=env)
            check(res.returncode == 1 and f"trace file '{bad}' is damaged" in res.stderr
                  and "cannot be opened safely" in res.stderr and "(attributes)" in res.stderr,
                  f"kvscope {name} refuses it cleanly (exit {res.returncode}): {res.stderr.strip()[-400:]}")

    print(f"test_damaged_trace: {len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
