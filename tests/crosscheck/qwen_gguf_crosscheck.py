"""selq's GGUF reading and import of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) vs gguf-py.

1. Dequantization, bit for bit, of every tensor of blocks 0 and 27 and the
   final norm: that covers each type the file uses (Q4_K, Q6_K, F32; Q4_K_M
   gives ffn_down and attn_v Q6_K in the first and last blocks). The 151936-row
   embedding and head (Q4_K, Q6_K, 930 MB each in F32) are left to step 2.
2. The qwen_import fixture's checkpoint: config.json agrees with the metadata
   (Qwen2ForCausalLM, 12/2 heads, rope theta 1e6, untied head because the file
   has output.weight); the same tensors, plus token_embd and output, are
   gguf-py's values rounded to BF16 (RNE) under their HF names, with Q/K rows as
   stored (qwen2 runs NEOX RoPE, HF's rotate-half, so llama.cpp's converter did
   not permute them); q/k/v biases are there and no other tensor is.

usage: qwen_gguf_crosscheck.py DUMP_EXE WORKDIR IMPORT_DIR
Exit 77 (ctest skip) when a reference is missing locally; under CI=true it fails.
"""
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xref  # noqa: E402
from xref import missing, qwen_gguf  # noqa: E402

try:
    import numpy as np
    import gguf
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover
    missing(f"python package ({e}); pip install gguf numpy")

from gguf_crosscheck import to_bf16_bits  # noqa: E402  (after the import check above)

SUB = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
       "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
       "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}


def hf_name(n):
    if n in TOP:
        return TOP[n]
    _, layer, mod, kind = n.split(".")
    return f"model.layers.{layer}.{SUB[mod]}.{kind}"


def safetensors_views(path):
    """name -> uint16 array over a read-only memory map (BF16 bits)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, t = e["data_offsets"]
        out[name] = (e["dtype"], mm[8 + n + b:8 + n + t].view(np.uint16).reshape(e["shape"]))
    return out


def check_dequant(exe, path, reader, names, workdir):
    out = pathlib.Path(workdir) / "subset.f32"
    subprocess.run([exe, str(path), str(out), *names], check=True)
    ours = np.fromfile(out, dtype=np.float32)
    out.unlink()
    bad, pos, types = xref.compare_dequantized([t for t in reader.tensors if t.name in names], ours)
    print(f"dequantization: {len(names)} tensors {types}, {pos} values, {bad} mismatching tensors")
    return bad == 0


def check_config(cfg, reader):
    meta = lambda k: reader.fields[k].contents()
    want = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "hidden_size": meta("qwen2.embedding_length"), "intermediate_size": meta("qwen2.feed_forward_length"),
            "num_hidden_layers": meta("qwen2.block_count"), "num_attention_heads": meta("qwen2.attention.head_count"),
            "num_key_value_heads": meta("qwen2.attention.head_count_kv"),
            "max_position_embeddings": meta("qwen2.context_length"),
            "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
            "tie_word_embeddings": False, "use_sliding_window": False,
            "bos_token_id": meta("tokenizer.ggml.bos_token_id"), "eos_token_id": meta("tokenizer.ggml.eos_token_id")}
    bad = [k for k, v in want.items() if cfg.get(k) != v]
    for k, meta_key in (("rms_norm_eps", "qwen2.attention.layer_norm_rms_epsilon"), ("rope_theta", "qwen2.rope.freq_base")):
        if np.float32(cfg[k]) != np.float32(meta(meta_key)):
            bad.append(k)
    print(f"config.json vs metadata: {len(want) + 2} fields, mismatching {bad}; "
          f"heads {cfg['num_attention_heads']}/{cfg['num_key_value_heads']}, theta {cfg['rope_theta']}")
    return not bad


def check_import(import_dir, reader, names, layers):
    st = safetensors_views(import_dir / "model.safetensors")
    ok = True
    want_names = {hf_name(t.name) for t in reader.tensors}
    if set(st) != want_names:
        print(f"MISMATCH: tensor names, extra {sorted(set(st) - want_names)[:5]}, missing {sorted(want_names - set(st))[:5]}")
        ok = False
    biases = [n for n in st if n.endswith(".bias")]
    if len(biases) != 3 * layers or any(not n.split(".")[-2] in ("q_proj", "k_proj", "v_proj") for n in biases):
        print(f"MISMATCH: biases {len(biases)}")
        ok = False
    bad = 0
    for t in reader.tensors:
        if t.name not in names:
            continue
        dtype, got = st[hf_name(t.name)]
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(n) for n in reversed(t.shape)])
        if dtype != "BF16" or got.shape != w.shape or not np.array_equal(got, to_bf16_bits(w).reshape(w.shape)):
            bad += 1
            print(f"MISMATCH import {t.name} -> {hf_name(t.name)} ({dtype}, {got.shape} vs {w.shape})")
    print(f"import: {len(st)} tensors ({len(biases)} biases), {len(names)} compared with gguf-py, {bad} mismatching")
    return ok and bad == 0


def main():
    exe, workdir, import_dir = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    workdir.mkdir(parents=True, exist_ok=True)
    path = qwen_gguf()
    if not (import_dir / "model.safetensors").is_file():
        print(f"FAIL: {import_dir} holds no import (the qwen_import fixture did not run?)")
        return 1
    reader = gguf.GGUFReader(path)
    blocks = [t.name for t in reader.tensors if t.name.startswith(("blk.0.", "blk.27."))] + ["output_norm.weight"]
    ok = check_dequant(exe, path, reader, blocks, workdir)
    ok = check_config(json.loads((import_dir / "config.json").read_text()), reader) and ok
    ok = check_import(import_dir, reader, set(blocks) | {"token_embd.weight", "output.weight"},
                      int(reader.fields["qwen2.block_count"].contents())) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
