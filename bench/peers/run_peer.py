"""Runs one peer quantizer on a safetensors checkpoint directory, the way its
documentation shows, on CPU with a given thread count. Used by bench/compare.sh
and for bench/peers/conformance.py. Runs in the peers venv.

  run_peer.py PEER SCHEME SRC DST [--threads N]
  run_peer.py PEER SCHEME SRC DST --mlp-only     (attention left in BF16 too)
  PEER SCHEME: llmcompressor {FP8_DYNAMIC,FP8_BLOCK,NVFP4A16,MXFP4,w8a16,w4a16-g32}
               quark {mxfp4,ptpc_fp8}
               modelopt nvfp4

Every peer is told to leave alone what selq's recipes leave alone by default:
embeddings, lm_head and other *_head, routers (mlp.gate); norms are 1-D.
--mlp-only also leaves the attention projections alone: the source of an
in-place attention upgrade (tests/e2e/test_peer_sources.py).
"""
import argparse
import copy
import os
import sys

# Same exclusions, in each peer's own pattern syntax.
IGNORE_RE = [r".*embed_tokens$", r"^lm_head$", r".*_head$", r".*\.mlp\.gate$"]
ATTENTION_RE = r".*\.self_attn\..*"


# Schemes that are not llm-compressor presets: the config_groups given to a
# QuantizationModifier, run through oneshot on the transformers model (RTN, no
# calibration data, no GPTQ) and saved compressed.
LLMC_GROUPS = {
    # INT8 symmetric, one scale per output channel, weight-only (BF16 activations).
    "w8a16": {"group_0": {"targets": ["Linear"], "input_activations": None,
                          "weights": {"num_bits": 8, "type": "int", "symmetric": True,
                                      "strategy": "channel"}}},
    # INT4 symmetric, one scale per 32 inputs, weight-only, saved pack-quantized:
    # the form Kimi-K2-Thinking ships.
    "w4a16-g32": {"group_0": {"targets": ["Linear"], "input_activations": None,
                              "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                          "strategy": "group", "group_size": 32}}},
}


def save_tokenizer(src, dst):
    """As the peers' examples do after saving the model (model_free_ptq copies it itself)."""
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(src).save_pretrained(dst)


def llmcompressor_modifier(scheme, src, dst, threads, ignore):
    import torch
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16, device_map="cpu")
    recipe = QuantizationModifier(config_groups=LLMC_GROUPS[scheme],
                                  ignore=["re:" + r for r in ignore])
    oneshot(model=model, recipe=recipe)
    model.save_pretrained(dst, save_compressed=True)
    save_tokenizer(src, dst)


def llmcompressor(scheme, src, dst, threads, ignore):
    if scheme in LLMC_GROUPS:
        return llmcompressor_modifier(scheme, src, dst, threads, ignore)
    from llmcompressor import model_free_ptq
    model_free_ptq(model_stub=src, save_directory=dst, scheme=scheme,
                   ignore=["re:" + r for r in ignore], max_workers=threads, device="cpu")


def quark(scheme, src, dst, threads, ignore):
    # Quark's file-to-file flow: one safetensors shard at a time, no model class.
    from quark.torch import ModelQuantizer
    from quark.torch.quantization.config.config import QConfig
    from quark.torch.quantization.config.template import MXFP4Scheme, PTPCFP8Scheme
    layer = {"mxfp4": MXFP4Scheme, "ptpc_fp8": PTPCFP8Scheme}[scheme]().config
    exclude = ["*embed_tokens", "lm_head", "*_head", "*.mlp.gate"]
    if ATTENTION_RE in ignore:
        exclude.append("*self_attn*")
    ModelQuantizer(QConfig(global_quant_config=layer, exclude=exclude)).direct_quantize_checkpoint(
        pretrained_model_path=src, save_path=dst, device="cpu")


def modelopt(scheme, src, dst, threads, ignore):
    # ModelOpt has no file-to-file flow: it loads the model through transformers,
    # inserts quantizers, and exports. Weight-only NVFP4 needs no calibration
    # data, so the forward loop is omitted.
    import torch
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM
    assert scheme == "nvfp4"
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16, device_map="cpu")
    cfg = copy.deepcopy(mtq.W4A16_NVFP4_CFG)
    if ATTENTION_RE in ignore:  # later entries of quant_cfg override earlier ones
        cfg["quant_cfg"].append({"quantizer_name": "*self_attn*", "enable": False})
    model = mtq.quantize(model, cfg)
    export_hf_checkpoint(model, export_dir=dst)
    save_tokenizer(src, dst)


PEERS = {"llmcompressor": llmcompressor, "quark": quark, "modelopt": modelopt}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=sorted(PEERS))
    ap.add_argument("scheme"); ap.add_argument("src"); ap.add_argument("dst")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--mlp-only", action="store_true", help="leave the attention projections in BF16 too")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    PEERS[a.peer](a.scheme, a.src, a.dst, a.threads, IGNORE_RE + [ATTENTION_RE] * a.mlp_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
