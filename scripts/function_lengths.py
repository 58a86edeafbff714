#!/usr/bin/env python3
"""Lists C++ functions longer than --max lines (docs/ARCHITECTURE.md, "Code").

A function body is a brace block opened on a line that ends a parameter list
(`) {`, `) const {`, ...), at any depth, so member functions, multi-line
signatures and top-level lambdas count; control-flow blocks do not. A function
may be longer when the line above its first line says why, starting with
`// long:`. Exits 1 when any function is over the limit without one.

  scripts/function_lengths.py --max 80 src python/src
"""
import argparse
import pathlib
import re
import sys

HEADER = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>]+)?\s*(mutable)?\s*\{\s*$")
CONTROL = re.compile(r"^(\}\s*)?(if|for|while|switch|else|try|catch|do)\b")


def code_of(line):
    """The line without string and character literals or a // comment."""
    s = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    s = re.sub(r"'(\\.|[^'\\])'", "''", s)
    return s.split("//")[0]


def long_functions(path, limit):
    lines = path.read_text().split("\n")
    stack, found = [], []
    for i, line in enumerate(lines):
        code = code_of(line)
        for ch in code:
            if ch == "{":
                stack.append((i, HEADER.search(code) is not None and not CONTROL.match(code.strip())))
            elif ch == "}" and stack:
                start, is_function = stack.pop()
                if not is_function or i - start + 1 <= limit:
                    continue
                # The signature may start a few lines above its last line.
                first = start
                while first > 0 and lines[first - 1].strip() and not lines[first - 1].rstrip().endswith((";", "}", "{")) \
                        and not lines[first - 1].lstrip().startswith("//"):
                    first -= 1
                if first > 0 and lines[first - 1].lstrip().startswith("// long:"):
                    continue
                found.append((i - start + 1, f"{path}:{start + 1}", lines[first].strip()[:90]))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max", type=int, default=80, help="longest function allowed, in lines")
    parser.add_argument("dirs", nargs="+", help="directories searched for .cpp and .h files")
    args = parser.parse_args()
    found = []
    for d in args.dirs:
        for path in sorted(pathlib.Path(d).rglob("*")):
            if path.suffix in (".cpp", ".h"):
                found += long_functions(path, args.max)
    for n, where, name in sorted(found, reverse=True):
        print(f"{where}: {n} lines: {name}")
    if found:
        print(f"{len(found)} function(s) over {args.max} lines: split them into named steps, or say why on the "
              f"line above with `// long: ...`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
