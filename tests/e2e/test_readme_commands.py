"""What a user copies from the README must work: the scripts and bench
commands it shows exist and are executable, each `selq SUB` of its usage block
answers --help and knows every option shown beside it, every recipe it names
ships, and every CMake preset it names exists."""
import argparse
import json
import os
import re
import subprocess
import sys


def code_blocks(readme):
    return re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)


def expand_braces(word):
    m = re.search(r"\{([^}]*)\}", word)
    if not m:
        return [word]
    return [w for alt in m.group(1).split(",")
            for w in expand_braces(word[:m.start()] + alt + word[m.end():])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--selq", required=True)
    ap.add_argument("--source-dir", required=True)
    a = ap.parse_args()
    readme = open(os.path.join(a.source_dir, "README.md")).read()
    failures = []
    blocks = code_blocks(readme)
    assert blocks, "README has no code blocks"

    # Scripts and bench tools named in any block.
    paths = set()
    for b in blocks:
        paths.update(re.findall(r"(?<![\w/.-])((?:scripts|bench)/[\w./-]+\.(?:sh|py))", b))
    assert "scripts/demo.sh" in paths and "scripts/test.sh" in paths, paths
    for p in sorted(paths):
        f = os.path.join(a.source_dir, p)
        if not os.path.isfile(f):
            failures.append(f"README names {p}, which does not exist")
        elif p.endswith(".sh") and not os.access(f, os.X_OK):
            failures.append(f"README names {p}, which is not executable")

    # `selq SUB ... --opt` lines: SUB answers --help and lists each --opt.
    usage = []  # (sub, text before the description), continuation lines joined to their command
    for b in blocks:
        for line in b.splitlines():
            m = re.match(r"\s*selq ([a-z][a-z-]*)\b(.*)", line)
            if m:
                usage.append([m.group(1), re.split(r"\s{3,}", m.group(2).strip())[0]])
            elif usage and re.match(r"\s{8,}\[", line):
                usage[-1][1] += " " + re.split(r"\s{3,}", line.strip())[0]
    checked = 0
    for sub, shown in usage:
        r = subprocess.run([a.selq, sub, "--help"], capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"`selq {sub} --help` exited {r.returncode}: {r.stderr.strip()}")
            continue
        checked += 1
        for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", shown):
            if opt not in r.stdout:
                failures.append(f"README shows `selq {sub} ... {opt}`, which `selq {sub} --help` does not list")
        if "Examples:" not in r.stdout:
            failures.append(f"`selq {sub} --help` has no examples")
    assert checked >= 10, f"only {checked} selq usage lines found in the README"

    # Recipes named in the README's recipe table.
    shipped = {r["name"] for r in json.loads(subprocess.run([a.selq, "recipes", "--json"], check=True,
                                                             capture_output=True, text=True).stdout)}
    named = set()
    for cell in re.findall(r"^\| `([^`]+)` \|", readme, re.M):
        named.update(expand_braces(cell))
    assert len(named) >= 5, named
    for n in sorted(named - shipped):
        failures.append(f"README's recipe table names '{n}', which `selq recipes` does not list")

    # CMake presets.
    presets = {p["name"] for p in json.load(open(os.path.join(a.source_dir, "CMakePresets.json")))["configurePresets"]}
    for b in blocks:
        for name in re.findall(r"cmake --preset (\w+)", b):
            if name not in presets:
                failures.append(f"README uses `cmake --preset {name}`, which CMakePresets.json does not define")

    for f in failures:
        print("FAIL:", f)
    print(f"README: {len(paths)} scripts, {checked} selq usage lines, {len(named)} recipes checked; "
          f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
