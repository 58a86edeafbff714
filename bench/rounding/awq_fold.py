"""AWQ-style per-input-channel scaling folded into the previous op, as an experiment
(docs/QUALITY.md, "AWQ-style scaling, tried"): W' = W diag(s) and the previous op's
output divided by s (the RMSNorm weight before q/k/v and gate/up; up_proj's rows before
down_proj; o_proj is left, its input is GQA-shared v heads), s = rms(x)^alpha over the
input channels, normalised to geometric mean 1, rms from `selq calibrate`'s moments.
One alpha for the model (AWQ searches it per layer). Writes a checkpoint of the same
dtype that computes the same function up to its rounding.

  awq_fold.py SRC CALIB.json ALPHA DST"""
import json, shutil, sys, pathlib
import torch
from safetensors.torch import load_file, save_file

src, calib, alpha, dst = pathlib.Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), pathlib.Path(sys.argv[4])
cj = json.load(open(calib))
mom = load_file(str(pathlib.Path(calib).parent / cj["input_moments"]["file"]))
t = load_file(str(src / "model.safetensors"))
cfg = json.load(open(src / "config.json"))
L = cfg["num_hidden_layers"]

def scales(module):
    ms = mom[module].double().clamp_min(1e-12).sqrt() ** alpha
    return ms / torch.exp(torch.log(ms).mean())

out = {k: v.float() for k, v in t.items()}
for l in range(L):
    p = f"model.layers.{l}."
    s = scales(p + "self_attn.q_proj")
    out[p + "input_layernorm.weight"] /= s.float()
    for m in ("q_proj", "k_proj", "v_proj"):
        out[p + f"self_attn.{m}.weight"] *= s.float()[None, :]
    s = scales(p + "mlp.gate_proj")
    out[p + "post_attention_layernorm.weight"] /= s.float()
    for m in ("gate_proj", "up_proj"):
        out[p + f"mlp.{m}.weight"] *= s.float()[None, :]
    s = scales(p + "mlp.down_proj")
    out[p + "mlp.up_proj.weight"] /= s.float()[:, None]
    out[p + "mlp.down_proj.weight"] *= s.float()[None, :]
if dst.exists(): shutil.rmtree(dst)
dst.mkdir()
save_file({k: v.to(t[k].dtype) for k, v in out.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
for f in src.iterdir():
    if f.name != "model.safetensors" and f.is_file(): shutil.copy(f, dst / f.name)
print("wrote", dst)
