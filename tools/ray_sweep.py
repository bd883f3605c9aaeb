"""Thin Ray driver for `kvscope sweep --ray ADDRESS`.

kvscope starts this script as a batch worker: it reads cell indices on stdin (one per line, until EOF),
submits each cell as a Ray task that runs the same kvscope command (`... sweep <flags> --serve`) with that
one index on stdin, and writes every task's JSON row to stdout as soon as it finishes. kvscope itself
persists the rows, so results land in the same CSV/HDF5 files and resume the same way as local runs.

Every node must see the kvscope binary, the model and the prompt files at the same paths (a shared file
system, or the same image on every node). Usage (normally via kvscope):
    python tools/ray_sweep.py --address HOST:PORT -- /path/to/kvscope sweep ... --serve
Ray is pinned in tools/requirements-ray.txt and only needed for this mode.
"""
import argparse
import json
import os
import socket
import subprocess
import sys

# ray.init retries an address where nothing listens for over 100 s; a plain connection says so in seconds.
CONNECT_TIMEOUT_S = 5.0


def unreachable(address):
    """Why HOST:PORT takes no connection, or None (also for 'auto' and ray:// addresses, which Ray resolves)."""
    if address == "auto" or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"'{address}' is not HOST:PORT (expected e.g. 10.0.0.5:6379, 'auto' or ray://HOST:PORT)"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as e:
        return f"nothing at {address} takes a connection ({e.strerror or e}; tried for up to {CONNECT_TIMEOUT_S:.0f} s)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="Ray cluster address (HOST:PORT), or 'auto'")
    parser.add_argument("--num-cpus", type=float, default=1.0, help="CPUs each cell task reserves")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- kvscope sweep ... --serve")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no kvscope command after --")

    why = unreachable(args.address)
    if why:
        sys.stderr.write(f"kvscope ray driver: cannot reach the Ray cluster: {why}; start one with `ray start --head` "
                         "or pass the address `ray status` prints\n")
        return 4

    # Rows go to the real stdout; anything Ray prints (to Python's or the C library's stdout) goes to stderr.
    rows = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        import ray
    except ImportError:
        sys.stderr.write("kvscope ray driver: Ray is not installed in this Python "
                         f"({sys.executable}); pip install -r tools/requirements-ray.txt, "
                         "or pass --ray-python PATH\n")
        return 3

    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)

    @ray.remote(num_cpus=args.num_cpus, max_retries=1)
    def run_cell(cell):
        # One cell per task: the task's process loads the model, computes the reference and the cell.
        done = subprocess.run(command, input=f"{cell}\n", capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or len(lines) != 1:
            return {"cell": cell, "error": f"task exited {done.returncode}: {done.stderr.strip()[-500:]}"}
        return json.loads(lines[0])

    cells = [int(line) for line in sys.stdin if line.strip()]
    pending = [run_cell.remote(c) for c in cells]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for ref in ready:
            rows.write(json.dumps(ray.get(ref)) + "\n")
            rows.flush()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
