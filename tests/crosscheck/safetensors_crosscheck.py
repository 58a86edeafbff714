#!/usr/bin/env python3
"""Cross-checks selq's safetensors reader/writer against the Python `safetensors` package.

usage: safetensors_crosscheck.py <safetensors_tool> <scratch dir>

1. Files written by Python (safetensors.serialize_file) are read by selq with the
   same names, dtypes, shapes, metadata and bytes; selq re-writing such a file in
   offset order reproduces it byte for byte.
2. Files written by selq are read by Python (safetensors.deserialize for raw bytes
   of every dtype; safetensors.numpy / safe_open for the dtypes numpy has).
3. Every crafted malformed file that Python rejects, selq rejects too.
Exit 77 (ctest skip) when the reference is missing locally; fail under CI=true.
"""
import json
import os
import random
import struct
import subprocess
import sys

try:
    import numpy as np
    import safetensors
    from safetensors import TensorSpec, deserialize, safe_open, serialize_file
    import safetensors.numpy as stnp
except ImportError as e:  # pragma: no cover - depends on the environment
    print(f"python safetensors reference missing: {e}", file=sys.stderr)
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

TOOL, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)

# selq header name -> (bits, Python TensorSpec dtype or None when Python cannot write it)
DTYPES = {
    "BOOL": (8, "bool"), "F4": (4, "float4_e2m1fn_x2"), "F6_E2M3": (6, None), "F6_E3M2": (6, None),
    "U8": (8, "uint8"), "I8": (8, "int8"), "F8_E5M2": (8, "float8_e5m2"), "F8_E4M3": (8, "float8_e4m3fn"),
    "F8_E8M0": (8, "float8_e8m0fnu"), "F8_E4M3FNUZ": (8, "float8_e4m3fnuz"),
    "F8_E5M2FNUZ": (8, "float8_e5m2fnuz"), "I16": (16, "int16"), "U16": (16, "uint16"),
    "F16": (16, "float16"), "BF16": (16, "bfloat16"), "I32": (32, "int32"), "U32": (32, "uint32"),
    "F32": (32, "float32"), "C64": (64, "complex64"), "F64": (64, "float64"), "I64": (64, "int64"),
    "U64": (64, "uint64"),
}
NUMPY = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
         "F16": np.float16, "I32": np.int32, "U32": np.uint32, "F32": np.float32, "C64": np.complex64,
         "F64": np.float64, "I64": np.int64, "U64": np.uint64}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n * DTYPES[dtype][0] // 8


def make_tensors(rng, dtypes):
    """Several shapes per dtype: rank 2, rank 0 (or smallest legal), and odd sizes."""
    out = []
    for i, dt in enumerate(dtypes):
        bits = DTYPES[dt][0]
        shapes = [[3, 8], [4, 12] if bits < 8 else [], [1, 4] if bits < 8 else [5]]
        if i == 0:
            shapes.append([0, 4])  # one zero-size tensor (ties between several are order-dependent)
        for j, shape in enumerate(shapes):
            n = nbytes(dt, shape)
            data = bytes(rng.randrange(2) for _ in range(n)) if dt == "BOOL" else rng.randbytes(n)
            out.append({"name": f"t{i}.{dt.lower()}.{j}", "dtype": dt, "shape": shape, "data": data})
    return out


def selq(*args, expect_ok=True):
    r = subprocess.run([TOOL, *args], capture_output=True, text=True, errors="replace")
    if expect_ok and r.returncode != 0:
        raise SystemExit(f"selq tool failed ({r.returncode}): {' '.join(args)}\n{r.stderr}")
    return r


def python_writes_selq_reads(rng):
    dtypes = [d for d, (_, py) in DTYPES.items() if py]
    tensors = make_tensors(rng, dtypes)
    path = os.path.join(WORK, "py_written.safetensors")
    keep = []
    specs = {}
    for t in tensors:
        buf = np.frombuffer(t["data"], dtype=np.uint8).copy() if t["data"] else np.zeros(1, np.uint8)
        keep.append(buf)
        shape = list(t["shape"])
        if t["dtype"] == "F4":
            shape[-1] //= 2  # TensorSpec takes the packed (x2) storage shape
        specs[t["name"]] = TensorSpec(dtype=DTYPES[t["dtype"]][1], shape=shape,
                                      data_ptr=buf.ctypes.data, data_len=len(t["data"]))
    serialize_file(specs, path, metadata={"format": "pt"})

    dumped = json.loads(selq("dump", path).stdout)
    check(dumped["metadata"] == {"format": "pt"}, "metadata of a Python-written file")
    by_name = {t["name"]: t for t in dumped["tensors"]}
    check(set(by_name) == {t["name"] for t in tensors}, "tensor names of a Python-written file")
    for t in tensors:
        got = by_name.get(t["name"])
        if got is None:
            continue
        check(got["dtype"] == t["dtype"], f"dtype of {t['name']}: {got['dtype']} != {t['dtype']}")
        check(got["shape"] == t["shape"], f"shape of {t['name']}: {got['shape']} != {t['shape']}")
        check(bytes.fromhex(got["hex"]) == t["data"], f"bytes of {t['name']}")

    # Same tensors, same order, same padding rule: selq must produce the same file.
    again = os.path.join(WORK, "py_written.rewritten.safetensors")
    selq("rewrite", path, again)
    with open(path, "rb") as a, open(again, "rb") as b:
        check(a.read() == b.read(), "selq rewrite of a Python-written file is byte-identical")
    return len(tensors)


