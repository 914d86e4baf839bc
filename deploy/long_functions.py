#!/usr/bin/env python3
"""Lists C/C++ functions longer than a limit (default 120 lines).

A heuristic that relies on the tree's clang-format style (Google): a function definition
starts at column 0 and its body closes with a '}' alone at column 0. Data tables
(initialised arrays) are not functions and are not counted.

  deploy/long_functions.py [--limit N] [paths...]    (default: the tracked tree)
"""
import argparse
import re
import subprocess
import sys

SOURCE = re.compile(r"\.(cc|cpp|c|h|hpp|inc)$")
NOT_FUNCTION = re.compile(r"^(namespace|struct|class|enum|union|extern|typedef|#|//|template\s*<[^>]*>\s*(struct|class))")


def tracked_sources(paths):
    out = subprocess.run(["git", "ls-files", *paths], capture_output=True, text=True, check=True).stdout
    return [p for p in out.split() if SOURCE.search(p)]


def long_functions(path, limit):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    found, start, header = [], None, ""
    for number, line in enumerate(lines, 1):
        if start is None:
            continues = header and line[:1] in (" ", "\t")  # a signature's wrapped parameters
            if continues or (line[:1] not in ("", " ", "\t", "}") and not NOT_FUNCTION.match(line)):
                header = header + line if continues else line
                if line.rstrip().endswith("{") and "(" in header and "=" not in header.split("(")[0]:
                    start = number
                elif line.rstrip().endswith((";", "}")):
                    header = ""
            else:
                header = ""
        elif line.startswith("}"):
            length = number - start + 1
            if length > limit:
                found.append((path, start, length, header.strip()[:90]))
            start, header = None, ""
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=120)
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args()
    found = []
    for path in tracked_sources(args.paths):
        found += long_functions(path, args.limit)
    for path, start, length, header in sorted(found, key=lambda f: -f[2]):
        print(f"{path}:{start}: {length} lines: {header}")
    print(f"{len(found)} functions over {args.limit} lines", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
