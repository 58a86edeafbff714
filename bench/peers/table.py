"""Prints bench/compare.sh's measurements (JSON lines) as Markdown tables.

  table.py RESULTS.jsonl          per checkpoint, the cp floor, then each peer
                                  next to selq on the same scheme
  table.py --flat RESULTS.jsonl   one row per run (cp, selq and peers alike)
"""
import json
import sys


def mem(r):
    return f"{r['peak_rss_kb'] / 1024:.0f} / {r['peak_anon_kb'] / 1024:.0f}"


def note_of(r):
    if r["rc"] == 0:
        return ""
    return "timeout" if r["rc"] == 124 else f"rc {r['rc']}: {r['error'][:120]}"


def load(r):
    # load1_after is absent from measurements taken before it was recorded.
    after = r.get("load1_after")
    return f"{r['load1_before']}" if after is None else f"{r['load1_before']}→{after}"


def flat(rows):
    for ckpt in dict.fromkeys(r["ckpt"] for r in rows):
        rs = [r for r in rows if r["ckpt"] == ckpt]
        cp = next(r for r in rs if r["tool"] == "cp")
        print(f"\n### {ckpt}: {cp['in_bytes'] / 1e9:.2f} GB, {cp['threads']} threads, "
              f"page cache {cp.get('cache', 'warm')}\n")
        print("| tool | scheme | wall s | CPU s | vs cp (wall) | sync s | peak RSS MiB | peak anon MiB "
              "| output GB | load1 before→after | note |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
        for r in rs:
            print(f"| {r['tool']} | {r['scheme']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
                  f"{r['wall_s'] / cp['wall_s']:.2f} | {r.get('sync_s', 0):.2f} | "
                  f"{r['peak_rss_kb'] / 1024:.0f} | {r['peak_anon_kb'] / 1024:.0f} | "
                  f"{r['out_bytes'] / 1e9:.2f} | {load(r)} | {note_of(r)} |")


def pairs(rows):
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
            note = note_of(r)
            if s["rc"] != 0:
                note += f" selq rc {s['rc']}: {s['error'][:120]}"
            ratio = f"{r['wall_s'] / s['wall_s']:.1f}" if ok and s["rc"] == 0 else "–"
            peer_cp = f"{r['wall_s'] / cp['wall_s']:.1f}" if ok else "–"
            print(f"| {r['tool']} | {r['scheme']} | {r['wall_s']:.2f} | {s['wall_s']:.2f} | {ratio} | "
                  f"{s['wall_s'] / cp['wall_s']:.2f} | {peer_cp} | {mem(r)} | {mem(s)} | "
                  f"{load(r)} | {note.strip()} |")


def main(argv):
    mode = pairs
    if argv[:1] == ["--flat"]:
        mode, argv = flat, argv[1:]
    mode([json.loads(line) for line in open(argv[0]) if line.strip()])


if __name__ == "__main__":
    main(sys.argv[1:])
