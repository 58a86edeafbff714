"""Checks the compressed-tensors configs selq writes with the
compressed-tensors library: its pydantic models must parse them, and its
own matching (match_named_modules over a module tree with the checkpoint's
names, match_name with vLLM's fused mapping) must assign every module the
scheme selq decided, and leave float modules unmatched or ignored.

Then the other way: the scheme objects of those configs, in selq's own form,
as the library serializes them (model_dump) and in the verbose form that
published llm-compressor checkpoints carry (every QuantizationArgs field:
actorder/block_structure/scale_dtype/zp_dtype null, an observer and its
kwargs), must each be recognized as the same selq scheme by verify/requantize
and by the runtime, and so must the verbose form with GPTQ's actorder "static"
(llm-compressor's GPTQ output: the column order, nothing more stored); a changed
num_bits or actorder "group" (a stored g_idx) must not be taken for it.

usage: dialects.py PATH_TO_selq_dialects_driver
Exit 77 (skip) when the reference is missing, except under CI=true (fail).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile


def reference_missing(why):
    if os.environ.get("CI", "").lower() == "true":
        print(f"FAIL: reference unavailable under CI: {why}")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(77)


try:
    import torch
    from compressed_tensors import QuantizationConfig
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.utils.match import match_name, match_named_modules
except Exception as e:  # noqa: BLE001 - any import failure means no reference
    reference_missing(f"compressed-tensors/torch import failed: {e!r}")


def module_tree(names):
    """A torch module tree whose leaf Linear modules carry exactly `names`."""
    root = torch.nn.Module()
    for name in names:
        parent = root
        parts = name.split(".")
        for p in parts[:-1]:
            if not hasattr(parent, p):
                parent.add_module(p, torch.nn.Module())
            parent = getattr(parent, p)
        parent.add_module(parts[-1], torch.nn.Linear(1, 1, bias=False))
    return root


def args_or_none(d):
    return None if d is None else QuantizationArgs.model_validate(d)


def check(doc):
    errors = []
    qc = doc["quantization_config"]
    cfg = QuantizationConfig.model_validate(qc)  # raises on any schema problem
    groups = qc["config_groups"]
    for gname, g in groups.items():
        QuantizationScheme.model_validate(g)
    assert set(cfg.config_groups) == set(groups)

    names = [m["name"] for m in doc["modules"]]
    expected = {m["name"]: m["expected"] for m in doc["modules"]}
    model = module_tree(names)
    ignore = qc.get("ignore") or []

    # The library's own resolution: which modules each group claims.
    claimed = {}
    for gname, g in groups.items():
        for name, _ in match_named_modules(model, g["targets"], ignore):
            if name in claimed:
                errors.append(f"{name} claimed by {claimed[name]} and {gname}")
            claimed[name] = gname

    for name in names:
        want = expected[name]
        got = claimed.get(name)
        if want is None:
            if got is not None:
                errors.append(f"float module {name} claimed by {got}")
            continue
        if got is None:
            errors.append(f"quantized module {name} not claimed by any group")
            continue
        g = groups[got]
        if args_or_none(g.get("weights")) != args_or_none(want["weights"]):
            errors.append(f"{name}: weights {g.get('weights')} != {want['weights']}")
        if args_or_none(g.get("input_activations")) != args_or_none(want["input_activations"]):
            errors.append(f"{name}: input {g.get('input_activations')} != {want['input_activations']}")
        fmt = g.get("format") or qc.get("format")
        if fmt != want["format"]:
            errors.append(f"{name}: format {fmt} != {want['format']}")

    # vLLM's fused module names resolve through their shards.
    fused = doc["packed_modules_mapping"]
    for fm in doc["fused_modules"]:
        groups_hit = {gname for gname, g in groups.items()
                      if any(match_name(fm["name"], t, fused) for t in g["targets"])}
        shard_groups = {claimed.get(s) for s in fm["shards"]}
        ignored = any(match_name(fm["name"], i, fused) for i in ignore)
        if None in shard_groups:
            if not ignored or groups_hit:
                errors.append(f"float fused {fm['name']} not ignored as a whole (groups {groups_hit})")
        elif groups_hit != shard_groups or len(groups_hit) != 1:
            errors.append(f"fused {fm['name']} hits groups {groups_hit}, shards {shard_groups}")

    # Global shape rules this project relies on.
    for t in [t for g in groups.values() for t in g["targets"]] + ignore:
        if t.startswith("re:") and not t.endswith("$"):
            errors.append(f"regex without trailing $: {t}")
    formats = {g.get("format") for g in groups.values()}
    if len(formats) > 1 and qc.get("format") != "mixed-precision":
        errors.append(f"several formats {formats} but top-level format {qc.get('format')}")
    return errors


def verbose_args(args):
    """QuantizationArgs as published llm-compressor checkpoints write them."""
    if args is None:
        return None
    out = {"actorder": None, "block_structure": None, "group_size": None, "observer": "memoryless_minmax",
           "observer_kwargs": {}, "scale_dtype": None, "zp_dtype": None}
    out.update(args)
    if "observer" not in args:
        out["observer"] = "memoryless_minmax"
    QuantizationArgs.model_validate(out)  # the library accepts this form
    return out


def check_recognition(driver, docs, tmp):
    """Every form of every group's scheme is recognized as selq's scheme."""
    groups = [g for doc in docs for g in doc["quantization_config"]["config_groups"].values()]
    items, expect = [], []
    for g in groups:
        own = {k: g.get(k) for k in ("weights", "input_activations", "output_activations", "format")}
        library = QuantizationScheme.model_validate(g).model_dump(mode="json")
        library["format"] = g.get("format")  # the group's format, as a writer sets it
        verbose = dict(own, weights=verbose_args(own["weights"]),
                       input_activations=verbose_args(own["input_activations"]))
        static = dict(verbose, weights=dict(verbose["weights"], actorder="static"))
        group = dict(verbose, weights=dict(verbose["weights"], actorder="group"))
        bits = dict(own, weights=dict(own["weights"], num_bits=own["weights"]["num_bits"] * 2))
        for form, scheme, same in (("own", own, True), ("library", library, True), ("verbose", verbose, True),
                                   ("actorder static", static, True), ("actorder group", group, False),
                                   ("num_bits", bits, False)):
            items.append({"dialect": "compressed-tensors", "scheme": scheme})
            expect.append((form, same))
    path = os.path.join(tmp, "recognize.json")
    with open(path, "w") as f:
        json.dump(items, f)
    got = json.loads(subprocess.run([driver, "--recognize", path], check=True, capture_output=True,
                                    text=True).stdout)
    errors = []
    forms = 6
    for i in range(0, len(items), forms):
        own_name = got[i][0]
        if own_name is None or got[i][1] != own_name:
            errors.append(f"selq's own scheme object not recognized: {items[i]['scheme']} -> {got[i]}")
            continue
        for j in range(1, forms):
            form, same = expect[i + j]
            names = got[i + j]
            if same and names != [own_name, own_name]:
                errors.append(f"{own_name}: the {form} form gives {names}")
            # A changed field is another scheme (int4 -> int8 is one) or none, never this one.
            if not same and own_name in names:
                errors.append(f"{own_name}: the {form} form should not be recognized as it, got {names}")
    return len(groups), errors


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.argv[1], out], check=True)
        files = sorted(glob.glob(os.path.join(out, "compressed-tensors_*.json")))
        if len(files) != 3:
            print(f"FAIL: expected 3 compressed-tensors configs, got {files}")
            return 1
        failed = False
        # The checker must be able to fail: a mutated config has to be caught.
        with open(files[0]) as f:
            doc = json.load(f)
        groups = doc["quantization_config"]["config_groups"]
        float_name = next(m["name"] for m in doc["modules"] if m["expected"] is None)
        doc["quantization_config"]["ignore"].remove(float_name)
        next(iter(groups.values()))["targets"].append(float_name)
        if not check(doc):
            print("FAIL: a float module added to a group's targets went unnoticed")
            failed = True
        for path in files:
            with open(path) as f:
                doc = json.load(f)
            errors = check(doc)
            n = len(doc["modules"])
            quantized = sum(1 for m in doc["modules"] if m["expected"] is not None)
            status = "ok" if not errors else "FAIL"
            print(f"{status}: {os.path.basename(path)}: {n} modules, {quantized} quantized, "
                  f"{len(doc['quantization_config']['config_groups'])} groups, "
                  f"{len(doc['fused_modules'])} fused")
            for e in errors:
                print("   ", e)
            failed |= bool(errors)
        docs = []
        for path in files:
            with open(path) as f:
                docs.append(json.load(f))
        n, errors = check_recognition(sys.argv[1], docs, out)
        print(f"{'ok' if not errors else 'FAIL'}: {n} scheme objects recognized in selq's, the library's "
              f"and the published verbose form (also with GPTQ's actorder static); actorder group and num_bits "
              f"changes rejected")
        for e in errors:
            print("   ", e)
        failed |= bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
