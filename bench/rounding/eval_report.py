"""One `selq eval --json` report of bench/rounding's scripts (WORKDIR/eval-DOMAIN.json), by
model directory name: each model's statistics and each pair's paired KL difference."""
import json
import os


def name(path):
    return os.path.basename(path.rstrip("/"))


def load(work, domain):
    """(report, {model: its statistics}, {(a, b): b − a's kl_mean interval})."""
    rep = json.load(open(os.path.join(work, f"eval-{domain}.json")))
    kl = {name(q["path"]): q for q in rep["quantized"]}
    paired = {(name(p["a"]), name(p["b"])): p["b_minus_a"]["kl_mean"] for p in rep["paired"]}
    return rep, kl, paired
