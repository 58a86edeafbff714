"""sensitivity -> plan(target_bpw) -> quantize, against the CLI; eval on SmolLM2."""
import json

import pytest

import selq


def test_sensitivity_and_target_plan_match_cli(llama, cli, tmp_path):
    cands = ["fp8-w8a8", "nvfp4-w4a16", "mxfp4-w4a16"]
    cli("sensitivity", llama, "-o", tmp_path / "cli.json", "--candidates", ",".join(cands), "-q")
    s = selq.sensitivity(llama, tmp_path / "api.json", candidates=cands)
    a, b = json.loads((tmp_path / "api.json").read_text()), json.loads((tmp_path / "cli.json").read_text())
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    assert len(s.table["units"]) == 8 and "Sensitivity" in repr(s)
    p = selq.plan(llama, sensitivity=s, target_bpw=6)
    want = json.loads(cli("plan", llama, "--sensitivity", s.path, "--target-bpw", "6", "--json"))
    for j in (p.mix, want):
        j.pop("seconds", None)
    assert p.mix == want
    assert p.bits_per_weight <= 6 and p.recipe.name == "planned-mix"
    selq.quantize(llama, tmp_path / "mix", plan=p)
    assert selq.verify(tmp_path / "mix").ok
    with pytest.raises(selq.BadInput):
        selq.plan(llama, sensitivity=s, target_bpw=0.5)  # below the cheapest mix
    with pytest.raises(selq.BadInput, match="the data-free tier does not run"):  # +gptq needs the runtime tiers
        selq.sensitivity(llama, tmp_path / "gptq.json", candidates=["nvfp4-w4a16+gptq"])
    assert not (tmp_path / "gptq.json").exists()


def test_eval_matches_cli(smollm2, cli, tmp_path):
    selq.quantize(smollm2, tmp_path / "fp8", recipe="llama-fp8")
    text = "It is a truth universally acknowledged, that a single man in possession of a good fortune, " \
           "must be in want of a wife. " * 12
    (tmp_path / "t.txt").write_text(text)
    prompts = ["What is the capital of France?"]
    (tmp_path / "p.jsonl").write_text(json.dumps({"question": prompts[0]}) + "\n")
    stages = []
    rep = selq.eval(smollm2, tmp_path / "fp8", text=tmp_path / "t.txt", prompts=prompts, max_tokens=96, context=48,
                    max_prompts=1, gen_tokens=8, progress=lambda s, d, t: stages.append(s))
    want = json.loads(cli("eval", smollm2, tmp_path / "fp8", "--text", tmp_path / "t.txt", "--prompts",
                          tmp_path / "p.jsonl", "--max-tokens", "96", "--context", "48", "--max-prompts", "1",
                          "--gen-tokens", "8", "--json", "-q"))
    for key in ("perplexity", "nll", "kl_mean", "top1_agreement", "accepted_greedy", "tokens"):
        assert rep.quantized[0][key] == want["quantized"][0][key], key
    assert rep.base["perplexity"] == want["base"]["perplexity"]
    assert 1 < rep.base["perplexity"] < 100 and rep.quantized[0]["kl_mean"] > 0
    assert stages and "perplexity" in str(rep).lower()
    rows = rep.rows()
    assert len(rows) == 2 and rows[1]["path"].endswith("fp8")
    with pytest.warns(DeprecationWarning, match="takes a path"):  # the old API took the text itself
        old = selq.eval(smollm2, tmp_path / "fp8", text=text, prompts=prompts, max_tokens=96, context=48,
                        max_prompts=1, gen_tokens=8, base_cache=False)
    assert old.quantized[0]["kl_mean"] == rep.quantized[0]["kl_mean"]


def test_refined_plan_matches_cli(smollm2, cli, tmp_path):
    cands = ["fp8-w8a16", "nvfp4-w4a16"]
    s = selq.sensitivity(smollm2, tmp_path / "s.json", candidates=cands)
    p = selq.plan(smollm2, sensitivity=s, target_bpw=6, refine=2, calibration_tokens=32)
    want = json.loads(cli("plan", smollm2, "--sensitivity", s.path, "--target-bpw", "6", "--refine", "2",
                          "--calibration-tokens", "32", "--json", "-q"))
    for j in (p.mix, want):
        j.pop("seconds", None)
        j["refine"].pop("seconds")
    assert p.mix == want
    r = p.mix["refine"]
    assert 1 <= r["evaluations"] <= 2 and r["loss"] <= r["start_loss"] and "Sense and Sensibility" in r["text"]["source"]
    assert p.bits_per_weight <= 6
