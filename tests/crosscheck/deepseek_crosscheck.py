"""selq's DeepSeek-V3 runtime vs transformers' DeepseekV3ForCausalLM.

Small random DeepseekV3Configs (float32, attn_implementation="eager") saved
with save_pretrained (safetensors, per-expert tensors), run by selq's runtime
(tests/crosscheck/runtime_logits.cpp through runtime::load_model) on the same
random tokens:

  * one batched prefill over all tokens, and
  * a prefill of the first tokens followed by single-token steps through the
    KV cache (the last STEPS tokens),

both compared with transformers' logits for one batched forward. The configs
exercise expert groups (n_group > 1, topk_group < n_group), shared experts
(1 and 2), first_k_dense_replace 1 and 2, q_lora_rank set and null, YaRN RoPE
(transformers 5's rope_parameters and transformers 4's rope_theta +
rope_scaling, mscale equal to and different from mscale_all_dim), the plain
rotation, rope_interleave true and false, norm_topk_prob true and false. The
router's correction bias and the norms are randomised (transformers
initialises them to 0 and 1) so that they matter.

The second model is also stored with its routed experts as transformers 5's
3-D stacks (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj
[E, H, I]), which transformers loads as they are: selq's logits must equal
the per-expert checkpoint's bit for bit, and transformers'.

A quantized case: `selq quantize` of the first model with a recipe that stores
the routed experts NVFP4 and the attention, shared experts and dense MLP FP8
per channel (compressed-tensors, weight-only: activations stay float, so the
comparison is exact up to summation order); the reference is transformers on
the same weights decoded from the stored bytes with numpy
(transformers_load.Stored), saved as a float checkpoint. (transformers 5.24 with
compressed-tensors loads that checkpoint but cannot place per-expert quantized
weights into DeepseekV3's fused 3-D expert parameters: "Could not match
re:...mlp.experts.\\d+... in instance of DeepseekV3ForCausalLM", the experts stay
uninitialised and its logits differ by rel 1.17; so the reference decodes the
bytes itself.)

A second quantized case stores only kv_b_proj, FP8 per channel with dynamic
per-token FP8 activations: the runtime then applies kv_b_proj to every cached
latent instead of absorbing it, and the reference quantizes kv_b_proj's input
per token with a forward pre-hook (KVB_ACT_TOL; measured exact to 1e-6).

A third: DeepSeek-V3's own release format (quant_method "fp8", every linear
F8_E4M3 with a weight_scale_inv per 128x128 block, router and head BF16/F32,
activations quantized per token and group of 128 by the engine), written with
torch here from a random model (dims 256/128 with partial blocks: 144, 96,
64); the reference is transformers on the decoded weights with DeepSeek's
act_quant on every linear's input, routed experts included (KVB_ACT_TOL;
measured 3.5e-6).

Then `selq eval BASE QUANT` (every statistic and draft acceptance) and
`selq calibrate` run on the DeepSeek checkpoints (a byte-level BPE tokenizer
trained here with `tokenizers` on a fixed paragraph): eval's bits per weight
must equal `selq plan`'s, and calibrating on 3 tokens (so that some routed
experts see none) must give every expert linear a positive amax, the
unreached ones listed with the layer's largest amax of the same projection,
and input second moments (calib.moments.safetensors) for every linear, the
unreached experts' the mean of the layer's reached experts of the projection.

`selq synth --arch deepseek-v3` (BF16, its byte-level tokenizer.json): the
tokenizers library encodes text to one id per byte with it, and transformers
loads the checkpoint and gives selq's logits.

Then the whole path on the MoE (issue 36): `selq sensitivity` activation-aware
and measured (a layer's experts one unit), `selq plan --target-bpw` from each,
`selq quantize` of the emitted mixes and of `--rounding weighted` with the
calibration and `--rounding gptq` (per-expert Hessians from the routed tokens),
`selq verify` clean, `selq eval` of all of them with intervals; gptq must beat
nearest by the paired interval.

Tolerance: max |selq - torch| <= 1e-4 * max |torch logit|, argmax equal
wherever the reference's top-2 margin exceeds twice that.

usage: deepseek_crosscheck.py LOGITS_EXE SELQ_EXE WORKDIR
Exit 77 (ctest skip) when a reference is missing locally; under CI=true it fails.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xref import compare_logits, missing  # noqa: E402

try:
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import save_file
except ImportError as e:  # pragma: no cover
    missing(f"python package ({e}); pip install torch transformers safetensors numpy")

REL_TOL = 1e-4
N_TOKENS, STEPS = 40, 12

BASE = dict(vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_attention_heads=4,
            num_key_value_heads=4, kv_lora_rank=32, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
            max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.1, tie_word_embeddings=False)

CONFIGS = {
    # groups, one shared expert, one dense layer, q_lora, YaRN (v5 form), interleaved RoPE
    "groups-yarn-qlora": dict(BASE, num_hidden_layers=3, n_routed_experts=8, n_group=4, topk_group=2,
                              num_experts_per_tok=3, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=48,
                              routed_scaling_factor=2.5, norm_topk_prob=True, rope_interleave=True,
                              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                                               "original_max_position_embeddings": 32, "mscale": 1.0,
                                               "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}),
    # q_proj (q_lora_rank null), two dense layers, two shared experts, plain RoPE, rotate-half, unnormalised weights
    "dense2-qproj-default": dict(BASE, num_hidden_layers=4, n_routed_experts=12, n_group=3, topk_group=2,
                                 num_experts_per_tok=4, n_shared_experts=2, first_k_dense_replace=2, q_lora_rank=None,
                                 routed_scaling_factor=1.5, norm_topk_prob=False, rope_interleave=False,
                                 rope_parameters={"rope_type": "default", "rope_theta": 50000.0}),
    # YaRN as DeepSeek's own config.json writes it (transformers 4: rope_theta + rope_scaling with "type"),
    # mscale != mscale_all_dim (attention_factor != 1), no rope_interleave key (default true), one group
    "v4-yarn-mscale": dict(BASE, num_hidden_layers=2, n_routed_experts=6, n_group=1, topk_group=1,
                           num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=24,
                           routed_scaling_factor=1.0, norm_topk_prob=True,
                           rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                            "original_max_position_embeddings": 64, "mscale": 0.707,
                                            "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}),
}
V4_FORM = {"v4-yarn-mscale"}

QUANT_RECIPE = """name: deepseek-v3-nvfp4-experts-fp8-weight-only
arch: deepseek-v3
dialect: compressed-tensors
exclude: ["@router", "@heads"]
rules:
  - match: "*mlp.experts.*"
    scheme: nvfp4
    options: {activations: none}
