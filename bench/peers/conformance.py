"""Tensor-by-tensor comparison of selq's output with a peer's on the same
checkpoint and scheme: names, dtypes, shapes, bytes; the config.json
quantization_config fields that differ (targets and ignore lists left out, they
name the same modules in different ways); where bytes differ, the
fraction of differing elements and the largest difference of the dequantized
weights (absolute, and in quantization steps of the coarser scale), plus each
tool's error against the BF16 source so a difference can be judged.

Runs in the peers venv (torch + safetensors). Usage:
  conformance.py SRC SELQ_OUT PEER_OUT [--json]
"""
import argparse
import json
import pathlib
import sys

import torch
from safetensors import safe_open

QUANT_SUFFIXES = ("weight_packed", "weight_scale", "weight_scale_2", "weight_global_scale",
                  "input_scale", "input_global_scale", "weight_scale_inv", "weight_shape",
                  "weight_zero_point", "input_scale_2")
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def load(d):
    out = {}
    for f in sorted(pathlib.Path(d).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as s:
            for k in s.keys():
                out[k] = s.get_tensor(k)
    return out


def module_of(name):
    for suf in QUANT_SUFFIXES + ("weight",):
        if name.endswith("." + suf):
            return name[: -len(suf) - 1], suf
    return name, None


def unpack_fp4(packed):
    # Low nibble holds the even element: the layout of compressed-tensors,
    # Quark and ModelOpt alike (docs/FORMAT_RULES.md §3, §5, §6).
    lo = E2M1[(packed & 0x0F).long()]
    hi = E2M1[(packed >> 4).long()]
    return torch.stack([lo, hi], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def expand(scale, rows, cols):
    """Broadcasts a per-tensor, per-channel, per-group or 2-D block scale to the weight."""
    s = scale.float()
    if s.numel() == 1:
        return s.reshape(1, 1).expand(rows, cols)
    if s.dim() == 1:
        s = s.reshape(-1, 1)
    r, c = s.shape
    s = s.repeat_interleave(-(-rows // r), 0)[:rows] if r != rows else s
    s = s.repeat_interleave(-(-cols // c), 1)[:, :cols] if c != cols else s
    return s


def dequant(m):
    """float32 weight of one module's tensors (suffix -> tensor), None if not quantized."""
    w = m.get("weight_packed", m.get("weight"))
    if w is None:
        return None
    if w.dtype == torch.int32 and "weight_shape" in m:
        return dequant_int(m, m.get("_num_bits", 8))
    if w.dtype == torch.float8_e4m3fn:
        sc = m.get("weight_scale", m.get("weight_scale_inv"))
        return w.float() * expand(sc, *w.shape)
    if w.dtype == torch.uint8:
        v = unpack_fp4(w)
        sc = m["weight_scale"]
        if sc.dtype == torch.uint8:  # E8M0 exponent (MXFP4)
            s = torch.pow(2.0, sc.float() - 127.0)
        else:
            s = sc.float()
            if "weight_global_scale" in m:  # compressed-tensors stores the divisor
                s = s / m["weight_global_scale"].float().reshape(())
            elif "weight_scale_2" in m:  # ModelOpt stores the multiplier
                s = s * m["weight_scale_2"].float().reshape(())
        return v * expand(s, *v.shape)
    return None


def unpack_int32(packed, shape, num_bits):
    """compressed-tensors' pack_to_int32 undone: element 32/num_bits*j+i in bits
    num_bits*i.. of word j, stored as q + 2**(num_bits-1)."""
    per = 32 // num_bits
    mask = (1 << num_bits) - 1
    w = packed.to(torch.int64) & 0xFFFFFFFF
    parts = [(w >> (num_bits * i)) & mask for i in range(per)]
    v = torch.stack(parts, dim=-1).reshape(packed.shape[0], -1)[:, : int(shape[1])]
    return (v - (1 << (num_bits - 1))).float()


def dequant_int(m, num_bits):
    v = unpack_int32(m["weight_packed"], m["weight_shape"].tolist(), num_bits)
    s = expand(m["weight_scale"], *v.shape)
    if "weight_zero_point" in m:
        v = v - expand(m["weight_zero_point"], *v.shape)
    return v * s


def modules(tensors):
    out = {}
    for k, t in tensors.items():
        mod, suf = module_of(k)
        out.setdefault(mod, {})[suf or k] = t
    return out


def quant_config(d):
    f = pathlib.Path(d) / "config.json"
    if not f.is_file():
        return {}
    c = json.loads(f.read_text())
    return c.get("quantization_config") or c.get("compression_config") or {}


def flatten(x, pre=""):
    """quantization_config as dotted keys; config_groups renamed by position
    (group_0 vs the peer's own names) and targets/ignore lists left out."""
    out = {}
    if isinstance(x, dict):
        for i, (k, v) in enumerate(x.items()):
            if k in ("targets", "ignore", "exclude", "exclude_modules", "layer_quant_config"):
                continue
            key = f"group[{i}]" if pre.endswith("config_groups.") else k
            out.update(flatten(v, f"{pre}{key}."))
    else:
        out[pre[:-1]] = x
    return out


def config_diff(selq_dir, peer_dir):
    a, b = flatten(quant_config(selq_dir)), flatten(quant_config(peer_dir))
    return [{"key": k, "selq": a.get(k, "<absent>"), "peer": b.get(k, "<absent>")}
            for k in sorted(set(a) | set(b)) if a.get(k, "<absent>") != b.get(k, "<absent>")]


def int_bits(d):
    """num_bits of the (first) INT weight group of a compressed-tensors config."""
    for g in (quant_config(d).get("config_groups") or {}).values():
        w = g.get("weights") or {}
        if w.get("type") == "int":
            return int(w.get("num_bits", 8))
    return 8


def compare(src_dir, selq_dir, peer_dir):
    src, a, b = load(src_dir), load(selq_dir), load(peer_dir)
    bits = (int_bits(selq_dir), int_bits(peer_dir))
    rep = {"only_selq": sorted(set(a) - set(b)), "only_peer": sorted(set(b) - set(a)),
           "dtype_or_shape": [], "identical": 0, "differing": [], "identical_by_kind": {},
           "config_diff": config_diff(selq_dir, peer_dir)}
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
            rep["dtype_or_shape"].append({"name": k, "selq": [str(x.dtype), list(x.shape)],
                                          "peer": [str(y.dtype), list(y.shape)]})
            continue
        xb = x.contiguous().reshape(-1).view(torch.uint8)
        yb = y.contiguous().reshape(-1).view(torch.uint8)
        n = int((xb != yb).sum())
        if n == 0:
            rep["identical"] += 1
            kind = k.rsplit(".", 1)[-1]
            rep["identical_by_kind"][kind] = rep["identical_by_kind"].get(kind, 0) + 1
        else:
            rep["differing"].append({"name": k, "dtype": str(x.dtype), "bytes_differing": n,
                                     "fraction": n / xb.numel()})
    # Dequantized comparison per module quantized by both tools.
    ma, mb = modules(a), modules(b)
    for m in ma.values():
        m["_num_bits"] = bits[0]
    for m in mb.values():
        m["_num_bits"] = bits[1]
    deq = []
    for mod in sorted(set(ma) & set(mb)):
        da, db = dequant(ma[mod]), dequant(mb[mod])
        if da is None or db is None:
            continue
        ref = src.get(mod + ".weight")
        e = {"module": mod}
        if da.shape != db.shape:
            e["shape_mismatch"] = [list(da.shape), list(db.shape)]
        else:
            diff = (da - db).abs()
            e["elements_differing"] = float((diff > 0).float().mean())
            e["max_abs_diff"] = float(diff.max())
            e["max_abs_weight"] = float(da.abs().max())
            if ref is not None:
                r = ref.float()
                e["selq_rel_err"] = float((da - r).norm() / r.norm())
                e["peer_rel_err"] = float((db - r).norm() / r.norm())
        deq.append(e)
    rep["dequantized"] = deq
    return rep


def summary(rep):
    lines = [f"tensors: identical {rep['identical']}, differing {len(rep['differing'])}, "
             f"dtype/shape mismatch {len(rep['dtype_or_shape'])}, only in selq {len(rep['only_selq'])}, "
             f"only in peer {len(rep['only_peer'])}"]
    if rep["identical_by_kind"]:
        lines.append("  identical by kind: " + ", ".join(
            f".{k} {n}" for k, n in sorted(rep["identical_by_kind"].items())))
    for what in ("only_selq", "only_peer"):
        if rep[what]:
            lines.append(f"  {what}: {', '.join(rep[what][:6])}{' ...' if len(rep[what]) > 6 else ''}")
    for m in rep["dtype_or_shape"][:6]:
        lines.append(f"  {m['name']}: selq {m['selq']} peer {m['peer']}")
    if rep["differing"]:
        by = {}
        for d in rep["differing"]:
            by.setdefault(d["name"].rsplit(".", 1)[-1], []).append(d["fraction"])
        for suf, fr in sorted(by.items()):
            lines.append(f"  differing .{suf}: {len(fr)} tensors, bytes differing max {max(fr):.2e} "
                         f"mean {sum(fr) / len(fr):.2e}")
    for c in rep["config_diff"]:
        lines.append(f"  config quantization_config.{c['key']}: selq {c['selq']!r} peer {c['peer']!r}")
    d = [e for e in rep["dequantized"] if "max_abs_diff" in e]
    if d:
        worst = max(d, key=lambda e: e["max_abs_diff"] / max(e["max_abs_weight"], 1e-30))
        lines.append(f"  dequantized: {len(d)} modules; elements differing max "
                     f"{max(e['elements_differing'] for e in d):.2e}; worst max|diff| "
                     f"{worst['max_abs_diff']:.3g} (max|w| {worst['max_abs_weight']:.3g}) in {worst['module']}")
        if "selq_rel_err" in d[0]:
            lines.append(f"  rel. error vs source (mean over modules): selq "
                         f"{sum(e['selq_rel_err'] for e in d) / len(d):.4e}, peer "
                         f"{sum(e['peer_rel_err'] for e in d) / len(d):.4e}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src"); ap.add_argument("selq"); ap.add_argument("peer")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rep = compare(a.src, a.selq, a.peer)
    print(json.dumps(rep, indent=1) if a.json else summary(rep))
    bad = rep["only_selq"] or rep["only_peer"] or rep["dtype_or_shape"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
