"""--device on the command line: `kvscope info` lists CUDA devices or says why there are none; without a
device `--device cuda` is a clear error (exit 1, "no CUDA device: <reason>"), never a crash; with one it
generates. `--device cpu` generates in every build, the CUDA-enabled one included (a missing driver must not
break the CPU path). A cache type whose CUDA code has never run on a GPU is named in one warning line."""
import json
import os
import subprocess
import sys

from checks import FAILURES, check, passed

GENERATE = ["generate", "--prompt", "The capital of France is", "--max-new-tokens", "2"]


def main():
    binary = os.environ["KVSCOPE_BINARY"]
    info = subprocess.run([binary, "info", "--json"], capture_output=True, text=True)
    check(info.returncode == 0, f"info --json exits 0 (stderr: {info.stderr.strip()})")
    cuda = json.loads(info.stdout)["cuda"] if info.returncode == 0 else {"devices": [], "why_none": "?"}
    check(bool(cuda["devices"]) or bool(cuda["why_none"]), "info says why no CUDA device is listed")
    # --devices reads no model: it answers where the default model is missing.
    env = dict(os.environ, KVSCOPE_MODEL="/nonexistent/model.gguf")
    only = subprocess.run([binary, "info", "--devices", "--json"], capture_output=True, text=True, env=env)
    names = lambda c: ([(d["index"], d["name"]) for d in c["devices"]], c["why_none"])  # free memory may move
    check(only.returncode == 0 and names(json.loads(only.stdout)["cuda"]) == names(cuda),
          f"info --devices --json lists the same devices without a model (stderr: {only.stderr.strip()})")
    text = subprocess.run([binary, "info"], capture_output=True, text=True)
    check("cuda devices" in text.stdout, "info's text names the CUDA devices line")

    cpu = subprocess.run([binary, *GENERATE, "--device", "cpu"], capture_output=True, text=True)
    check(cpu.returncode == 0, f"generate --device cpu exits 0 (stderr: {cpu.stderr.strip()[-400:]})")
    check(len(cpu.stdout.strip()) > 0, "generate --device cpu prints text")

    gpu = subprocess.run([binary, *GENERATE, "--device", "cuda"], capture_output=True, text=True)
    if cuda["devices"]:
        check(gpu.returncode == 0, f"generate --device cuda exits 0 on a machine with a GPU (stderr: {gpu.stderr[-400:]})")
    elif cuda["built_with_cuda"]:
        check(gpu.returncode == 1, f"generate --device cuda without a GPU exits 1, not {gpu.returncode}")
        check("no CUDA device: " in gpu.stderr, f"the error names the missing device: {gpu.stderr.strip()}")
        check(cuda["why_none"] in gpu.stderr, "the error carries the runtime's reason that info reports")
    else:
        check(gpu.returncode == 1, f"generate --device cuda in a build without CUDA exits 1, not {gpu.returncode}")
        check("built without CUDA" in gpu.stderr, f"the error says the build has no CUDA: {gpu.stderr.strip()}")

    # A cache type whose CUDA code never ran on a GPU says so in one line, before the run (and before the missing
    # device's error); f32 on cuda, which ran on one, and q4_0 on cpu say nothing of the kind.
    warning = "has never run on one"
    q4 = subprocess.run([binary, *GENERATE, "--device", "cuda", "--cache-type", "q4_0"], capture_output=True, text=True)
    lines = [line for line in q4.stderr.splitlines() if warning in line]
    check(len(lines) == 1 and lines[0].startswith("kvscope: warning: --device cuda with cache type q4_0:"),
          f"--device cuda --cache-type q4_0 prints one warning line (stderr: {q4.stderr.strip()[-400:]})")
    kivi = subprocess.run([binary, *GENERATE, "--device", "cuda", "--cache-type", "kivi2"], capture_output=True,
                          text=True)
    lines = [line for line in kivi.stderr.splitlines() if warning in line]
    check(len(lines) == 1 and lines[0].startswith("kvscope: warning: --device cuda with cache type kivi2:"),
          f"--device cuda --cache-type kivi2 prints one warning line (stderr: {kivi.stderr.strip()[-400:]})")
    check(warning not in gpu.stderr, "--device cuda at f32 prints no such warning")
    q4_cpu = subprocess.run([binary, *GENERATE, "--device", "cpu", "--cache-type", "q4_0"], capture_output=True,
                            text=True)
    check(q4_cpu.returncode == 0 and warning not in q4_cpu.stderr, "--device cpu --cache-type q4_0 prints no warning")

    bad = subprocess.run([binary, *GENERATE, "--device", "tpu"], capture_output=True, text=True)
    check(bad.returncode == 2 and "tpu" in bad.stderr, f"an unknown device is a usage error naming it: {bad.stderr.strip()}")
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
