"""`kvscope sweep --ray` against a local Ray head started here on 127.0.0.1: the rows equal a `--workers 1`
run of the same grid, and the head is stopped afterwards. Ray comes from .deps/ray-venv (scripts/setup_deps.sh,
tools/requirements-ray.txt) or $KVSCOPE_RAY_PYTHON; without it the test exits 77 (skipped).
"""
import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

BINARY = os.environ.get("KVSCOPE_BINARY", "")
SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
GRID = ["--policies", "full,streaming_llm", "--budgets", "50%", "--eval", "fidelity", "--max-new-tokens", "3",
        "--prompt", "The river rose eleven feet in a night and carried away the mill, the sheep and the bridge."]


def rows(out):
    with open(os.path.join(out, "rows.csv"), newline="") as f:
        return {int(r["cell"]): {k: v for k, v in r.items() if k != "run_ms"} for r in csv.DictReader(f)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    python = os.environ.get("KVSCOPE_RAY_PYTHON") or os.path.join(SOURCE, ".deps", "ray-venv", "bin", "python")
    ray_cli = os.path.join(os.path.dirname(python), "ray")
    if not os.path.exists(python) or not os.path.exists(ray_cli):
        print(f"SKIP: no Ray at {python} (run scripts/setup_deps.sh without KVSCOPE_NO_RAY=1)")
        return 77
    # ctest's timeout sends SIGTERM: turn it into an exception so the head is still stopped below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    root = tempfile.mkdtemp(prefix="kvscope_ray_")
    port = free_port()
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    start = subprocess.run([ray_cli, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                            "--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats",
                            "--temp-dir", os.path.join(root, "ray")], capture_output=True, text=True, env=env)
    failures = []
    try:
        if start.returncode != 0:
            print(f"FAIL: ray start exited {start.returncode}: {start.stderr[-600:]}")
            return 1
        local = os.path.join(root, "local")
        res = subprocess.run([BINARY, "sweep", "--out", local, *GRID, "--workers", "1"], capture_output=True, text=True,
                             timeout=400)
        if res.returncode != 0:
            failures.append(f"--workers 1 sweep exited {res.returncode}: {res.stderr[-400:]}")
        remote = os.path.join(root, "ray_out")
        res = subprocess.run([BINARY, "sweep", "--out", remote, *GRID, "--ray", f"127.0.0.1:{port}",
                              "--ray-python", python], capture_output=True, text=True, env=env, timeout=400)
        if res.returncode != 0:
            failures.append(f"--ray sweep exited {res.returncode}: {res.stderr[-800:]}")
        elif rows(remote) != rows(local) or len(rows(local)) != 2:
            failures.append(f"Ray rows differ from --workers 1 rows:\n{rows(remote)}\n{rows(local)}")
    finally:
        subprocess.run([ray_cli, "stop"], capture_output=True, env=env)
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print(f"FAIL: {f}")
    print(f"{2 - len(failures)} checks passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