default:
  scheme: fp8-channel
  options: {activations: none}
"""


def build(name, params, work):
    torch.manual_seed(sum(map(ord, name)))
    cfg = transformers.DeepseekV3Config(**params)
    model = transformers.DeepseekV3ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
        for mod in model.modules():
            if hasattr(mod, "e_score_correction_bias"):
                mod.e_score_correction_bias.copy_(0.1 * torch.randn_like(mod.e_score_correction_bias))
    d = work / name
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(str(d), safe_serialization=True)
    if name in V4_FORM:  # rewrite RoPE the way transformers 4 (and DeepSeek's release) writes it
        c = json.loads((d / "config.json").read_text())
        rp = dict(c.pop("rope_parameters"))
        c["rope_theta"] = rp.pop("rope_theta")
        rp["type"] = rp.pop("rope_type")
        c["rope_scaling"] = rp
        c.pop("rope_interleave", None)
        (d / "config.json").write_text(json.dumps(c, indent=2))
    return d


def reference(model_dir, ids):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    with torch.no_grad():
        return model, model(torch.tensor([ids])).logits[0].numpy().astype(np.float32)


def run_selq(logits_exe, model_dir, tokens_file, out_prefix, vocab):
    t0 = time.perf_counter()
    subprocess.run([logits_exe, str(model_dir), str(tokens_file), str(out_prefix), str(STEPS)], check=True,
                   stdout=subprocess.DEVNULL)
    secs = time.perf_counter() - t0
    return {k: np.fromfile(f"{out_prefix}.{k}.f32", dtype=np.float32).reshape(-1, vocab)
            for k in ("prefill", "cached")}, secs


def compare(label, mine, ref, tol=REL_TOL):
    return compare_logits(label, mine, ref, tol)


def routing_spread(model, ids):
    """How many distinct experts transformers' router picked per MoE layer (the test must route widely)."""
    seen = []
    hooks = []
    for mod in model.modules():
        if type(mod).__name__ == "DeepseekV3TopkRouter":
            hooks.append(mod.register_forward_hook(lambda m, i, o: seen.append(len(torch.unique(o[2])))))
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return seen


