#!/usr/bin/env python
"""The real vLLM (CPU build, bench/vllm/setup_vllm.sh) on selq's outputs of
one base model: for each case, `selq quantize` writes the checkpoint, vLLM
loads it (in a process of its own) and scores a text's tokens (prompt
log-probs), and `selq eval` scores the same tokens with selq's reference
runtime; the two perplexities must agree within --tolerance (relative). FP8
dynamic (no vLLM CPU kernel without AMX-FP8: ~1000x slower) is loaded and
greedy-generates one token, which must be the same in every dialect. Where this CPU lacks the kernel (W4A16 needs
`cpu_gemm_wna16`, AVX-512 builds only), the case passes as "loaded, no
kernel" when vLLM parsed the config and loaded every weight before failing
on that kernel, and fails on any other error (a selq-side mistake).

usage: ~/.cache/selq/vllm-venv/bin/python bench/vllm/crosscheck.py --selq build/release/src/selq \\
           --base BASE_DIR --work DIR [--tokens 128] [--cases bf16,w4a16-g64,...] [--json OUT]

Exit status 0 when every case loads and agrees, 1 otherwise. Results: docs/BENCHMARKS.md.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# vLLM runs CT int4 W4A16 as W4A8 on AMX machines unless told not to (it changes the numbers).
os.environ.setdefault("VLLM_CPU_INT4_W4A8", "0")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# name -> (recipe dict or None for the base itself, dialect, scored or load-and-generate)
CASES = {
    "bf16": (None, "compressed-tensors", "score"),
    "w4a16-g64": ({"default": {"scheme": "int4", "options": {"group_size": 64}}}, "compressed-tensors", "score"),
    "w4a16-channel": ({"default": {"scheme": "int4", "options": {"group_size": -1}}}, "compressed-tensors", "score"),
    "w8a16-int8": ({"default": {"scheme": "int8"}}, "compressed-tensors", "score"),
    # A rotation folded into the weights (selq quantize runs selq rotate first; the tied head is
    # written out): a plain checkpoint, scored like any other.
    "w4a16-g64-r1": ({"rotation": "r1", "default": {"scheme": "int4", "options": {"group_size": 64}}},
                     "compressed-tensors", "score"),
    "fp8-dynamic-ct": ({"default": {"scheme": "fp8-channel", "options": {"activations": "fp8-per-token"}}},
                       "compressed-tensors", "generate"),
    "fp8-dynamic-quark": ({"default": {"scheme": "fp8-channel", "options": {"activations": "fp8-per-token"}}},
                          "quark", "generate"),
    "fp8-dynamic-modelopt": ({"default": {"scheme": "fp8-channel", "options": {"activations": "fp8-per-token"}}},
                             "modelopt", "generate"),
}


def selq_run(selq, *args):
    p = subprocess.run([selq, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"selq {' '.join(map(str, args))}: {p.stderr.strip()}")
    return p.stdout


def quantize(selq, base, work, name, recipe, dialect):
    out = os.path.join(work, name)
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        json.dump({"name": name, "dialect": dialect, **recipe}, f)
    selq_run(selq, "quantize", base, out, "--recipe", path, "-q", "--force")
    return out


def vllm_score(model, ids):
    """Perplexity of ids[1:] given their prefixes, from vLLM's prompt log-probs."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.time()
    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=len(ids) + 16)
    start = time.time() - t0
    out = llm.generate([TokensPrompt(prompt_token_ids=ids)], SamplingParams(max_tokens=1, prompt_logprobs=0,
                                                                            temperature=0.0))[0]
    lps = [d[t].logprob for t, d in zip(ids[1:], out.prompt_logprobs[1:])]
    del llm
    return math.exp(-sum(lps) / len(lps)), start


def vllm_generate(model, ids, n):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.time()
    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=len(ids) + n + 16)
    start = time.time() - t0
    out = llm.generate([TokensPrompt(prompt_token_ids=ids)], SamplingParams(max_tokens=n, temperature=0.0))[0]
    del llm
    return list(out.outputs[0].token_ids), start


# FP8 dynamic cases: prompt tokens and tokens generated. Without AMX-FP8,
# vLLM's CPU fallback (torch._scaled_mm, float32 output) pads every call to 17
# rows and takes ~0.45 s for one of SmolLM2's GEMMs there on an AVX-512 Xeon
# (PyPI torch 2.13): ~70 s a forward, whatever the prompt, so one token only.
# The three dialects hold the same weights: their tokens must be equal.
GENERATE_PROMPT, GENERATE_TOKENS = 16, 1

