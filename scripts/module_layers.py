#!/usr/bin/env python3
"""Fails when a file of src/ includes a header of a module its module may not use.

What each module may use is written once, in src/CMakeLists.txt: the
arguments of its selq_module() call (and of the aggregates such as
selq::runtime), followed transitively. The CLI (src/cli) may use anything.
Also fails when those declarations form a cycle.

  python3 scripts/module_layers.py src/CMakeLists.txt src
"""
import argparse
import pathlib
import re
import sys

MODULE = re.compile(r"selq_module\(\s*([\w/]+)([^)]*)\)", re.S)
AGGREGATE = re.compile(r"target_link_libraries\(\s*selq_(\w+)\s+INTERFACE\s+([^)]*)\)", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def declared(cmake_text):
    """{module dir: [target names it names]} and {aggregate name: [target names]}."""
    modules = {d: re.findall(r"selq::(\w+)", args) for d, args in MODULE.findall(cmake_text)}
    aggregates = {n: re.findall(r"selq_(\w+)", args) for n, args in AGGREGATE.findall(cmake_text)}
    return modules, aggregates


def direct_uses(modules, aggregates):
    """{module dir: set of module dirs it names}, aggregates expanded."""
    by_name = {d.replace("/", "_"): d for d in modules}

    def expand(name, seen=()):
        if name in by_name:
            return {by_name[name]}
        if name in aggregates and name not in seen:
            return set().union(*(expand(n, seen + (name,)) for n in aggregates[name]))
        raise SystemExit(f"module_layers: src/CMakeLists.txt names selq::{name}, which is neither a module nor an aggregate")

    return {d: set().union(set(), *(expand(n) for n in names)) for d, names in modules.items()}


def closure(uses):
    """{module: every module it may use}; exits naming a cycle if there is one."""
    done, out = set(), {}

    def visit(m, path):
        if m in path:
            raise SystemExit("module_layers: the modules use each other in a cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return out[m]
        out[m] = set(uses[m]).union(*(visit(u, path + [m]) for u in uses[m])) if uses[m] else set()
        done.add(m)
        return out[m]

    for m in uses:
        visit(m, [])
    return out


def owner(path, dirs):
    """The module whose folder holds `path` (the longest match), or None."""
    best = None
    for d in dirs:
        if (path == d or path.startswith(d + "/")) and (best is None or len(d) > len(best)):
            best = d
    return best


def violations(src, may_use):
    dirs = list(may_use)
    for f in sorted(src.rglob("*")):
        if f.suffix not in (".cpp", ".h"):
            continue
        rel = f.relative_to(src).as_posix()
        mine = owner(rel, dirs)
        if mine is None:
            continue  # the CLI, which may use every module
        for inc in INCLUDE.findall(f.read_text(errors="replace")):
            theirs = owner(inc, dirs)
            if theirs is not None and theirs != mine and theirs not in may_use[mine]:
                allowed = ", ".join(sorted(may_use[mine])) or "nothing"
                yield f"src/{rel} includes {inc}, but {mine} may use only: {allowed} (src/CMakeLists.txt)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmakelists", type=pathlib.Path)
    ap.add_argument("src", type=pathlib.Path)
    a = ap.parse_args()
    may_use = closure(direct_uses(*declared(a.cmakelists.read_text())))
    bad = list(violations(a.src, may_use))
    for line in bad:
        print(line)
    print(f"module_layers: {len(may_use)} modules, {len(bad)} include(s) against the declared layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