def dequantized_copy(qdir, out_dir, src_dir):
    """A float checkpoint holding the quantized checkpoint's weights decoded from its bytes."""
    from safetensors import safe_open
    from transformers_load import Stored  # the numpy decoder transformers_load checks bit for bit

    stored = Stored(qdir / "model.safetensors")
    tensors = {}
    with safe_open(str(src_dir / "model.safetensors"), "np") as f:
        for name in f.keys():
            module = name[: -len(".weight")] if name.endswith(".weight") else None
            w = stored.dequant(module) if module else None
            tensors[name] = np.ascontiguousarray(w if w is not None else f.get_tensor(name)).astype(np.float32)
            if w is not None:
                assert tuple(w.shape) == tuple(f.get_slice(name).get_shape()), name
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src_dir / "config.json").read_text())
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    quantized = sum(1 for n in tensors if n.endswith(".weight") and stored.dequant(n[:-7]) is not None)
    return quantized


KVB_ACT_RECIPE = """name: deepseek-v3-kv-b-fp8-dynamic
arch: deepseek-v3
dialect: compressed-tensors
exclude: ["@router", "@heads"]
rules:
  - match: "*self_attn.kv_b_proj"
    scheme: fp8-channel
    options: {activations: fp8-per-token}
default: null
"""
# kv_b_proj with quantized activations runs through the attention path that
# applies it to every cached latent (not absorbed). Both sides quantize its
# input per token, but that input differs by summation order (~1e-7), which
# now and then moves an FP8 code by one step: a bound, not exactness.
KVB_ACT_TOL = 2e-3


