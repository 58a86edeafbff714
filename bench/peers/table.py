"""Prints bench/compare.sh's measurements (JSON lines) as a Markdown table:
per checkpoint, the cp floor, then each peer next to selq on the same scheme."""
import json
import sys


def mem(r):
    return f"{r['peak_rss_kb'] / 1024:.0f} / {r['peak_anon_kb'] / 1024:.0f}"


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    for ckpt in dict.fromkeys(r["ckpt"] for r in rows):
        rs = [r for r in rows if r["ckpt"] == ckpt]
        cp = next(r for r in rs if r["tool"] == "cp")
        gb = cp["in_bytes"] / 1e9
        print(f"\n### {ckpt}: {gb:.2f} GB, {cp['threads']} threads; cp -r {cp['wall_s']:.2f} s "
              f"({gb / max(cp['wall_s'], 1e-9):.2f} GB/s)\n")
        print("| peer | scheme | peer s | selq s | peer/selq | selq/cp | peer/cp | peer RSS / anon MiB | selq RSS / anon MiB | load1 | note |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        # measure() writes selq's row right before the peer's it is paired with.
        for i, r in enumerate(rs):
            if r["tool"] in ("cp", "selq"):
                continue
            s = rs[i - 1]
            ok = r["rc"] == 0
            note = "" if ok else ("timeout" if r["rc"] == 124 else f"rc {r['rc']}: {r['error'][:120]}")
            if s["rc"] != 0:
                note += f" selq rc {s['rc']}: {s['error'][:120]}"
            ratio = f"{r['wall_s'] / s['wall_s']:.1f}" if ok and s["rc"] == 0 else "–"
            peer_cp = f"{r['wall_s'] / cp['wall_s']:.1f}" if ok else "–"
            print(f"| {r['tool']} | {r['scheme']} | {r['wall_s']:.2f} | {s['wall_s']:.2f} | {ratio} | "
                  f"{s['wall_s'] / cp['wall_s']:.2f} | {peer_cp} | {mem(r)} | {mem(s)} | "
                  f"{r['load1_before']} | {note.strip()} |")


if __name__ == "__main__":
    main(sys.argv[1])
