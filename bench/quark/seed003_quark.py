"""Seed 003's Quark run, as published: AMD Quark's own `kimi_k3` LLMTemplate
(with its exclusion list), global scheme "mxfp4", `*self_attn*` overridden to
"ptpc_fp8", then Quark's file-to-file `direct_quantize_checkpoint`. Runs in the
peers venv (bench/peers/setup_peers.sh installs amd-quark 0.13).

  seed003_quark.py SRC DST [--threads N] [--read-back DIR] [--seed-layout DST2]

--read-back DIR: afterwards, parse DIR's quantization_config (selq's output) with
Quark's own QConfig.from_dict, in the same process (one Quark import).
--seed-layout DST2: then the seed's own layout into DST2: its script registers a
`kimi_k3` template whose exclusions add the shared experts to Quark 0.13's
(`*block_sparse_moe.shared_experts*`, the released checkpoint's name; selq's
synthetic Kimi-K3 spells them `mlp.shared_experts`, so that spelling is added
too), then the same get_config and direct_quantize_checkpoint.
"""
import argparse
import json
import os
import sys


# The seed card: the shared experts stay BF16.
SEED_EXTRA_EXCLUDES = ["*block_sparse_moe.shared_experts*", "*mlp.shared_experts*"]


def register_seed_template():
    from quark.torch import LLMTemplate

    base = LLMTemplate.get("kimi_k3")
    LLMTemplate.register_template(LLMTemplate(
        model_type="kimi_k3", kv_layers_name=base.kv_layers_name, q_layer_name=base.q_layer_name,
        gate_up_layers_name=base.gate_up_layers_name,
        exclude_layers_name=list(base.exclude_layers_name) + SEED_EXTRA_EXCLUDES,
        f2f_weight_converters=base.f2f_weight_converters))


def run(src, dst):
    from quark.torch import LLMTemplate, ModelQuantizer

    template = LLMTemplate.get("kimi_k3")
    config = template.get_config(scheme="mxfp4", layer_config={"*self_attn*": "ptpc_fp8"})
    ModelQuantizer(config).direct_quantize_checkpoint(pretrained_model_path=src, save_path=dst, device="cpu")


def read_back(directory):
    from quark.torch.quantization.config.config import QConfig

    with open(os.path.join(directory, "config.json")) as f:
        QConfig.from_dict(json.load(f)["quantization_config"])
    print(f"Quark's QConfig.from_dict reads {directory}/config.json", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--read-back")
    ap.add_argument("--seed-layout")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    run(a.src, a.dst)
    if a.read_back:
        read_back(a.read_back)
    if a.seed_layout:
        register_seed_template()
        run(a.src, a.seed_layout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
