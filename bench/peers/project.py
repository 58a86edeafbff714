"""Projects, from bench/compare.sh's measurements, the time each tool would take
on a 2.8T-parameter BF16 checkpoint (5.6 TB) on one 64-core node with NVMe.

Model (stated in the output): a tool's work is its CPU seconds per input byte,
less the fixed start-up CPU (interpreter and library imports, measured apart
and passed with --startup); that work spreads perfectly over the node's cores
(optimistic for every tool); reading the input and writing the output at the
NVMe rates overlap the work, so the time is the largest of the three, plus the
start-up once.

  project.py RESULTS.jsonl [--startup tool=cpu_s ...] [--cores 64]
             [--read-gbs 24] [--write-gbs 16] [--bytes 5.6e12]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--startup", nargs="*", default=[])
    ap.add_argument("--cores", type=int, default=64)
    ap.add_argument("--read-gbs", type=float, default=24.0)
    ap.add_argument("--write-gbs", type=float, default=16.0)
    ap.add_argument("--bytes", type=float, default=5.6e12)
    a = ap.parse_args()
    startup = {k: float(v) for k, v in (s.split("=") for s in a.startup)}
    rows = [json.loads(l) for l in open(a.results) if l.strip()]
    print(f"Assumptions: {a.bytes / 1e12:.1f} TB BF16 in, {a.cores} cores with perfect scaling of the "
          f"measured CPU-seconds per byte, NVMe read {a.read_gbs:g} GB/s and write {a.write_gbs:g} GB/s "
          f"overlapping the work; start-up CPU per tool subtracted from the measurement and added once.\n")
    print("| tool | scheme | measured on | CPU ns/byte | compute h | read h | write h | projected h |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["rc"] != 0 or r["tool"] == "cp":
            continue
        work = max(r["cpu_s"] - startup.get(r["tool"], 0.0), 0.0)
        per_byte = work / r["in_bytes"]
        compute = per_byte * a.bytes / a.cores
        read = a.bytes / (a.read_gbs * 1e9)
        write = a.bytes * r["out_bytes"] / r["in_bytes"] / (a.write_gbs * 1e9)
        total = max(compute, read, write) + startup.get(r["tool"], 0.0)
        print(f"| {r['tool']} | {r['scheme']} | {r['ckpt']} {r['in_bytes'] / 1e9:.2f} GB | {per_byte * 1e9:.1f} | "
              f"{compute / 3600:.2f} | {read / 3600:.2f} | {write / 3600:.2f} | {total / 3600:.2f} |")
    cp = [r for r in rows if r["tool"] == "cp"]
    if cp:
        print(f"\ncp floor on that node: {max(a.bytes / (a.read_gbs * 1e9), a.bytes / (a.write_gbs * 1e9)) / 3600:.2f} h "
              f"(read and write overlapped)")


if __name__ == "__main__":
    main()
