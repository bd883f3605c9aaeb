"""The check-and-count helper the Python tests share: every check prints a FAIL line when it fails and is
counted, so a test reports all its failures at once instead of stopping at the first."""

FAILURES = []
COUNTS = {"passed": 0}


def check(cond, what):
    if cond:
        COUNTS["passed"] += 1
    else:
        FAILURES.append(what)
        print(f"FAIL: {what}")


def passed():
    return COUNTS["passed"]


def run_in_temp_folder(binary, prefix, body):
    """The frame of a test that drives the kvscope executable: exit status 2 without it, `body(folder)` in a
    fresh folder removed afterwards, then the count; returns 1 when any check failed, else 0."""
    import os
    import shutil
    import tempfile

    if not binary or not os.path.exists(binary):
        print(f"KVSCOPE_BINARY is not set to an executable (got {binary!r})")
        return 2
    root = tempfile.mkdtemp(prefix=prefix)
    try:
        body(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0