def per_token_fp8_qdq(x):
    x2 = x.reshape(-1, x.shape[-1])
    s = x2.abs().amax(-1, keepdim=True) / 448
    s = torch.where(s == 0, torch.ones_like(s), s)
    return ((x2 / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s).reshape(x.shape)


# DeepSeek-V3's own release format (quant_method "fp8", 128x128 blocks,
# dynamic activations per token and group of 128), written here with numpy.
NATIVE_FP8 = dict(BASE, hidden_size=256, intermediate_size=256, moe_intermediate_size=128, num_attention_heads=2,
                  num_key_value_heads=2, kv_lora_rank=128, q_lora_rank=128, qk_nope_head_dim=32, qk_rope_head_dim=16,
                  v_head_dim=32, num_hidden_layers=2, n_routed_experts=8, n_group=2, topk_group=1,
                  num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
                  norm_topk_prob=True, initializer_range=0.05,
                  rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                   "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 1.0})


def group128_fp8_qdq(x):
    """DeepSeek-V3's act_quant: per token and group of 128 channels, s = max(amax, 1e-4) / 448."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    out = torch.empty_like(x2)
    for b in range(0, shape[-1], 128):
        g = x2[:, b:b + 128]
        s = torch.clamp(g.abs().amax(-1, keepdim=True), min=1e-4) / 448
        out[:, b:b + 128] = (g / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s
    return out.reshape(shape)


def native_fp8_copy(src, dst):
    """src as DeepSeek ships block FP8: every linear but the router and the head F8_E4M3 with a
    weight_scale_inv per 128x128 block; returns the dequantized float checkpoint beside it."""
    from safetensors import safe_open
    from safetensors.torch import save_file as save_torch

    out, deq = {}, {}
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        for n in f.keys():
            w = f.get_tensor(n)
            if not n.endswith("_proj.weight") and not n.endswith("proj_with_mqa.weight"):
                out[n] = deq[n] = w
                continue
            rows, cols = w.shape
            br, bc = -(-rows // 128), -(-cols // 128)
            s = torch.zeros(br, bc)
            q = torch.zeros(rows, cols, dtype=torch.float8_e4m3fn)
            d = torch.zeros(rows, cols)
            for i in range(br):
                for j in range(bc):
                    blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
                    sc = blk.abs().max() / 448
                    qb = (blk / sc).to(torch.float8_e4m3fn)
                    s[i, j] = sc
                    q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = qb
                    d[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = qb.float() * sc
            out[n], out[n[: -len("weight")] + "weight_scale_inv"], deq[n] = q, s, d
    cfg = json.loads((src / "config.json").read_text())
    for d, tensors, qc in ((dst, out, True), (pathlib.Path(str(dst) + "-dequantized"), deq, False)):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        save_torch(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
        c = dict(cfg)
        if qc:
            c["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                        "weight_block_size": [128, 128]}
        (d / "config.json").write_text(json.dumps(c, indent=2))
    return dst, pathlib.Path(str(dst) + "-dequantized")


def reference_act_quant(model_dir, ids, qdq):
    """transformers on model_dir with every linear's input (routed experts' included) through qdq,
    except the router and the head, as an engine runs a checkpoint with dynamic activations."""
    experts_cls = transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Experts
    original = experts_cls.forward

    def forward(self, hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        for e in range(self.num_experts):
            tok, pos = torch.where(top_k_index == e)
            if len(tok) == 0:
                continue
            x = qdq(hidden_states[tok])
            gate, up = torch.nn.functional.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)
            y = torch.nn.functional.linear(qdq(self.act_fn(gate) * up), self.down_proj[e])
            final.index_add_(0, tok, y * top_k_weights[tok, pos, None])
        return final

    experts_cls.forward = forward
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32,
                                                                  attn_implementation="eager").eval()
        for mname, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear) and not mname.endswith("lm_head"):
                mod.register_forward_pre_hook(lambda m, args: (qdq(args[0]),))
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].numpy().astype(np.float32)
    finally:
        experts_cls.forward = original


def stacked_copy(src, dst):
    """The checkpoint with each MoE layer's routed experts as transformers 5's 3-D stacks."""
    from safetensors import safe_open

    with safe_open(str(src / "model.safetensors"), "np") as f:
        t = {n: f.get_tensor(n) for n in f.keys()}
    out, stacks = {}, {}
    for n, v in t.items():
        if ".mlp.experts." not in n:
            out[n] = v
            continue
        layer, rest = n.split(".mlp.experts.")
        e, proj = rest.split(".")[0], rest.split(".")[1]
        stacks.setdefault(layer, {}).setdefault(int(e), {})[proj] = v
    for layer, ex in stacks.items():
        order = sorted(ex)
        out[f"{layer}.mlp.experts.gate_up_proj"] = np.stack(
            [np.concatenate([ex[e]["gate_proj"], ex[e]["up_proj"]]) for e in order])
        out[f"{layer}.mlp.experts.down_proj"] = np.stack([ex[e]["down_proj"] for e in order])
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(src / "config.json", dst / "config.json")
    return dst


TOY_TEXT = (
    "The river valley was settled by farmers in the early nineteenth century. Over the following "
    "decades the town grew around a mill, a school and two churches, and in 1871 the railway "
    "reached it, which changed the local economy: timber and grain could be sent to the coast in "
    "a day, and the population doubled within twenty years. The old mill closed in 1923 and is "
    "now a museum that describes the history of the region and its people."
)


def eval_and_calibrate(selq_exe, work, base, quant, recipe, params):
    """selq eval and calibrate on a DeepSeek-V3 checkpoint (tokenizer trained here)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    # A toy text for a toy model: the tokenizer is trained on it, and the prompts below open its sentences.
    text = (TOY_TEXT + "\n") * 6
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=params["vocab_size"], show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        special_tokens=["<|endoftext|>"]))
    for d in (base, quant):
        tok.save(str(d / "tokenizer.json"))
    (work / "text.txt").write_text(text)
    (work / "prompts.jsonl").write_text("\n".join(json.dumps({"question": q}) for q in
                                                  ["The river valley", "The old mill", "In 1871 the railway"]))
    ok = True
    t0 = time.perf_counter()
    out = subprocess.run([selq_exe, "eval", str(base), str(quant), "--text", str(work / "text.txt"), "--context", "64",
                          "--prompts", str(work / "prompts.jsonl"), "--gen-tokens", "16", "--draft-k", "3",
                          "--no-base-cache", "--quiet", "--json"], check=True, capture_output=True, text=True).stdout
    ev = json.loads(out)
    q = ev["quantized"][0]
    plan = json.loads(subprocess.run([selq_exe, "plan", str(base), "--recipe", str(recipe), "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    print(f"  selq eval: {time.perf_counter() - t0:.2f} s; base ppl {ev['base']['perplexity']:.2f}, quantized ppl "
          f"{q['perplexity']:.2f}, KL mean {q['kl_mean']:.4f}, top-1 {q['top1_agreement']:.3f}, draft tokens "
          f"accepted per step {q['accepted_greedy']:.2f} of 3 ({q['spec_steps']} steps); bits/w {q['linear_bits_per_weight']:.4f} "
          f"(plan {plan['bits_per_weight']:.4f})")
    if abs(q["linear_bits_per_weight"] - plan["bits_per_weight"]) > 1e-9:
        print("  FAIL: eval's bits per weight is not plan's")
        ok = False
    cal_path = work / "cal.json"
    subprocess.run([selq_exe, "calibrate", str(base), "--calibration-text", str(work / "text.txt"), "--calibration-tokens", "3",
                    "-o", str(cal_path), "--quiet"], check=True)
    cal = json.loads(cal_path.read_text())
    amax, unreached = cal["activation_amax"], cal["unreached_experts"]
    experts = [m for m in amax if ".mlp.experts." in m]
    n_expected = (params["num_hidden_layers"] - params["first_k_dense_replace"]) * params["n_routed_experts"] * 3
    print(f"  selq calibrate on 3 tokens: {len(amax)} modules, {len(experts)} expert linears "
          f"({len(unreached)} unreached, filled by rule: {cal['unreached_expert_rule']!r})")
    if len(experts) != n_expected or not all(amax[m] > 0 for m in amax) or not unreached:
        print(f"  FAIL: expected {n_expected} expert linears with positive amax and some unreached")
        ok = False
    for m, src in unreached.items():
        layer, proj = m.split(".mlp.experts.")[0], m.rsplit(".", 1)[1]
        same = [amax[k] for k in experts if k.startswith(layer + ".mlp.experts.") and k.endswith("." + proj)
                and k not in unreached]
        if amax[m] != max(same) or amax[src] != amax[m] or cal["expert_tokens"][m.rsplit(".", 1)[0]] != 0:
            print(f"  FAIL: {m}: amax {amax[m]} is not the layer's largest {proj} amax {max(same)}")
            ok = False
    from safetensors.numpy import load_file
    moments = load_file(str(work / cal["input_moments"]["file"]))
    if sorted(moments) != sorted(amax) or not all((v >= 0).all() and np.isfinite(v).all() for v in moments.values()):
        print("  FAIL: the moments file does not hold one finite, non-negative vector per calibrated linear")
        ok = False
    for m in unreached:
        layer, proj = m.split(".mlp.experts.")[0], m.rsplit(".", 1)[1]
        reached = [moments[k].astype(np.float64) for k in experts
                   if k.startswith(layer + ".mlp.experts.") and k.endswith("." + proj) and k not in unreached]
        want = np.mean(reached, axis=0).astype(np.float32)
        if not np.allclose(moments[m], want, rtol=1e-6, atol=0):
            print(f"  FAIL: {m}: moments are not the mean of the layer's reached {proj} experts")
            ok = False
    print(f"  input second moments: {len(moments)} linears, {len(unreached)} unreached experts given their "
          f"layer's mean ({cal['unreached_expert_moments_rule'][:40]}...)")
    ok &= whole_path(selq_exe, work, base)
    return ok


def synth_checkpoint(logits_exe, selq_exe, work):
    """selq synth's DeepSeek-V3 (BF16, byte-level tokenizer): transformers' logits and the tokenizers library's ids."""
    from tokenizers import Tokenizer
    d = work / "synth-dsv3"
    if d.exists():
        shutil.rmtree(d)
    subprocess.run([selq_exe, "synth", "--arch", "deepseek-v3", "--scale", "64", "--layers", "3", "--experts", "8",
                    "--vocab", "512", str(d)], check=True, stdout=subprocess.DEVNULL)
    cfg = json.loads((d / "config.json").read_text())
    text = "The old mill closed in 1923; now it is a museum. Ünïcödé and emoji 🙂 too."
    hf_ids = Tokenizer.from_file(str(d / "tokenizer.json")).encode(text).ids
    ok = hf_ids == list(text.encode("utf-8"))
    print(f"  tokenizers: {len(hf_ids)} ids for {len(text.encode('utf-8'))} bytes, one per byte: {ok}")
    ids_file = work / "synth-tokens.txt"
    ids = hf_ids[:N_TOKENS] if len(hf_ids) >= N_TOKENS else (hf_ids * (N_TOKENS // len(hf_ids) + 1))[:N_TOKENS]
    ids_file.write_text(" ".join(map(str, ids)))
    model, ref = reference(d, ids)
    print(f"  transformers loads it: {type(model).__name__}, {cfg['n_routed_experts']} experts in {cfg['n_group']} "
          f"groups, top-{cfg['num_experts_per_tok']} of {cfg['topk_group']} groups")
    del model
    mine, _ = run_selq(logits_exe, d, ids_file, work / "synth-selq", ref.shape[1])
    for kind in ("prefill", "cached"):
        ok &= compare(kind, mine[kind], ref)
    return ok


def whole_path(selq_exe, work, base):
    """calibrate -> sensitivity (activation-aware, measured) -> plan -> quantize -> verify -> eval on the MoE."""
    ok = True
    text = work / "text.txt"
    cal = work / "cal-path.json"

    def run(*a):
        r = subprocess.run([selq_exe, *map(str, a)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"selq {' '.join(map(str, a[:2]))} failed: {r.stderr.strip()}")
        return r.stdout
    t0 = time.perf_counter()
    run("calibrate", base, "--calibration-text", text, "--calibration-tokens", "128", "--calibration-context", "64", "-o", cal, "--quiet")
    mixes = []
    for tier in ("activation-aware", "measured"):
        sens = work / f"sens-{tier}.json"
        run("sensitivity", base, "--tier", tier, "--calibration-text", text, "--calibration-tokens", "128", "--calibration-context", "64",
            "--candidates", "fp8-w8a8,nvfp4-w4a16,mxfp4-w4a16", "-o", sens, "--quiet")
        s = json.loads(sens.read_text())
        units = s["units"] if isinstance(s.get("units"), list) else []
        expert_units = [u for u in units if ".mlp.experts" in json.dumps(u)]
        mix = work / f"mix-{tier}.yaml"
        # The float32 base is 32 bits/w; its smallest mix here is ~7.2 (some dims keep float).
        plan = json.loads(run("plan", base, "--sensitivity", sens, "--target-bpw", "10", "--emit-recipe", mix, "--json"))
        print(f"  sensitivity {tier}: {len(units)} units ({len(expert_units)} holding routed experts); "
              f"plan at 10 bits/w: {plan['mix']['bits_per_weight']:.3f}")
        if not expert_units or plan["mix"]["bits_per_weight"] > 10.0 + 1e-9:
            print(f"  FAIL: {tier}: no expert units scored, or the plan is over its budget")
            ok = False
        mixes.append(mix)
    outs = []
    for i, mix in enumerate(mixes):
        d = work / f"path-mix{i}"
        run("quantize", base, d, "--recipe", mix, "--quiet", "--force")
        outs.append(d)
    nvfp4 = work / "path-nvfp4.yaml"
    nvfp4.write_text(PATH_NVFP4_RECIPE)
    for rounding in ("nearest", "weighted", "gptq"):
        d = work / f"path-nvfp4-{rounding}"
        run("quantize", base, d, "--recipe", nvfp4, "--rounding", rounding, "--calibration", cal, "--quiet", "--force",
            "--calibration-text", text, "--calibration-tokens", "256", "--calibration-context", "64")
        outs.append(d)
    # GPTQ per expert: each routed expert's Hessian from the tokens routed to it; an expert none reached is mse's.
    gptq_cal = json.loads((work / "path-nvfp4-gptq" / "selq-manifest.json").read_text())["gptq_calibration"]
    print(f"  gptq: {gptq_cal['tokens']} calibration tokens; {len(gptq_cal.get('unreached', []))} expert linear(s) "
          f"no token reached")
    for d in outs:
        v = subprocess.run([selq_exe, "verify", str(d), "--against", str(base)], capture_output=True, text=True)
        if v.returncode != 0:
            print(f"  FAIL: selq verify {d.name}: {v.stdout[-400:]}{v.stderr[-400:]}")
            ok = False
    # Held out: eval refuses text that shares a run of words with a calibration.
    heldout = work / "heldout.txt"
    heldout.write_text(" ".join(f"On day {i} the {w} crossed the {v} near the {u} and waited for news." for i, (w, v, u)
                                in enumerate(zip(["miller", "teacher", "farmer", "clerk"] * 8,
                                                 ["bridge", "square", "field", "road"] * 8,
                                                 ["church", "school", "station", "mill"] * 8))))
    ev = json.loads(run("eval", base, *outs, "--text", heldout, "--context", "64", "--max-tokens", "512",
                        "--prompts", work / "prompts.jsonl", "--gen-tokens", "8", "--draft-k", "3", "--quiet", "--json",
                        "--no-base-cache"))
    for q in ev["quantized"]:
        kl = q["intervals"]["text"]["kl_mean"]
        print(f"  {pathlib.Path(q['path']).name}: {q['linear_bits_per_weight']:.3f} bits/w, KL {q['kl_mean']:.4f} "
              f"[{kl['lo']:.4f}, {kl['hi']:.4f}], top-1 {q['top1_agreement']:.3f}")
        if not (np.isfinite(q["kl_mean"]) and q["kl_mean"] >= 0):
            ok = False
    by = {pathlib.Path(q["path"]).name: q["kl_mean"] for q in ev["quantized"]}
    paired = {(pathlib.Path(p["a"]).name, pathlib.Path(p["b"]).name): p["b_minus_a"]["kl_mean"] for p in ev["paired"]}
    g = paired[("path-nvfp4-nearest", "path-nvfp4-gptq")]
    print(f"  whole path: {time.perf_counter() - t0:.1f} s; weighted - nearest NVFP4 KL "
          f"{by['path-nvfp4-weighted'] - by['path-nvfp4-nearest']:+.4f}; gptq - nearest {g['value']:+.4f} "
          f"[{g['lo']:+.4f}, {g['hi']:+.4f}]")
    if not (g["hi"] is not None and g["hi"] < 0):
        print("  FAIL: gptq does not beat nearest by the paired interval on the MoE")
        ok = False
    return ok


# Routed and shared experts and the dense MLP NVFP4 weight-only, attention kept.
PATH_NVFP4_RECIPE = """name: path-nvfp4
arch: deepseek-v3
exclude: ["@router", "@heads"]
rules:
  - match: "*mlp.*"
    scheme: nvfp4
    options: {activations: none}
default: null
"""


def main():
    logits_exe, selq_exe, workdir = sys.argv[1:4]
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    work = pathlib.Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(36)
    ids = [int(t) for t in rng.integers(0, BASE["vocab_size"], N_TOKENS)]
    tokens_file = work / "tokens.txt"
    tokens_file.write_text(" ".join(map(str, ids)))
    print(f"{N_TOKENS} random tokens, the last {STEPS} decoded one at a time; transformers {transformers.__version__}, "
          f"torch {torch.__version__}")
    ok = True
    dirs = {}
    for name, params in CONFIGS.items():
        print(f"== {name}")
        d = dirs[name] = build(name, params, work)
        model, ref = reference(d, ids)
        spread = routing_spread(model, ids)
        print(f"  experts reached per MoE layer: {spread} of {params['n_routed_experts']}")
        del model
        mine, secs = run_selq(logits_exe, d, tokens_file, work / f"{name}-selq", ref.shape[1])
        print(f"  selq runtime: {secs:.2f} s (load + prefill + prefill/decode)")
        for kind in ("prefill", "cached"):
            ok &= compare(kind, mine[kind], ref)

    print("== routed experts stored as 3-D stacks (gate_up_proj [E, 2I, H], down_proj [E, H, I])")
    name = "dense2-qproj-default"
    stacked = stacked_copy(dirs[name], work / f"{name}-stacked")
    model, ref = reference(stacked, ids)
    del model
    mine, secs = run_selq(logits_exe, stacked, tokens_file, work / f"{name}-stacked-selq", ref.shape[1])
    per_expert = np.fromfile(work / f"{name}-selq.prefill.f32", dtype=np.float32).reshape(ref.shape)
    same = bool((mine["prefill"] == per_expert).all())
    print(f"  selq: stacked logits {'equal' if same else 'DIFFER FROM'} the per-expert checkpoint's bit for bit")
    ok &= same
    for kind in ("prefill", "cached"):
        ok &= compare(kind, mine[kind], ref)

    print("== quantized (NVFP4 experts, FP8 channel elsewhere; weight-only, compressed-tensors)")
    first = next(iter(CONFIGS))
    src = dirs[first]
    recipe = work / "quant.yaml"
    recipe.write_text(QUANT_RECIPE)
    qdir = work / f"{first}-quant"
    subprocess.run([selq_exe, "quantize", str(src), str(qdir), "--recipe", str(recipe), "--quiet", "--force"],
                   check=True)
    deq = work / f"{first}-dequantized"
    n = dequantized_copy(qdir, deq, src)
    qcfg = json.loads((qdir / "config.json").read_text())["quantization_config"]
    print(f"  {n} linears quantized; config groups: "
          + ", ".join(f"{k}={g.get('format')}" for k, g in qcfg["config_groups"].items()))
    model, ref = reference(deq, ids)
    del model
    mine, secs = run_selq(logits_exe, qdir, tokens_file, work / "quant-selq", ref.shape[1])
    print(f"  selq runtime on the quantized checkpoint: {secs:.2f} s")
    for kind in ("prefill", "cached"):
        ok &= compare(kind, mine[kind], ref)
    _, base_ref = reference(src, ids)
    print(f"  (quantization itself moves transformers' logits by rel "
          f"{float(np.abs(ref - base_ref).max()) / float(np.abs(base_ref).max()):.3f})")

    print("== kv_b_proj FP8 with dynamic per-token FP8 activations (kv_b applied to every cached latent)")
    recipe_kvb = work / "kvb.yaml"
    recipe_kvb.write_text(KVB_ACT_RECIPE)
    qkvb = work / f"{first}-kvb"
    subprocess.run([selq_exe, "quantize", str(src), str(qkvb), "--recipe", str(recipe_kvb), "--quiet", "--force"],
                   check=True)
    deq_kvb = work / f"{first}-kvb-dequantized"
    dequantized_copy(qkvb, deq_kvb, src)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(deq_kvb), dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    for mname, mod in model.named_modules():
        if mname.endswith("kv_b_proj"):
            mod.register_forward_pre_hook(lambda m, args: (per_token_fp8_qdq(args[0]),))
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy().astype(np.float32)
    del model
    _, weight_only = reference(deq_kvb, ids)
    print(f"  (the activation QDQ itself moves transformers' logits by rel "
          f"{float(np.abs(ref - weight_only).max()) / float(np.abs(ref).max()):.2e})")
    mine, secs = run_selq(logits_exe, qkvb, tokens_file, work / "kvb-selq", ref.shape[1])
    for kind in ("prefill", "cached"):
        ok &= compare(kind, mine[kind], ref, KVB_ACT_TOL)

    print("== DeepSeek-V3's block FP8 (quant_method fp8, 128x128 blocks, dynamic per-token-group-128 activations)")
    nat_src = build("native-fp8-src", NATIVE_FP8, work)
    nat, nat_deq = native_fp8_copy(nat_src, work / "native-fp8")
    ref = reference_act_quant(nat_deq, ids, group128_fp8_qdq)
    _, weight_only = reference(nat_deq, ids)
    print(f"  (the activation QDQ itself moves transformers' logits by rel "
          f"{float(np.abs(ref - weight_only).max()) / float(np.abs(ref).max()):.2e})")
    mine, secs = run_selq(logits_exe, nat, tokens_file, work / "native-selq", ref.shape[1])
    for kind in ("prefill", "cached"):
        ok &= compare(kind, mine[kind], ref, KVB_ACT_TOL)

    print("== selq synth --arch deepseek-v3: its config and byte-level tokenizer, loaded by transformers and tokenizers")
    ok &= synth_checkpoint(logits_exe, selq_exe, work)

    print("== selq eval and calibrate on the DeepSeek-V3 checkpoints")
    ok &= eval_and_calibrate(selq_exe, work, src, qdir, recipe, CONFIGS[first])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
