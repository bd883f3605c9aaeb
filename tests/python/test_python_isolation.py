"""The embedded Python runs no code from the current directory or a model's folder, and keeps the standard
library it was built with whatever the environment says (issue 34, items 1 and 7).

A downloaded model folder is untrusted input: modules named like the ones kvscope imports (transformers, re,
jinja2, numpy, json) are planted in a copy of a tiny Hugging Face folder and in the working directory, each
leaving a marker file when imported. Every Python feature is then run from there (tokenize, generate --chat,
a python: policy): the commands succeed and no marker appears. Then a fake `python3` with a broken standard
library comes first on PATH, and PYTHONHOME / PYTHONPATH point at junk: Python features still work."""
import os
import shutil
import stat
import subprocess
import sys

from checks import check, run_in_temp_folder

SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("KVSCOPE_BINARY", "")
TINY_MODEL = os.path.join(SOURCE, "tests", "fixtures", "hf_synthetic", "llama3")
PLANTED = ["transformers", "re", "jinja2", "numpy", "json", "tokenizers", "encodings", "site"]

POLICY = "def score(obs):\n    return -obs.positions.astype('float32')\n"


def plant(folder, markers, names=PLANTED):
    """Modules that, imported, write markers/NAME and refuse to load."""
    for name in names:
        with open(os.path.join(folder, name + ".py"), "w") as f:
            f.write(f"open({os.path.join(markers, name)!r}, 'w').write('imported from ' + __file__)\n"
                    f"raise ImportError('planted {name} ran')\n")


def run(args, cwd, env=None):
    return subprocess.run([BINARY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def python_features(cwd, env, label, markers):
    """Each Python feature from `cwd` (the model folder copy is `.` or given by path) succeeds, planting nothing."""
    model = "." if os.path.exists(os.path.join(cwd, "config.json")) else os.path.join(cwd, "model")
    res = run(["tokenize", "--model", model, "hello"], cwd, env)
    check(res.returncode == 0, f"{label}: tokenize --model {model} succeeds ({res.returncode}: {res.stderr.strip()[-400:]})")
    res = run(["generate", "--model", model, "--chat", "--prompt", "hello", "--max-new-tokens", "2"], cwd, env)
    check(res.returncode == 0, f"{label}: generate --chat succeeds ({res.returncode}: {res.stderr.strip()[-400:]})")
    res = run(["generate", "--model", model, "--prompt", "hello there, a few more tokens", "--max-new-tokens", "2",
               "--policy", "python:policy.py", "--budget", "4"], cwd, env)
    check(res.returncode == 0, f"{label}: a python: policy runs ({res.returncode}: {res.stderr.strip()[-400:]})")
    left = sorted(os.listdir(markers))
    check(not left, f"{label}: no planted module was imported (imported: {left})")
    for name in left:
        os.remove(os.path.join(markers, name))


def fake_python_prefix(root):
    """A prefix getpath would take for a `python3` found on PATH: bin/python3 and a standard library whose
    modules raise."""
    bin_dir = os.path.join(root, "bin")
    os.makedirs(bin_dir)
    fake = os.path.join(bin_dir, "python3")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho 'the fake python3 ran' >&2\nexit 3\n")
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    for minor in range(8, 16):
        lib = os.path.join(root, "lib", f"python3.{minor}")
        os.makedirs(os.path.join(lib, "lib-dynload"))
        os.makedirs(os.path.join(lib, "encodings"))
        for module in ["os.py", "site.py", os.path.join("encodings", "__init__.py")]:
            with open(os.path.join(lib, module), "w") as f:
                f.write("raise ImportError('the fake standard library was used')\n")
    return bin_dir


def all_checks(tmp):
    markers = os.path.join(tmp, "markers")
    os.makedirs(markers)
    model = os.path.join(tmp, "model")
    shutil.copytree(TINY_MODEL, model)
    # First the model folder alone: what a downloaded model could carry, with the standard library intact.
    plant(model, markers, ["transformers", "tokenizers", "jinja2", "numpy"])
    with open(os.path.join(model, "policy.py"), "w") as f:
        f.write(POLICY)
    # The planted modules are real files in the folder, and Python would import them from there.
    probe = subprocess.run([sys.executable, "-c", "import transformers"], cwd=model, capture_output=True, text=True)
    check(probe.returncode != 0 and os.path.exists(os.path.join(markers, "transformers")),
          "the planted transformers.py runs when its folder is on sys.path (the hazard is real)")
    for name in os.listdir(markers):
        os.remove(os.path.join(markers, name))

    python_features(model, None, "from inside a model folder holding transformers.py", markers)
    plant(model, markers)
    python_features(model, None, "from inside a model folder holding re.py and more", markers)

    # A working directory holding the planted modules, with the model in a subfolder.
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    plant(work, markers)
    shutil.copytree(model, os.path.join(work, "model"))
    shutil.copy(os.path.join(model, "policy.py"), work)
    python_features(work, None, "from a working directory with planted modules", markers)

    # Another python3 first on PATH with a broken standard library; PYTHONHOME and PYTHONPATH at junk.
    fake_bin = fake_python_prefix(os.path.join(tmp, "fakepy"))
    env = dict(os.environ)
    env["PATH"] = fake_bin + os.pathsep + env.get("PATH", "")
    env["PYTHONHOME"] = os.path.join(tmp, "fakepy")
    env["PYTHONPATH"] = work
    env["PYTHONSTARTUP"] = os.path.join(work, "re.py")
    env.pop("VIRTUAL_ENV", None)
    python_features(model, env, "with a fake python3 first on PATH, PYTHONHOME and PYTHONPATH set", markers)
    env.pop("PYTHONHOME")
    env.pop("PYTHONPATH")
    env.pop("PYTHONSTARTUP")
    python_features(model, env, "with a fake python3 first on PATH", markers)

    # numpy missing (a venv whose .pth hides it, the one way in): the message names the interpreter that
    # was used, the real one, not the fake on PATH.
    venv_lib = os.path.join(tmp, "venv", "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    os.makedirs(venv_lib)
    with open(os.path.join(venv_lib, "hide_numpy.pth"), "w") as f:
        f.write("import sys; sys.modules['numpy'] = None\n")
    env["VIRTUAL_ENV"] = os.path.join(tmp, "venv")
    res = run(["generate", "--model", ".", "--prompt", "hello there, a few more tokens", "--max-new-tokens", "1",
               "--policy", "python:policy.py", "--budget", "4"], model, env)
    stdlib = res.stderr.split("standard library ", 1)[-1].split(",", 1)[0]
    check(res.returncode != 0 and "cannot import numpy" in res.stderr and "fakepy" not in res.stderr
          and os.path.isfile(os.path.join(stdlib, "os.py")),
          f"without numpy the message names the standard library used, the real one ({res.stderr.strip()[-600:]})")


def main():
    return run_in_temp_folder(BINARY, "kvscope_python_isolation_", all_checks)


if __name__ == "__main__":
    sys.exit(main())