def selq_writes_python_reads(rng):
    tensors = make_tensors(rng, list(DTYPES))
    spec = {"metadata": {"format": "pt", "writer": "selq"},
            "tensors": [{"name": t["name"], "dtype": t["dtype"], "shape": t["shape"], "hex": t["data"].hex()}
                        for t in tensors]}
    spec_path = os.path.join(WORK, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    path = os.path.join(WORK, "selq_written.safetensors")
    selq("write", spec_path, path)

    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    check(n % 8 == 0, "selq header length is a multiple of 8")
    check(raw[8:8 + n].startswith(b'{"__metadata__":'), "selq writes __metadata__ first")

    got = dict(deserialize(raw))  # raw bytes for every dtype, F6 included
    for t in tensors:
        g = got.get(t["name"])
        check(g is not None, f"Python finds {t['name']}")
        if g is None:
            continue
        check(g["dtype"] == t["dtype"], f"Python dtype of {t['name']}: {g['dtype']}")
        check(list(g["shape"]) == t["shape"], f"Python shape of {t['name']}: {g['shape']}")
        check(bytes(g["data"]) == t["data"], f"Python bytes of {t['name']}")

    with safe_open(path, framework="numpy") as f:
        check(f.metadata() == spec["metadata"], "Python reads selq metadata")
        for t in tensors:
            if t["dtype"] in NUMPY:
                arr = f.get_tensor(t["name"])
                want = np.frombuffer(t["data"], dtype=NUMPY[t["dtype"]]).reshape(t["shape"])
                check(arr.dtype == want.dtype and arr.shape == want.shape and arr.tobytes() == want.tobytes(),
                      f"safe_open numpy value of {t['name']}")

    # safetensors.numpy.load_file needs every tensor to be numpy-typed.
    numpy_only = [t for t in tensors if t["dtype"] in NUMPY]
    spec["tensors"] = [s for s in spec["tensors"] if s["dtype"] in NUMPY]
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    path2 = os.path.join(WORK, "selq_written_numpy.safetensors")
    selq("write", spec_path, path2)
    loaded = stnp.load_file(path2)
    for t in numpy_only:
        want = np.frombuffer(t["data"], dtype=NUMPY[t["dtype"]]).reshape(t["shape"])
        check(np.array_equal(loaded[t["name"]], want, equal_nan=False) or
              loaded[t["name"]].tobytes() == want.tobytes(), f"safetensors.numpy value of {t['name']}")
    return len(tensors)


def file_bytes(header, data=b""):
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h)) + h + data


BAD = {
    "too_small": b"\x01\x02",
    "header_too_large": struct.pack("<Q", 100_000_001) + b" " * 16,
    "header_past_eof": struct.pack("<Q", 1000) + b"{}",
    "not_utf8": file_bytes(b'{"a\xff":1}'),
    "bad_json": file_bytes('{"a":'),
    "wrong_type": file_bytes('{"a":{"dtype":"F32","shape":"x","data_offsets":[0,4]}}', b"\0" * 4),
    "gap": file_bytes('{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"\0" * 4),
    "overlap": file_bytes('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                          '"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"\0" * 4),
    "size_mismatch": file_bytes('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"\0" * 4),
    "misaligned_f4": file_bytes('{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}', b"\0" * 2),
    "misaligned_f6": file_bytes('{"a":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]}}', b"\0" * 2),
    "overflow": file_bytes('{"a":{"dtype":"U8","shape":[4611686018427387904,8],"data_offsets":[0,0]}}'),
    "buffer_not_used": file_bytes('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\0" * 5),
    "metadata_not_string": file_bytes('{"__metadata__":{"a":1}}'),
    "unknown_dtype": file_bytes('{"a":{"dtype":"F12","shape":[1],"data_offsets":[0,1]}}', b"\0"),
    "negative_dim": file_bytes('{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}', b"\0"),
    "offset_over_u64": file_bytes('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}}', b"\0"),
    # Python accepts these two; selq is stricter on purpose.
    "exact_duplicate": file_bytes('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                  '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
    "metadata_as_tensor": file_bytes('{"__metadata__":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"),
}
SELQ_STRICTER = {"exact_duplicate", "metadata_as_tensor"}


def rejections():
    for name, data in BAD.items():
        path = os.path.join(WORK, f"bad_{name}.safetensors")
        with open(path, "wb") as f:
            f.write(data)
        try:
            deserialize(data)
            py_ok = True
        except Exception:
            py_ok = False
        r = selq("dump", path, expect_ok=False)
        check(r.returncode == 2, f"selq rejects {name} (rc={r.returncode}, {r.stderr.strip()})")
        check(path in r.stderr, f"selq error for {name} names the file: {r.stderr.strip()}")
        if name in SELQ_STRICTER:
            print(f"  {name}: python {'accepts' if py_ok else 'rejects'}, selq rejects")
        else:
            check(not py_ok, f"Python also rejects {name} (else the case is not a valid test)")
    return len(BAD)


def main():
    rng = random.Random(1234)
    print(f"python safetensors {safetensors.__version__}")
    a = python_writes_selq_reads(rng)
    b = selq_writes_python_reads(rng)
    c = rejections()
    print(f"python->selq tensors: {a}, selq->python tensors: {b}, malformed files: {c}")
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
