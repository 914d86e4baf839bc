#!/usr/bin/env python3
"""kiln compile --check through the CLI: every construct of a model Kiln cannot compile is
listed at once (one line each naming node, op and opset, then the count; exit 1), --json
prints them as a kiln.check-report, a compilable model checks clean (exit 0), and a plain
compile of the bad model fails with the whole list.

  cli_check.py KILN ROOT
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_test_models import UNSUPPORTED_NODES  # noqa: E402


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)


def main():
    kiln, root = sys.argv[1], sys.argv[2]
    make = os.path.join(root, "tests", "e2e", "make_test_models.py")
    with tempfile.TemporaryDirectory(prefix="kiln-cli-check-") as work:
        bad, good = os.path.join(work, "bad.onnx"), os.path.join(work, "good.onnx")
        subprocess.run([sys.executable, make, "unsupported", bad], check=True)
        subprocess.run([sys.executable, make, "classifier", good], check=True)

        check = run(kiln, "compile", "--check", bad)
        print(check.stdout, check.stderr)
        lines = check.stdout.splitlines()
        assert check.returncode == 1, check.returncode
        assert len(lines) == len(UNSUPPORTED_NODES) + 1, lines
        for node, reason in UNSUPPORTED_NODES.items():
            assert any(f"{bad}: node '{node}' (" in line and ", opset 21): " in line and reason in line
                       for line in lines), (node, lines)
        assert lines[-1] == f"{bad}: 4 constructs cannot be compiled", lines[-1]
        order = [next(n for n in UNSUPPORTED_NODES if f"node '{n}'" in line) for line in lines[:-1]]
        assert order == list(UNSUPPORTED_NODES), f"in the model's node order: {order}"
        assert not any("after_decode" in line or "fine_" in line for line in lines), lines

        report = json.loads(run(kiln, "compile", "--check", "--json", bad).stdout)
        assert (report["schema"], report["schema_version"]) == ("kiln.check-report", 1), report
        assert {p["node"] for p in report["problems"]} == set(UNSUPPORTED_NODES), report
        assert all(p["opset"] == 21 and p["op"] and p["reason"] for p in report["problems"]), report

        clean = run(kiln, "compile", "--check", good)
        assert clean.returncode == 0 and clean.stdout.strip() == f"{good}: 0 constructs cannot be compiled", clean

        compile_ = run(kiln, "compile", bad, "-o", os.path.join(work, "bad.so"))
        print(compile_.stderr)
        assert compile_.returncode == 1, compile_.returncode
        assert "4 constructs cannot be compiled:" in compile_.stderr, compile_.stderr
        for node in UNSUPPORTED_NODES:
            assert f"\n  node '{node}' (" in compile_.stderr, (node, compile_.stderr)
    print("cli_check: passed")


if __name__ == "__main__":
    main()
