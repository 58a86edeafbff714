"""Helpers shared by the end-to-end tests: run selq, read outputs."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def parse_args():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--selq", required=True)
    p.add_argument("--source-dir", required=True)
    ARGS, rest = p.parse_known_args()
    return [sys.argv[0]] + rest


def selq(*args, check=True, env=None):
    """Runs selq; returns CompletedProcess. Fails the test with stderr on error."""
    r = subprocess.run([ARGS.selq, *map(str, args)], capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"selq {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stderr}")
    return r


def recipe(name):
    return os.path.join(ARGS.source_dir, "recipes", name + ".yaml")


def held_out_texts(directory, max_bytes=65536):
    """{domain: file} of the text sources selq holds out of its calibration mix (`selq text
    --json`: encyclopedia, code, prose, from the packages scripts/setup.sh test installs),
    plus WikiText-2 where ../shared/data has it (an optional extra: the three are always there)."""
    sources = {s["domain"]: s["name"] for s in json.loads(selq("text", "--json").stdout) if s["held_out"]}
    assert sorted(sources) == ["code", "encyclopedia", "prose"], sources
    out = {}
    for domain, source in sources.items():
        path = os.path.join(directory, f"held-out-{domain}.txt")
        selq("text", source, "--max-bytes", str(max_bytes), "-o", path)
        out[domain] = path
    wiki = os.path.join(ARGS.source_dir, "..", "shared", "data", "wikitext2-test.txt")
    if os.path.exists(wiki):
        path = os.path.join(directory, "held-out-wikitext2.txt")
        with open(wiki, encoding="utf-8") as src, open(path, "w", encoding="utf-8") as f:
            f.write(src.read()[:max_bytes])
        out["wikitext2"] = path
    return out


def read_json(path):
    with open(path) as f:
        return json.load(f)


def safetensors_headers(directory):
    """{tensor: (dtype, shape, file)} over every shard, read with the reference library."""
    from safetensors import safe_open
    out = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(directory, name), framework="pt") as f:
            # get_slice gives the header dtype string ("BF16", "F8_E4M3") and shape.
            for key in f.keys():
                s = f.get_slice(key)
                out[key] = (s.get_dtype(), list(s.get_shape()), name)
    return out


def tree_bytes(directory):
    """{relative path: bytes} of every file (for byte-identity checks)."""
    out = {}
    for root, _, files in os.walk(directory):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, directory)] = fh.read()
    return out


def main():
    argv = parse_args()
    unittest.main(argv=argv, verbosity=2)


def load_tensor(directory, name, headers=None):
    """One tensor as a torch tensor, read with the reference library."""
    from safetensors import safe_open
    headers = headers or safetensors_headers(directory)
    with safe_open(os.path.join(directory, headers[name][2]), framework="pt") as f:
        return f.get_tensor(name)


def journal_shards(path):
    """Shard names a resume journal records (JSON Lines: a header, then one
    event per line; a torn last line is ignored, as selq ignores it)."""
    shards = set()
    with open(path) as f:
        for line in f.read().split("\n")[1:-1]:
            shards.add(json.loads(line).get("shard"))
    shards.discard(None)
    return shards
