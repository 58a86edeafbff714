"""The planner end to end on the real SmolLM2-135M: sensitivity (all three
tiers, on a little calibration text) -> plan --target-bpw -> the emitted
recipe -> quantize -> verify -> eval on held-out text, where the 6-bpw mix
must beat uniform NVFP4 by more than the paired interval."""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "crosscheck"))
import xref  # noqa: E402


def run(selq, *args, check=True):
    p = subprocess.run([selq, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"selq {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--selq", required=True)
    ap.add_argument("--source-dir", required=True)
    a = ap.parse_args()
    gguf = xref.smollm2_gguf()
    with tempfile.TemporaryDirectory(prefix="selq-planner-e2e-") as tmp:
        t = pathlib.Path(tmp)
        src = t / "bf16"
        run(a.selq, "import-gguf", gguf, src, "--force")
        sens = t / "sens.json"
        run(a.selq, "sensitivity", src, "--tier", "measured", "--calibration-tokens", "64", "--calibration-context", "64",
            "--candidates", "fp8-w8a8,nvfp4-w4a16", "--probes", "nvfp4-w4a16", "--probe-every", "3", "-o", sens, "-q")
        table = json.loads(sens.read_text())
        assert table["tier"] == "measured", table["tier"]
        assert len(table["units"]) == 30 * 4, len(table["units"])
        assert "Sense and Sensibility" in table["text_provenance"]["source"], table["text_provenance"]
        for u in table["units"]:
            nv, fp8 = u["scores"]["nvfp4-w4a16"], u["scores"]["fp8-w8a8"]
            # Units of every third layer and of the last are measured; the others interpolated.
            assert nv["measured"] == (u["layer"] % 3 == 0 or u["layer"] == 29), u["name"]
            assert not fp8["measured"], u["name"]
            assert nv["kl"] > 0 and fp8["kl"] > 0, u["name"]
            assert fp8["output_nmse"] < nv["output_nmse"], u["name"]  # FP8 is the finer format everywhere

        mix = t / "mix.yaml"
        plan = json.loads(run(a.selq, "plan", src, "--sensitivity", sens, "--target-bpw", "6",
                              "--emit-recipe", mix, "--pareto", "--json").stdout)
        assert 5.5 < plan["mix"]["bits_per_weight"] <= 6.0, plan["mix"]["bits_per_weight"]
        front = plan["pareto"]
        for lo, hi in zip(front, front[1:]):
            assert hi["bits_per_weight"] > lo["bits_per_weight"] and hi["score"] <= lo["score"], (lo, hi)
        # The recipe is an ordinary one: planned by itself, it gives the same size.
        replanned = json.loads(run(a.selq, "plan", src, "--recipe", mix, "--json").stdout)
        assert replanned["bits_per_weight"] == plan["mix"]["bits_per_weight"], (replanned["bits_per_weight"],
                                                                                plan["mix"]["bits_per_weight"])
        acc = json.loads(run(a.selq, "plan", src, "--sensitivity", sens, "--target-bpw", "6",
                             "--objective", "acceptance", "--json").stdout)
        assert acc["mix"]["bits_per_weight"] <= 6.0, acc["mix"]
        bad = run(a.selq, "plan", src, "--sensitivity", sens, "--tier", "data-free", "--target-bpw", "6",
                  "--objective", "acceptance", check=False)
        assert bad.returncode == 2 and "the data-free tier has none" in bad.stderr, bad.stderr
        # Refinement: a few end-to-end measurements on calibration text, within the budget, never worse.
        refined_yaml = t / "refined.yaml"
        ref = json.loads(run(a.selq, "plan", src, "--sensitivity", sens, "--target-bpw", "6", "--refine", "4",
                             "--calibration-tokens", "64", "--calibration-context", "64", "--emit-recipe", refined_yaml,
                             "--json", "-q").stdout)
        r = ref["refine"]
        assert 1 <= r["evaluations"] <= 4 and r["objective"] == "kl", r
        assert r["loss"] <= r["start_loss"] and r["positions"] == 63, r
        assert r["start"]["units"] == plan["mix"]["units"], "refinement starts from the solver's mix"
        assert "Sense and Sensibility" in r["text"]["source"], r["text"]
        assert ref["mix"]["bits_per_weight"] <= 6.0, ref["mix"]
        assert "Refined end to end" in refined_yaml.read_text()
        replanned = json.loads(run(a.selq, "plan", src, "--recipe", refined_yaml, "--json").stdout)
        assert replanned["bits_per_weight"] == ref["mix"]["bits_per_weight"], replanned["bits_per_weight"]
        bad = run(a.selq, "plan", src, "--sensitivity", sens, "--pareto", "--refine", "2", check=False)
        assert bad.returncode != 0 and "--refine needs --target-bpw" in bad.stderr, bad.stderr
        bad = run(a.selq, "plan", src, "--sensitivity", sens, "--target-bpw", "1", check=False)
        assert bad.returncode != 0 and "below the smallest mix" in bad.stderr, bad.stderr

        run(a.selq, "quantize", src, t / "mix", "--recipe", mix, "-q")
        run(a.selq, "verify", t / "mix")
        run(a.selq, "quantize", src, t / "nvfp4", "--recipe", "llama-nvfp4", "-q")
        ev = json.loads(run(a.selq, "eval", src, t / "nvfp4", t / "mix", "--max-tokens", "1024", "--context", "128",
                            "--max-prompts", "0", "--json", "-q").stdout)
        assert "Emma" in ev["text_source"], ev["text_source"]
        kl = {pathlib.Path(q["path"]).name: q["intervals"]["text"]["kl_mean"] for q in ev["quantized"]}
        (pair,) = ev["paired"]
        d = pair["b_minus_a"]["kl_mean"]
        sign = 1 if pathlib.Path(pair["b"]).name == "mix" else -1
        hi = d["hi"] if sign == 1 else -d["lo"]
        print(f"held-out KL: nvfp4 {kl['nvfp4']['value']:.4f}, mix {kl['mix']['value']:.4f}; "
              f"mix - nvfp4 {sign * d['value']:+.4f} (upper 95% bound {hi:+.4f})")
        assert hi < 0, "the 6-bpw mix must beat uniform NVFP4 (4.5 bpw) by more than the interval"
    print("planner e2e: ok")


if __name__ == "__main__":
    main()
