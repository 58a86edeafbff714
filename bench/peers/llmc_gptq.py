"""llm-compressor's GPTQ (oneshot + GPTQModifier) on a checkpoint, on CPU,
calibrated on the same tokens `selq quantize --rounding gptq` uses: the first
--tokens ids of --calib under the model's tokenizer.json (no BOS added), in
sequences of --context. --scheme: a compressed-tensors preset (NVFP4A16,
MXFP4A16, W4A16: int4 group 128) or W4A16_G64 (int4 symmetric, group 64, which
SmolLM2's 576-wide layers take). GPTQ settings are llm-compressor's defaults.
Runs in the peers venv; used by bench/peers/gptq_side_by_side.sh.

  llmc_gptq.py --model BASE --calib calib.txt --tokens 8192 --context 512 --out DIR [--scheme NVFP4A16]
"""
import argparse
import glob
import json
import os
import shutil
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--scheme", default="NVFP4A16")
    a = ap.parse_args()

    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    with open(a.calib, encoding="utf-8") as f:
        ids = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json")).encode(f.read()).ids
    ids = ids[: a.tokens]
    seqs = [ids[i : i + a.context] for i in range(0, len(ids), a.context)]
    print(f"calibration: {len(ids)} tokens in {len(seqs)} sequences, first ids {ids[:4]}",
          file=sys.stderr)
    ds = Dataset.from_dict({"input_ids": seqs, "attention_mask": [[1] * len(s) for s in seqs]})

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype),
                                                 device_map="cpu")
    if a.scheme == "W4A16_G64":
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
        group64 = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
            num_bits=4, type="int", symmetric=True, strategy="group", group_size=64))
        recipe = GPTQModifier(config_groups={"group_0": group64}, ignore=["lm_head"])
    else:
        recipe = GPTQModifier(targets="Linear", scheme=a.scheme, ignore=["lm_head"])
    print(f"recipe: block_size={recipe.block_size} dampening_frac={recipe.dampening_frac} "
          f"actorder={recipe.actorder}", file=sys.stderr)
    # Unshuffled, so that reruns sum the Hessians in the same order.
    oneshot(model=model, dataset=ds, recipe=recipe, num_calibration_samples=len(seqs),
            max_seq_length=a.context, shuffle_calibration_samples=False)
    model.save_pretrained(a.out, save_compressed=True)
    # selq eval wants the tokenizer beside the weights.
    for f in glob.glob(os.path.join(a.model, "tokenizer*")) + \
            glob.glob(os.path.join(a.model, "generation_config.json")):
        shutil.copy(f, a.out)
    qc = json.load(open(os.path.join(a.out, "config.json")))["quantization_config"]
    print("saved quantization_config weights:",
          json.dumps(qc["config_groups"]["group_0"]["weights"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
