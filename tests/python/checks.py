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
