"""The policy files kvscope ships (issue 36): `kvscope policies` and `policies --json` list every file under
examples/policies that defines score() (found here by reading the files, not by kvscope's rule), with the press
it ports and the parameters its `params` dict declares (read here with ast), the same as `policies --file` gives;
helper modules (_torch_cpu_rng.py, imported by the ports that replay torch's generator) are not listed."""
import ast
import json
import os
import subprocess
import sys

from checks import FAILURES, check, passed

SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("KVSCOPE_BINARY", "")
FOLDER = os.path.join(SOURCE, "examples", "policies")

# What each file ports, as docs/policies.md's kvpress table has it.
PORTS = {
    "keydiff": "kvpress KeyDiffPress",
    "lagkv": "kvpress LagKVPress",
    "expected_attention": "kvpress ExpectedAttentionPress",
    "cur": "kvpress CURPress",
    "non_causal_attn": "kvpress NonCausalAttnPress",
    "leverage": "kvpress LeverageScorePress",
    "compactor": "kvpress CompactorPress",
    "cap": "kvpress CapPress",
    "observed_attention": "kvpress ObservedAttentionPress",
    "random_press": "kvpress RandomPress",
    "key_norm": "kvpress KnormPress",
    "h2o_numpy": "built-in h2o",
    "snapkv_numpy": "built-in snapkv",
    "merge_nearest": "",
}


def kvscope(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=600)


def module_tree(path):
    with open(path) as f:
        return ast.parse(f.read(), path)


def defines_score(tree):
    return any(isinstance(n, ast.FunctionDef) and n.name == "score" for n in tree.body)


def declared_params(tree):
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "params" for t in n.targets):
            return {k.value for k in n.value.keys}
    return set()


def main():
    if not os.path.exists(BINARY):
        print(f"KVSCOPE_BINARY is not set to an executable (got {BINARY!r})")
        sys.exit(2)
    policies, helpers = {}, []
    for name in sorted(os.listdir(FOLDER)):
        if not name.endswith(".py"):
            continue
        tree = module_tree(os.path.join(FOLDER, name))
        if defines_score(tree):
            policies[name[:-3]] = declared_params(tree)
        else:
            helpers.append(name[:-3])
    check(set(PORTS) == set(policies), f"the test knows every shipped policy file ({sorted(policies)})")
    check(helpers == ["_torch_cpu_rng"], f"the helper module is found here ({helpers})")

    res = kvscope("policies", "--json")
    check(res.returncode == 0, f"policies --json succeeds ({res.stderr.strip()[-300:]})")
    listed = {f["name"]: f for f in json.loads(res.stdout).get("files", [])} if res.returncode == 0 else {}
    check(set(listed) == {"python:" + stem for stem in policies},
          f"policies --json lists exactly the files that define score() (got {sorted(listed)})")
    for helper in helpers:
        check("python:" + helper not in listed, f"{helper}.py (a helper) is not listed")
    for stem, params in policies.items():
        entry = listed.get("python:" + stem)
        if entry is None:
            continue
        check("error" not in entry, f"{stem}.py loads ({entry.get('error')})")
        check(os.path.realpath(entry.get("file", "")) == os.path.realpath(os.path.join(FOLDER, stem + ".py")),
              f"{stem}: the listed file is examples/policies/{stem}.py ({entry.get('file')})")
        check(entry.get("ports") == PORTS.get(stem), f"{stem}: ports {PORTS.get(stem)!r} (got {entry.get('ports')!r})")
        names = {p["name"] for p in entry.get("params", [])}
        check(params <= names, f"{stem}: every parameter of its params dict is listed ({sorted(params - names)} missing)")
        described = kvscope("policies", "--file", os.path.join(FOLDER, stem + ".py"), "--json")
        check(described.returncode == 0 and json.loads(described.stdout)["params"] == entry.get("params"),
              f"{stem}: the listing's parameters are those of `policies --file`")

    res = kvscope("policies")
    check(res.returncode == 0, "policies succeeds")
    text = res.stdout
    check("Shipped policy files" in text, "the text listing has a section for the shipped files")
    for stem in policies:
        check(f"python:{stem} — " in text, f"the text listing names python:{stem}")
    check("ports kvpress KeyDiffPress" in text, "... with the press a file ports")
    check("lag_size" in text, "... and a file's own parameters")
    check("_torch_cpu_rng" not in text, "the helper is not in the text listing")

    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
