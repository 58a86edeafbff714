"""Seed 003's Quark run, as published: AMD Quark's own `kimi_k3` LLMTemplate
(with its exclusion list), global scheme "mxfp4", `*self_attn*` overridden to
"ptpc_fp8", then Quark's file-to-file `direct_quantize_checkpoint`. Runs in the
peers venv (bench/peers/setup_peers.sh installs amd-quark 0.13).

  seed003_quark.py SRC DST [--threads N] [--read-back DIR]

--read-back DIR: afterwards, parse DIR's quantization_config (selq's output) with
Quark's own QConfig.from_dict, in the same process (one Quark import).
"""
import argparse
import json
import os
import sys


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
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    run(a.src, a.dst)
    if a.read_back:
        read_back(a.read_back)
    return 0


if __name__ == "__main__":
    sys.exit(main())
