"""Projects, from bench/compare.sh's measurements, the time each tool would take
on a 2.8T-parameter BF16 checkpoint (5.6 TB) on one 64-core node with NVMe.

Model (stated in the output): a tool's work is its CPU seconds per input byte;
that work spreads perfectly over the node's cores (optimistic for every tool);
reading the input and writing the output at the NVMe rates overlap the work, so
the time is the largest of the three, plus the fixed start-up CPU once.

Per-byte cost and start-up: where a tool and scheme were measured on two
checkpoint sizes (e.g. compare.sh --ckpt both), the line through the two points
gives both (slope = CPU s per byte, intercept = start-up) and no guess is
needed; otherwise the largest measurement is used, less the start-up passed
with --startup (imports measured apart).

  project.py RESULTS.jsonl [RESULTS2.jsonl ...] [--startup tool=cpu_s ...]
             [--cores 64] [--read-gbs 24] [--write-gbs 16] [--bytes 5.6e12]
             [--min-gb G]   (only tools+schemes measured on a checkpoint >= G GB:
                             small models overstate per-byte cost, see BENCHMARKS.md)
"""
import argparse
import json


def cost(rs, startup):
    """(CPU s per byte, start-up CPU s, how) from one tool+scheme's runs."""
    rs = sorted(rs, key=lambda r: r["in_bytes"])
    big = rs[-1]
    small = rs[0]
    if big["in_bytes"] > 2 * small["in_bytes"]:
        slope = (big["cpu_s"] - small["cpu_s"]) / (big["in_bytes"] - small["in_bytes"])
        if slope > 0:
            fixed = max(small["cpu_s"] - slope * small["in_bytes"], 0.0)
            how = f"fit {small['ckpt']} {small['in_bytes'] / 1e9:.2f} + {big['ckpt']} {big['in_bytes'] / 1e9:.2f} GB"
            return slope, fixed, how
    fixed = startup.get(big["tool"], 0.0)
    return max(big["cpu_s"] - fixed, 0.0) / big["in_bytes"], fixed, f"{big['ckpt']} {big['in_bytes'] / 1e9:.2f} GB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--startup", nargs="*", default=[])
    ap.add_argument("--cores", type=int, default=64)
    ap.add_argument("--read-gbs", type=float, default=24.0)
    ap.add_argument("--write-gbs", type=float, default=16.0)
    ap.add_argument("--bytes", type=float, default=5.6e12)
    ap.add_argument("--min-gb", type=float, default=0.0)
    a = ap.parse_args()
    startup = {k: float(v) for k, v in (s.split("=") for s in a.startup)}
    rows = [json.loads(l) for p in a.results for l in open(p) if l.strip()]
    groups = {}
    for r in rows:
        if r["rc"] == 0 and r["tool"] != "cp":
            groups.setdefault((r["tool"], r["scheme"]), []).append(r)
    print(f"Assumptions: {a.bytes / 1e12:.1f} TB BF16 in, {a.cores} cores with perfect scaling of the "
          f"measured CPU-seconds per byte, NVMe read {a.read_gbs:g} GB/s and write {a.write_gbs:g} GB/s "
          f"overlapping the work; start-up CPU (fitted, or passed with --startup) added once.\n")
    print("| tool | scheme | measured on | CPU ns/byte | start-up CPU s | compute h | read h | write h "
          "| projected h | peak anon MiB (largest run) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (tool, scheme), rs in groups.items():
        if max(r["in_bytes"] for r in rs) < a.min_gb * 1e9:
            continue
        per_byte, fixed, how = cost(rs, startup)
        big = max(rs, key=lambda r: r["in_bytes"])
        compute = per_byte * a.bytes / a.cores
        read = a.bytes / (a.read_gbs * 1e9)
        write = a.bytes * big["out_bytes"] / big["in_bytes"] / (a.write_gbs * 1e9)
        total = max(compute, read, write) + fixed
        print(f"| {tool} | {scheme} | {how} | {per_byte * 1e9:.1f} | {fixed:.1f} | "
              f"{compute / 3600:.2f} | {read / 3600:.2f} | {write / 3600:.2f} | {total / 3600:.2f} | "
              f"{big['peak_anon_kb'] / 1024:.0f} |")
    if any(r["tool"] == "cp" for r in rows):
        print(f"\ncp floor on that node: {max(a.bytes / (a.read_gbs * 1e9), a.bytes / (a.write_gbs * 1e9)) / 3600:.2f} h "
              f"(read and write overlapped)")


if __name__ == "__main__":
    main()
