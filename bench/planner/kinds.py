#!/usr/bin/env python3
"""Which module kinds the planner sends to a 4-bit format first, and at which
depth, read from the plans themselves (`selq plan ... --json` output).

    bench/planner/kinds.py PLAN.json [PLAN.json ...]

For each tier found, a table: one row per module kind, one column per budget,
each cell the share of that kind's layers in a 4-bit format (NVFP4, MXFP4,
INT4) and in BF16. Then the kinds in the order they go to 4 bits as the budget
shrinks (the largest budget at which at least half of the kind's layers are
4-bit), and, at each budget, the mean relative depth (0 = first layer,
1 = last) of the 4-bit units against the 8-bit-or-more units: below 0.5 means
the planner keeps the late layers wider."""
import collections
import json
import re
import sys

LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def four_bit(candidate):
    return candidate.split("-")[0] in ("nvfp4", "mxfp4", "int4")


def load(path):
    with open(path) as f:
        d = json.load(f)
    units = {}
    for name, cand in d["mix"]["units"].items():
        m = LAYER.match(name)
        if m:
            units[name] = (m.group(2), int(m.group(1)), cand)
    return d["tier"], d["mix"]["bits_per_weight"], units


def main(paths):
    by_tier = collections.defaultdict(list)
    for p in paths:
        tier, bpw, units = load(p)
        by_tier[tier].append((bpw, units))
    for tier, plans in sorted(by_tier.items()):
        plans.sort(key=lambda x: -x[0])
        kinds = sorted({k for _, units in plans for k, _, _ in units.values()})
        layers = max(l for _, units in plans for _, l, _ in units.values()) + 1
        print(f"\n{tier}: share of each kind's layers in a 4-bit format (and in bf16), by budget (bits per weight)\n")
        print("| kind | " + " | ".join(f"{b:.2f}" for b, _ in plans) + " |")
        print("|---|" + "---|" * len(plans))
        first_low = {}
        for k in kinds:
            cells = []
            for b, units in plans:
                mine = [c for kind, _, c in units.values() if kind == k]
                low = sum(four_bit(c) for c in mine) / len(mine)
                bf16 = sum(c == "bf16" for c in mine) / len(mine)
                cells.append(f"{low:.0%}" + (f" ({bf16:.0%} bf16)" if bf16 else ""))
                if low >= 0.5 and k not in first_low:
                    first_low[k] = b
            print(f"| {k} | " + " | ".join(cells) + " |")
        order = sorted(kinds, key=lambda k: -first_low.get(k, 0))
        print("\nhalf of the layers at 4 bits from (bits per weight): " +
              ", ".join(f"{k} {first_low[k]:.2f}" if k in first_low else f"{k} never" for k in order))
        print("mean relative depth, 4-bit units vs >= 8-bit units: " + "; ".join(
            depth_line(b, units, layers) for b, units in plans))


def depth_line(bpw, units, layers):
    low = [l / (layers - 1) for _, l, c in units.values() if four_bit(c)]
    high = [l / (layers - 1) for _, l, c in units.values() if not four_bit(c)]
    mean = lambda xs: f"{sum(xs) / len(xs):.2f}" if xs else "-"
    return f"{bpw:.2f}: {mean(low)} vs {mean(high)}"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
