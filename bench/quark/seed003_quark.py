"""Seed 003's Quark run, as published: AMD Quark's own `kimi_k3` LLMTemplate
(with its exclusion list), global scheme "mxfp4", `*self_attn*` overridden to
"ptpc_fp8", then Quark's file-to-file `direct_quantize_checkpoint`. Runs in the
peers venv (bench/peers/setup_peers.sh installs amd-quark 0.13).

  seed003_quark.py SRC DST [--threads N]
"""
import argparse
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    from quark.torch import LLMTemplate, ModelQuantizer

    template = LLMTemplate.get("kimi_k3")
    config = template.get_config(scheme="mxfp4", layer_config={"*self_attn*": "ptpc_fp8"})
    ModelQuantizer(config).direct_quantize_checkpoint(
        pretrained_model_path=a.src, save_path=a.dst, device="cpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
