"""Compares two quantized copies of one source checkpoint tensor by tensor:
AMD Quark's (bench/quark/seed003_quark.py) and selq's (`selq quantize --recipe
kimi-k3-mxfp4-attnfp8`). Needs numpy, and ml_dtypes for --check (the test venv).

  compare.py SRC QUARK_DIR SELQ_DIR [--json OUT] [--check]

Per module: its stored format on each side (bf16, mxfp4, fp8-ptpc). Per tensor
present on both sides: dtype, shape, and whether the bytes are equal; where
they are not, the first differing element decoded on both sides next to the
source values it came from. Then the two quantization_configs: how vLLM and
ATOM resolve every linear module under each (docs/ENGINE_RULES.md §2.2, §4), and the
key-by-key differences of the tensor specs and the top-level entries.
--check then accounts for every difference (account(): names the synthetic
spells unlike the released checkpoint, the sign of an MXFP4 zero, FP8 elements
that each side's rounding reproduces exactly) and exits 1 on any other.
"""
import argparse
import fnmatch
import json
import os
import re
import struct
import sys

import numpy as np

FP4_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
NP_DTYPE = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8, "F8_E4M3": np.uint8,
            "I32": np.int32, "F8_E8M0": np.uint8}


# ---------------------------------------------------------------- reading