MISSING_KERNELS = ("cpu_gemm_wna16",)
# Kernel choices that fail before any weight is loaded, each with the quant type
# vLLM parsed from selq's config: the right type shows the config was read as meant.
NO_KERNEL_FOR_TYPE = {"w8a16-int8": "Quant type (uint8b128) not supported by CPUWNA16"}


def in_subprocess(mode, model, ids, n, log_path):
    """Runs vllm_score / vllm_generate in a new process, its output to log_path
    (a file, not a pipe: vLLM's worker processes inherit it); (result or None,
    output, error line)."""
    with open(log_path, "w") as log:
        p = subprocess.run([sys.executable, __file__, "--one", mode, model, json.dumps(ids), str(n)],
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=1800)
    out = open(log_path, errors="replace").read()
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:]), out, None
    err = next((l for l in reversed(out.splitlines()) if "Error" in l), f"exit status {p.returncode}")
    return None, out, err.strip()[-300:]


def one(argv):
    mode, model, ids, n = argv[0], argv[1], json.loads(argv[2]), int(argv[3])
    r = vllm_score(model, ids) if mode == "score" else vllm_generate(model, ids, n)
    print("RESULT " + json.dumps(r), flush=True)
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        return one(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--selq", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--tolerance", type=float, default=0.02, help="relative perplexity difference allowed")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.base)
    text = open(os.path.join(ROOT, "docs", "QUALITY.md"), encoding="utf-8").read()
    ids = tok(text, add_special_tokens=False)["input_ids"][: a.tokens]
    # The text whose tokens these are, for selq eval (which tokenizes it itself).
    text_path = os.path.join(a.work, "text.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(tok.decode(ids))
    results, ok, first_fp8_tokens = [], True, None  # every FP8 dialect must generate the first one's tokens
    for name in a.cases.split(","):
        recipe, dialect, mode = CASES[name]
        row = {"case": name, "dialect": dialect}
        try:
            model = a.base if recipe is None else quantize(a.selq, a.base, a.work, name, recipe, dialect)
            res, out, err = in_subprocess(mode, model, ids if mode == "score" else ids[:GENERATE_PROMPT],
                                          GENERATE_TOKENS,
                                          os.path.join(a.work, name + ".vllm.log"))
            row["weights_loaded"] = "Loading weights took" in out
            if res is None:
                missing = next((k for k in MISSING_KERNELS if k in out), None)
                row.update(ok=bool(missing) and row["weights_loaded"], error=err,
                           status=f"loaded, no kernel ({missing})" if missing else "failed")
                if not missing and NO_KERNEL_FOR_TYPE.get(name, "\0") in out:
                    row.update(ok=True, status=f"parsed, no CPU kernel ({NO_KERNEL_FOR_TYPE[name]})")
            elif mode == "score":
                ppl, start = res
                ev = json.loads(selq_run(a.selq, "eval", a.base, *([] if recipe is None else [model]), "--text",
                                         text_path, "--max-tokens", a.tokens, "--context", a.tokens,
                                         "--max-prompts", "1", "--gen-tokens", "1", "--json", "-q"))
                m = ev["base"] if recipe is None else ev["quantized"][0]
                row.update(vllm_ppl=ppl, selq_ppl=m["perplexity"], selq_tokens=ev["text_tokens"],
                           rel_diff=abs(ppl - m["perplexity"]) / m["perplexity"], start_s=start)
                row["ok"] = row["rel_diff"] <= a.tolerance and ev["text_tokens"] == len(ids)
                row["status"] = "loaded, scored"
            else:
                toks, start = res
                first_fp8_tokens = first_fp8_tokens or toks
                same = toks == first_fp8_tokens
                row.update(tokens=toks, start_s=start, ok=len(toks) == GENERATE_TOKENS and same,
                           status="loaded, generated" + ("" if same else ", tokens differ from the first dialect's"))
        except Exception as e:  # noqa: BLE001 - recorded per case
            row.update(ok=False, error=f"{type(e).__name__}: {str(e)[:300]}")
        ok = ok and row["ok"]
        results.append(row)
        print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
