"""selq report as a person sees it: headless Chromium opens the report of a
planned mix of the real SmolLM2-135M (with its evaluation and sensitivity
table) and the report `quantize` wrote for a Kimi-K3-shaped MoE. For each
page: no console errors, the layer map has a row for every layer in both
views, three known cells have their format's legend colour (formats read
from the manifest by this test), the page fits the viewport's width, and a
full-page screenshot is saved. Bad input gets one line."""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "crosscheck"))
sys.path.insert(0, str(HERE))
import xref  # noqa: E402

WIDTH = 1280


def run(selq, *args, check=True):
    p = subprocess.run([selq, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"selq {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def manifest_cells(ckpt):
    """{(layer, kind): set of formats} of the linear weights, read from the manifest here."""
    m = json.loads((ckpt / "selq-manifest.json").read_text())
    cells = {}
    for t in m["tensors"]:
        name = t["source"]
        if not name.endswith(".weight") or ("scheme" not in t and len(t["source_shape"]) != 2):
            continue
        hit = re.search(r"(?:^|\.)layers\.(\d+)\.(.*)\.weight$", name)
        if not hit:
            continue
        kind = re.sub(r"\.experts\.\d+\.", ".experts.*.", "." + hit.group(2))[1:]
        cells.setdefault((int(hit.group(1)), kind), set()).add(t["format"])
    return cells


def known_cells(cells, wanted):
    """Three cells of one format each: `wanted` kinds first, in different formats where possible."""
    picked, formats = [], set()
    for prefer_new in (True, False):
        for (layer, kind), fmts in sorted(cells.items(), key=lambda kv: (kv[0][1] not in wanted, kv[0])):
            f = next(iter(fmts))
            if len(fmts) != 1 or (layer, kind, f) in picked or (prefer_new and f in formats):
                continue
            picked.append((layer, kind, f))
            formats.add(f)
            if len(picked) == 3:
                return picked
    return picked


def check_page(browser, html, ckpt, wanted, shot):
    t0 = time.time()
    browser.open(html)
    errors = browser.errors()
    assert not errors, f"{html}: console errors {errors}"
    cells = manifest_cells(ckpt)
    layers = 1 + max(layer for layer, _ in cells)
    for view in ("fmt", "snr"):
        rows = browser.eval(f"[...document.querySelectorAll('#map-{view} g.layer')]"
                            ".map(g => [Number(g.dataset.layer), g.querySelectorAll('.cell').length])")
        assert [r[0] for r in rows] == list(range(layers)), (view, rows)
        for layer, n in rows:
            want = sum(1 for (lay, _) in cells if lay == layer)
            assert n == want, f"{view} layer {layer}: {n} cells, the manifest has {want} linear kinds"
    picked = known_cells(cells, wanted)
    assert len(picked) == 3, picked
    colours = {}
    for layer, kind, fmt in picked:
        got = browser.eval(f"""(() => {{
            const cell = document.getElementById({json.dumps(f'fmt-L{layer}-{kind}')});
            const swatch = document.querySelector('#map-fmt .swatch[data-format={json.dumps(fmt)}]');
            return [cell && cell.tagName, cell && getComputedStyle(cell).fill, swatch && getComputedStyle(swatch).fill];
        }})()""")
        assert got[0] == "rect", (layer, kind, got)
        assert got[1] == got[2], f"layer {layer} {kind} ({fmt}): cell {got[1]}, legend {got[2]}"
        colours[fmt] = got[1]
    assert len(set(colours.values())) == len(colours), f"formats share a colour: {colours}"
    scroll, inner = browser.eval("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"{html}: {scroll} px wide in a {inner} px viewport"
    browser.screenshot(shot)
    assert shot.stat().st_size > 10000, shot
    print(f"{html.name}: {layers} layers, cells {picked}, {pathlib.Path(html).stat().st_size / 1e3:.0f} kB, "
          f"checked in {time.time() - t0:.1f} s -> {shot}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--selq", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--screenshots", required=True)
    a = ap.parse_args()
    gguf = xref.smollm2_gguf()
    try:
        from browser import Browser
        browser = Browser(WIDTH, 900)
    except (ImportError, FileNotFoundError) as e:
        xref.missing(f"{e} (scripts/setup.sh test installs chromium and websocket-client)")
    shots = pathlib.Path(a.screenshots)
    shots.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="selq-report-e2e-") as tmp:
            t = pathlib.Path(tmp)
            # The real model: a planned 6-bpw mix and uniform NVFP4, evaluated on a little text.
            src, mix, nv = t / "bf16", t / "planned-6", t / "nvfp4"
            run(a.selq, "import-gguf", gguf, src, "--force")
            sens = t / "sens.json"
            run(a.selq, "sensitivity", src, "--candidates", "fp8-w8a8,nvfp4-w4a16", "-o", sens, "-q")
            run(a.selq, "plan", src, "--sensitivity", sens, "--target-bpw", "6", "--emit-recipe", t / "mix.yaml")
            run(a.selq, "quantize", src, mix, "--recipe", t / "mix.yaml", "-q")
            run(a.selq, "quantize", src, nv, "--recipe", "llama-nvfp4", "-q")
            ev = t / "eval.json"
            ev.write_text(run(a.selq, "eval", src, mix, nv, "--max-tokens", "256", "--context", "32",
                              "--max-prompts", "0", "--json", "-q").stdout)
            html = t / "report.html"
            summary = json.loads(run(a.selq, "report", mix, "--eval", ev, "--sensitivity", sens, "-o", html,
                                     "--png", t / "png", "--json").stdout)
            assert summary["layers"] == 30 and summary["eval_row"] == "planned-6", summary
            for p in summary["png"]:
                data = pathlib.Path(p).read_bytes()
                assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, p
            assert {"layer-map-format", "layer-map-error", "kl-histogram", "quality",
                    "sensitivity-by-depth"} <= set(summary["pictures"]), summary["pictures"]
            page = html.read_text()
            for section in ('id="eval-table"', 'id="chart-quality"', 'id="kl-histogram"', 'id="chart-depth"'):
                assert section in page, section
            assert (mix / "selq-report.html").is_file()  # quantize wrote its own
            check_page(browser, html, mix, ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"),
                       shots / "smollm2-planned-mix.png")

            # A Kimi-K3-shaped MoE (a smaller skeleton than the real 61 x 384): the page quantize wrote.
            k3, k3q = t / "k3", t / "k3-q"
            run(a.selq, "synth", "--arch", "kimi-k3", "--scale", "64", "--experts", "48", "--layers", "12", k3)
            run(a.selq, "quantize", k3, k3q, "--recipe", "kimi-k3-mxfp4-attnfp8", "-q")
            check_page(browser, k3q / "selq-report.html", k3q,
                       ("mlp.experts.*.down_proj", "self_attn.q_b_proj", "mlp.gate"), shots / "kimi-k3-skeleton.png")

            # Bad input: an eval of another model, one line naming the file.
            bad = run(a.selq, "report", k3q, "--eval", ev, "-o", t / "bad.html", check=False)
            lines = bad.stderr.strip().splitlines()
            assert bad.returncode != 0 and len(lines) == 1 and "eval.json" in lines[0], bad.stderr
            print("bad input:", lines[0])
    finally:
        browser.close()


if __name__ == "__main__":
    main()