def read_dir(path):
    """Every tensor of a checkpoint directory: name -> (dtype, shape, raw bytes)."""
    out = {}
    for fn in sorted(os.listdir(path)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(path, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        for name, v in header.items():
            if name == "__metadata__":
                continue
            b, e = v["data_offsets"]
            out[name] = (v["dtype"], tuple(v["shape"]), data[b:e])
    return out


def array(t):
    dtype, shape, raw = t
    return np.frombuffer(raw, dtype=NP_DTYPE[dtype]).reshape(shape)


def bf16_to_f32(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


def e4m3_to_f32(b):
    b = np.asarray(b, dtype=np.uint8)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = (b & 0x7).astype(np.float64)
    val = np.where(exp == 0, man / 8 * 2.0 ** -6, (1 + man / 8) * 2.0 ** (exp.astype(np.float64) - 7))
    val = np.where((b & 0x7F) == 0x7F, np.nan, val)
    return (sign * val).astype(np.float32)


def e8m0_to_f32(b):
    return np.ldexp(np.float32(1), np.asarray(b, dtype=np.int32) - 127).astype(np.float32)


def config_of(path):
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f).get("quantization_config")


# ---------------------------------------------------------------- formats

def module_formats(tensors):
    """module -> stored format, for every module with a `.weight`."""
    fmts = {}
    for name, (dtype, shape, _) in tensors.items():
        if not name.endswith(".weight"):
            continue
        m = name[: -len(".weight")]
        scale = tensors.get(m + ".weight_scale")
        if dtype in ("BF16", "F16", "F32"):
            fmts[m] = dtype.lower()
        elif dtype == "U8" and scale and scale[0] == "U8" and scale[1][-1] * 16 == shape[-1]:
            fmts[m] = "mxfp4"  # [out, in/2] nibbles, one E8M0 byte per 32 elements
        elif dtype == "F8_E4M3" and scale and scale[0] == "F32" and scale[1] == shape[:1]:
            fmts[m] = "fp8-ptpc"  # F32 scale per output channel
        else:
            fmts[m] = f"{dtype}{list(shape)}+scale{scale[:2] if scale else None}"
    return fmts


# ---------------------------------------------------------------- first difference, explained

def explain_mxfp4_weight(src, m, i, q, s, qt, st):
    out_dim, half = q.shape
    r, c = divmod(i, half)
    x = bf16_to_f32(array(src[m + ".weight"]))[r]
    qs, ss = array(qt[m + ".weight_scale"])[r], array(st[m + ".weight_scale"])[r]
    g = (2 * c) // 32
    e = {}
    for nib, k in (("low", 2 * c), ("high", 2 * c + 1)):
        qn = int(q[r, c] >> (4 * (nib == "high"))) & 0xF
        sn = int(s[r, c] >> (4 * (nib == "high"))) & 0xF
        e[nib] = {"element": [r, k], "source": float(x[k]),
                  "quark": {"code": qn, "value": float(FP4_VALUES[qn] * e8m0_to_f32(qs[g]))},
                  "selq": {"code": sn, "value": float(FP4_VALUES[sn] * e8m0_to_f32(ss[g]))}}
    return {"row": r, "byte": c, "block": g, "scale_byte": {"quark": int(qs[g]), "selq": int(ss[g])},
            "nibbles": e}


def explain_mxfp4_scale(src, m, i, q, s):
    rows, groups = q.shape
    r, g = divmod(i, groups)
    x = bf16_to_f32(array(src[m + ".weight"]))[r, 32 * g: 32 * g + 32]
    amax = float(np.max(np.abs(x)))
    return {"row": r, "block": g, "block_amax": amax, "floor_log2_amax": int(np.floor(np.log2(amax))) if amax else None,
            "quark": {"byte": int(q[r, g]), "scale": float(e8m0_to_f32(q[r, g]))},
            "selq": {"byte": int(s[r, g]), "scale": float(e8m0_to_f32(s[r, g]))}}


def explain_fp8_weight(src, m, i, q, s, qt, st):
    r, c = divmod(i, q.shape[1])
    x = float(bf16_to_f32(array(src[m + ".weight"]))[r, c])
    qs, ss = float(array(qt[m + ".weight_scale"])[r]), float(array(st[m + ".weight_scale"])[r])
    return {"element": [r, c], "source": x, "source_over_scale": {"quark": x / qs, "selq": x / ss},
            "quark": {"byte": int(q[r, c]), "value": float(e4m3_to_f32(q[r, c])), "scale": qs},
            "selq": {"byte": int(s[r, c]), "value": float(e4m3_to_f32(s[r, c])), "scale": ss}}


def explain_fp8_scale(src, m, i, q, s):
    amax = float(np.max(np.abs(bf16_to_f32(array(src[m + ".weight"]))[i])))
    return {"row": i, "row_amax": amax, "amax_over_448": np.float32(amax) / np.float32(448),
            "quark": float(q[i]), "selq": float(s[i]),
            "ulps_apart": int(abs(int(np.float32(q[i]).view(np.int32)) - int(np.float32(s[i]).view(np.int32))))}


def first_difference(name, fmt, src, qt, st):
    q, s = array(qt[name]), array(st[name])
    qf, sf = q.reshape(-1), s.reshape(-1)
    diff = np.nonzero(qf.view(np.uint8) != sf.view(np.uint8))[0] if q.dtype != np.float32 else np.nonzero(qf != sf)[0]
    i = int(diff[0])
    n = int(diff.size)
    m, leaf = name.rsplit(".", 1)
    info = {"differing_elements": n, "of": int(qf.size), "first_index": i}
    try:
        if fmt == "mxfp4" and leaf == "weight":
            info["first"] = explain_mxfp4_weight(src, m, i, q, s, qt, st)
        elif fmt == "mxfp4" and leaf == "weight_scale":
            info["first"] = explain_mxfp4_scale(src, m, i, q, s)
        elif fmt == "fp8-ptpc" and leaf == "weight":
            info["first"] = explain_fp8_weight(src, m, i, q, s, qt, st)
        elif fmt == "fp8-ptpc" and leaf == "weight_scale":
            info["first"] = explain_fp8_scale(src, m, i, q, s)
        else:
            info["first"] = {"quark": qf[i].item(), "selq": sf[i].item()}
    except KeyError as e:  # a sibling tensor missing on one side: say so, do not fail the report
        info["first"] = {"missing": str(e)}
    return info


# ---------------------------------------------------------------- configs as engines read them

def _spec_label(t):
    if t is None:
        return "none"
    if isinstance(t, list):
        return "[" + ", ".join(_spec_label(x) for x in t) + "]"
    lab = f"{t.get('dtype')}/{t.get('qscheme')}"
    if t.get("group_size"):
        lab += f"/g{t['group_size']}"
    if t.get("scale_format"):
        lab += f"/{t['scale_format']}"
    if t.get("scale_calculation_mode"):
        lab += f"/{t['scale_calculation_mode']}"
    return lab + ("/dynamic" if t.get("is_dynamic") else "/static")


def layer_label(cfg):
    if cfg is None:
        return "unquantized"
    return f"W {_spec_label(cfg.get('weight'))} | A {_spec_label(cfg.get('input_tensors'))}"


def resolve(qc, module, engine):
    """The layer config `engine` gives `module` under Quark config qc, or None."""
    excl = qc.get("exclude") or []
    for e in excl:
        if e.startswith("re:"):
            hit = (re.match if engine == "vllm" else re.search)(e[3:], module)
        elif engine == "atom":
            hit = e == module or module.startswith(e + ".") or fnmatch.fnmatchcase(module, e)
        else:  # vLLM: exact, plus check_children for the experts module
            hit = e == module or (module.endswith(".experts") and e.startswith(module + "."))
        if hit:
            return None
    for key, cfg in (qc.get("layer_quant_config") or {}).items():
        if ("*" in key and fnmatch.fnmatchcase(module, key)) or ("*" not in key and module in key):
            return cfg
    return qc.get("global_quant_config")


def engine_modules(tensors):
    """The module names an engine looks up: each linear, routed experts as their `...experts` parent."""
    mods = set()
    for name, (_, shape, _) in tensors.items():
        if not name.endswith(".weight") or len(shape) < 2:
            continue
        m = name[: -len(".weight")]
        if "embed" in m or m.endswith("norm"):
            continue
        mods.add(re.sub(r"\.experts\.\d+\..*$", ".experts", m))
    return sorted(mods)


def dict_diff(a, b, path=""):
    out = []
    for k in sorted(set(a) | set(b)):
        p = f"{path}.{k}" if path else k
        if k not in a:
            out.append((p, "<absent>", b[k]))
        elif k not in b:
            out.append((p, a[k], "<absent>"))
        elif isinstance(a[k], dict) and isinstance(b[k], dict):
            out += dict_diff(a[k], b[k], p)
        elif a[k] != b[k]:
            out.append((p, a[k], b[k]))
    return out


def compare_configs(src_tensors, qc, sc):
    res = {"engines": {}, "spec_diffs": {}, "top_level": {}}
    mods = engine_modules(src_tensors)
    for engine in ("vllm", "atom"):
        rows = []
        for m in mods:
            a, b = layer_label(resolve(qc, m, engine)), layer_label(resolve(sc, m, engine))
            rows.append({"module": m, "quark": a, "selq": b, "same": a == b})
        res["engines"][engine] = rows
    # The spec each side writes for the same scheme: take one module of each scheme.
    seen = set()
    for m in mods:
        a, b = resolve(qc, m, "vllm"), resolve(sc, m, "vllm")
        if a is None or b is None or layer_label(a) != layer_label(b) or layer_label(a) in seen:
            continue
        seen.add(layer_label(a))
        res["spec_diffs"][layer_label(a)] = [list(d) for d in dict_diff(a, b)]
    for k in sorted(set(qc) | set(sc)):
        if k in ("global_quant_config", "layer_quant_config", "exclude"):
            continue
        if qc.get(k, "<absent>") != sc.get(k, "<absent>"):
            res["top_level"][k] = {"quark": qc.get(k, "<absent>"), "selq": sc.get(k, "<absent>")}
    res["exclude"] = {"quark": qc.get("exclude"), "selq": sc.get("exclude")}
    res["layer_quant_config_keys"] = {"quark": list(qc.get("layer_quant_config") or {}),
                                      "selq": list(sc.get("layer_quant_config") or {})}
    res["global"] = {"quark": layer_label(qc.get("global_quant_config")),
                     "selq": layer_label(sc.get("global_quant_config"))}
    return res


# ---------------------------------------------------------------- the comparison

def compare(src_dir, quark_dir, selq_dir):
    src, qt, st = read_dir(src_dir), read_dir(quark_dir), read_dir(selq_dir)
    qf, sf = module_formats(qt), module_formats(st)
    modules = []
    for m in sorted(set(qf) | set(sf)):
        modules.append({"module": m, "quark": qf.get(m, "<absent>"), "selq": sf.get(m, "<absent>"),
                        "same": qf.get(m) == sf.get(m)})
    tensors = []
    for name in sorted(set(qt) | set(st)):
        row = {"tensor": name}
        if name not in qt or name not in st:
            row.update(status="only-" + ("selq" if name in st else "quark"))
            tensors.append(row)
            continue
        (qd, qs, qb), (sd, ss, sb) = qt[name], st[name]
        m = name.rsplit(".", 1)[0]
        fmt = qf.get(m) if qf.get(m) == sf.get(m) else None
        row.update(quark=[qd, list(qs)], selq=[sd, list(ss)], format=fmt or "bf16-or-other")
        if (qd, qs) != (sd, ss):
            row["status"] = "dtype-or-shape"
        elif qb == sb:
            row["status"] = "bytes-equal"
        else:
            row["status"] = "bytes-differ"
            row["diff"] = first_difference(name, fmt, src, qt, st)
        tensors.append(row)
    return {"modules": modules, "tensors": tensors, "config": compare_configs(src, config_of(quark_dir),
                                                                              config_of(selq_dir))}


# ---------------------------------------------------------------- the differences, accounted for

# Modules whose names in selq's synthetic Kimi-K3 (DeepSeek-V3 style) miss the
# template's patterns, which are written in the released checkpoint's names:
# the router is `mlp.gate` (Quark excludes `*block_sparse_moe.gate*`), the
# residual projection `self_attn.attn_res_proj` (Quark excludes
# `*self_attention_res_proj*` and two more, and `*self_attn*` makes it FP8).
NAMING = [("*.mlp.gate", "mxfp4", "bf16"), ("*.self_attn.attn_res_proj", "fp8-ptpc", "bf16")]


def account(r, src_dir, quark_dir, selq_dir):
    """Every difference in one of the explained classes, or a list of the others."""
    import ml_dtypes
    src, qt, st = read_dir(src_dir), read_dir(quark_dir), read_dir(selq_dir)
    unexplained, counts = [], {}

    def count(k, n=1):
        counts[k] = counts.get(k, 0) + n

    naming = lambda m: next((x for x in NAMING if fnmatch.fnmatchcase(m, x[0])), None)
    for m in r["modules"]:
        if m["same"]:
            continue
        x = naming(m["module"])
        if x and (m["quark"], m["selq"]) == x[1:]:
            count("module format: naming")
        else:
            unexplained.append(f"module {m['module']}: quark {m['quark']}, selq {m['selq']}")
    for t in r["tensors"]:
        name, status = t["tensor"], t["status"]
        m = name.rsplit(".", 1)[0]
        if status == "bytes-equal":
            count(f"bytes equal: {t['format']} {name.rsplit('.', 1)[1]}")
            continue
        if naming(m):
            count("tensor: naming")  # its module's format differs, above
            continue
        if status != "bytes-differ":
            unexplained.append(f"tensor {name}: {status}")
            continue
        q, s = array(qt[name]), array(st[name])
        if t["format"] == "mxfp4" and name.endswith(".weight"):
            qn = np.stack([q & 15, q >> 4], -1)
            sn = np.stack([s & 15, s >> 4], -1)
            d = qn != sn
            # Only the sign of zero: selq keeps the sign of a negative input that
            # rounds to 0 (0x8, as ml_dtypes and compressed-tensors' pack), Quark writes 0x0.
            if np.all((qn[d] == 0) & (sn[d] == 8)):
                count("mxfp4 weight: -0 (selq) vs +0 (quark) nibbles", int(d.sum()))
                continue
        if t["format"] == "fp8-ptpc" and name.endswith(".weight"):
            x = bf16_to_f32(array(src[name]))
            scale = array(qt[m + ".weight_scale"]).astype(np.float32)[:, None]
            if np.array_equal(array(st[m + ".weight_scale"]), array(qt[m + ".weight_scale"])):
                e4m3 = lambda v: np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
                bf = lambda v: v.astype(ml_dtypes.bfloat16).astype(np.float32)
                single = e4m3(x / scale)  # one rounding of the f32 quotient
                double = e4m3(bf(x / bf(scale)))  # quotient in BF16 with the scale cast to BF16
                if np.array_equal(single, s) and np.array_equal(double, q):
                    count("fp8 weight: f32 quotient (selq) vs bf16 quotient (quark) elements",
                          int((q != s).sum()))
                    for side, b in (("quark", q), ("selq", s)):  # squared error of the stored weight
                        err = (np.clip(e4m3_to_f32(b), -448, 448) * scale - x).astype(np.float64)
                        counts.setdefault(f"fp8 sq. error x1e9: {side}", 0)
                        counts[f"fp8 sq. error x1e9: {side}"] += int(round(float((err ** 2).sum()) * 1e9))
                    continue
        unexplained.append(f"tensor {name}: bytes differ ({t['format']})")
    for eng, rows in r["config"]["engines"].items():
        for x in rows:
            if x["same"]:
                count(f"{eng}: same resolution")
            elif naming(x["module"]):
                count(f"{eng}: naming")
            else:
                unexplained.append(f"{eng} {x['module']}: quark {x['quark']}; selq {x['selq']}")
    return counts, unexplained


def summary(r):
    lines = []
    fm = [m for m in r["modules"] if not m["same"]]
    by_fmt = {}
    for m in r["modules"]:
        if m["same"]:
            by_fmt[m["quark"]] = by_fmt.get(m["quark"], 0) + 1
    lines.append(f"modules: {len(r['modules'])}, same format on both sides: "
                 + ", ".join(f"{v} {k}" for k, v in sorted(by_fmt.items())) + f"; different: {len(fm)}")
    for m in fm:
        lines.append(f"  format differs: {m['module']}: quark {m['quark']}, selq {m['selq']}")
    st = {}
    for t in r["tensors"]:
        st[t["status"]] = st.get(t["status"], 0) + 1
    lines.append("tensors: " + ", ".join(f"{v} {k}" for k, v in sorted(st.items())))
    for t in r["tensors"]:
        if t["status"] == "bytes-differ":
            lines.append(f"  bytes differ: {t['tensor']} ({t['format']}): {json.dumps(t['diff'])}")
        elif t["status"].startswith("only-"):
            lines.append(f"  {t['status']}: {t['tensor']}")
    c = r["config"]
    lines.append(f"config global: quark {c['global']['quark']}; selq {c['global']['selq']}")
    lines.append(f"config layer_quant_config keys: quark {c['layer_quant_config_keys']['quark']}; "
                 f"selq {c['layer_quant_config_keys']['selq']}")
    for eng, rows in c["engines"].items():
        bad = [x for x in rows if not x["same"]]
        lines.append(f"{eng}: {len(rows) - len(bad)}/{len(rows)} modules resolve the same")
        for x in bad:
            lines.append(f"  {eng} differs: {x['module']}: quark {x['quark']}; selq {x['selq']}")
    for lab, d in c["spec_diffs"].items():
        lines.append(f"spec keys, {lab}: " + ("identical" if not d else
                     "; ".join(f"{p}: quark {a!r} selq {b!r}" for p, a, b in d)))
    for k, v in c["top_level"].items():
        lines.append(f"config {k}: quark {json.dumps(v['quark'])}; selq {json.dumps(v['selq'])}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("quark")
    ap.add_argument("selq")
    ap.add_argument("--json")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every difference is one of the explained kinds (needs ml_dtypes)")
    a = ap.parse_args()
    r = compare(a.src, a.quark, a.selq)
    print(summary(r))
    rc = 0
    if a.check:
        counts, unexplained = account(r, a.src, a.quark, a.selq)
        r["accounted"] = {"counts": counts, "unexplained": unexplained}
        print("accounted for:")
        for k, v in sorted(counts.items()):
            print(f"  {v:6d}  {k}")
        for u in unexplained:
            print(f"UNEXPLAINED: {u}")
        rc = 1 if unexplained or not counts.get("bytes equal: mxfp4 weight_scale") \
            or not counts.get("bytes equal: fp8-ptpc weight_scale") else 0
        print("check:", "FAIL" if rc else "ok")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1, default=float)
    return rc


if __name__ == "__main__":
    sys.exit(main())
