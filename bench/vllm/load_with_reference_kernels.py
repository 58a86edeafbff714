#!/usr/bin/env python
"""load.py plus a reference-kernel patch for schemes the vLLM CPU build has no
kernel for. Only the *kernel choice / apply step* is replaced; vLLM's own config
parsing, scheme selection, parameter creation and weight loading are untouched.

usage: python load_with_reference_kernels.py DIR [N_TOKENS] [BASE_DIR]

Patches (each applies only where vLLM itself finds no kernel):
  * compressed-tensors WNA16 with uint8b128 (INT8 weight-only, pack-quantized):
    choose_mp_linear_kernel -> RefInt8WNA16Kernel (int32 -> bytes -> uint8 - 128
    -> * weight_scale per channel / per group -> bf16 matmul).
  * ModelOpt NVFP4 weight-only (W4A16_NVFP4; vLLM-CPU forces Marlin FP4):
    init_nvfp4_linear_kernel -> RefNvfp4W4A16Kernel (E2M1 x E4M3 block scale x
    global scale -> bf16 matmul).
  * ModelOpt FP8 (per-channel weight, dynamic per-token activation):
    init_fp8_linear_kernel -> RefFp8WeightKernel (weight fp8 * weight_scale,
    activation kept in bf16), used only if vLLM's own selection raises.

After loading it inspects the model vLLM built (llm.apply_model): for every
quantized linear it dequantizes vLLM's parameters and compares them with
(a) the same dequantization done straight from the checkpoint's safetensors and
(b) the BF16 base weights (BASE_DIR, default the demo's SmolLM2 BF16 import).
"""
import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Run the engine core and the worker in this process so the monkeypatches
# below are the ones the model is built with.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import PROMPT, generate_and_print, open_llm, run  # noqa: E402
BASE = "/tmp/selq-demo/smollm2/smollm2-135m-bf16"  # scripts/demo.sh writes it there
PATCH_LOG = []


# --------------------------------------------------------------------------
# reference dequantizers (shared by the kernels and by the checks)
# --------------------------------------------------------------------------
def dequant_int8_packed(w_packed, w_scale, in_features):
    """compressed-tensors pack_to_int32, 8 bit: 4 values (q+128 as uint8) per
    int32, element 4k+j in byte j (little end)."""
    import torch

    assert w_packed.dtype == torch.int32
    q = w_packed.contiguous().view(torch.uint8)[:, :in_features]
    q = q.to(torch.int16) - 128
    s = w_scale.to(torch.float32)
    if s.dim() == 1:
        s = s[:, None]
    n_groups = s.shape[1]
    if n_groups > 1:
        group = in_features // n_groups
        s = s.repeat_interleave(group, dim=1)
    return q.to(torch.float32) * s  # [out, in] float32


def dequant_fp8(w, w_scale):
    import torch

    s = w_scale.to(torch.float32)
    if w.shape[0] == s.numel():  # [out, in], scale per output row
        return w.to(torch.float32) * s.reshape(-1, 1)
    # vLLM may store the fp8 weight transposed ([in, out])
    return (w.to(torch.float32) * s.reshape(1, -1)).t()


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequant_nvfp4(w_u8, w_scale_fp8, global_scale, group=16):
    """ModelOpt NVFP4: 2 e2m1 values per byte (element 2k in the low nibble),
    one e4m3 scale per 16 inputs, times the per-tensor weight_scale_2."""
    import torch

    lut = torch.tensor(E2M1, dtype=torch.float32)
    lo = (w_u8 & 0x0F).long()
    hi = (w_u8 >> 4).long()
    vals = torch.stack([lut[lo], lut[hi]], dim=-1).reshape(w_u8.shape[0], -1)
    s = w_scale_fp8.to(torch.float32).repeat_interleave(group, dim=1)
    return vals * s * global_scale.to(torch.float32)


def install_patches():
    import torch
    from vllm.scalar_type import scalar_types
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
        MPLinearKernel,
    )
    import vllm.model_executor.layers.quantization.compressed_tensors.schemes.compressed_tensors_wNa16 as wna16  # noqa: E501

    class RefInt8WNA16Kernel(MPLinearKernel):
        """Reference (slow) INT8 weight-only kernel: dequantize vLLM's loaded
        weight_packed/weight_scale on every call, bf16 matmul."""

        @classmethod
        def get_min_capability(cls):
            return -1

        @classmethod
        def can_implement(cls, c):
            if c.weight_type != scalar_types.uint8b128 or c.zero_points:
                return False, "RefInt8WNA16Kernel: only symmetric uint8b128"
            return True, None

        def process_weights_after_loading(self, layer):
            # keep vLLM's parameters exactly as loaded (plain Parameters)
            for name in (self.w_q_name, self.w_s_name):
                p = getattr(layer, name)
                layer._parameters[name] = torch.nn.Parameter(p.data, requires_grad=False)

        def apply_weights(self, layer, x, bias=None):
            w_q, w_s, _ = self._get_weight_params(layer)
            in_f = self.config.partition_weight_shape[0]
            w = dequant_int8_packed(w_q, w_s, in_f).to(x.dtype)
            return torch.nn.functional.linear(x, w, bias)

    orig_choose = wna16.choose_mp_linear_kernel

    def choose_mp_linear_kernel(config, compute_capability=None):
        try:
            return orig_choose(config, compute_capability)
        except ValueError as e:
            ok, _ = RefInt8WNA16Kernel.can_implement(config)
            if not ok:
                raise
            if not PATCH_LOG or PATCH_LOG[-1] != "wna16":
                print("load_with_reference_kernels: vLLM found no WNA16 kernel (%s); using "
                      "RefInt8WNA16Kernel" % str(e).splitlines()[0], flush=True)
            PATCH_LOG.append("wna16")
            return RefInt8WNA16Kernel

    wna16.choose_mp_linear_kernel = choose_mp_linear_kernel

    # ---- ModelOpt FP8 (only used if vLLM's own choice raises) -------------
    import vllm.model_executor.layers.quantization.modelopt as mo

    class RefFp8WeightKernel:
        """Reference FP8 weight kernel: weight fp8 * weight_scale -> bf16,
        activation left in bf16."""

        def process_weights_after_loading(self, layer):
            for name in ("weight", "weight_scale"):
                p = getattr(layer, name)
                layer._parameters[name] = torch.nn.Parameter(p.data, requires_grad=False)

        def apply_weights(self, layer, x, bias=None):
            w = dequant_fp8(layer.weight, layer.weight_scale).to(x.dtype)
            return torch.nn.functional.linear(x, w, bias)

    orig_init_fp8 = mo.init_fp8_linear_kernel
    RefFp8WeightKernel.input_quant_key = lambda self: None

    def init_fp8_linear_kernel(*args, **kwargs):
        if os.environ.get("LOAD_PATCHED_FORCE_FP8_REF") != "1":
            try:
                return orig_init_fp8(*args, **kwargs)
            except Exception as e:  # noqa: BLE001
                print("load_with_reference_kernels: vLLM fp8 kernel selection failed (%s: %s); "
                      "using RefFp8WeightKernel" % (type(e).__name__, e), flush=True)
        PATCH_LOG.append("fp8")
        return RefFp8WeightKernel()

    mo.init_fp8_linear_kernel = init_fp8_linear_kernel

    # ---- ModelOpt NVFP4 weight-only (W4A16_NVFP4) -------------------------
    class RefNvfp4W4A16Kernel:
        """Reference NVFP4 W4A16 kernel: dequantize vLLM's processed params
        (weight uint8, weight_scale e4m3, weight_global_scale) -> bf16 matmul."""

        def input_quant_key(self):
            return None

        def process_weights_after_loading(self, layer):
            pass

        def apply_weights(self, layer, x, bias=None):
            w = dequant_nvfp4(layer.weight, layer.weight_scale,
                              layer.weight_global_scale).to(x.dtype)
            return torch.nn.functional.linear(x, w, bias)

    orig_init_nvfp4 = mo.init_nvfp4_linear_kernel

    def init_nvfp4_linear_kernel(use_a16=False):
        try:
            return orig_init_nvfp4(use_a16=use_a16)
        except Exception as e:  # noqa: BLE001
            if not use_a16:
                raise
            if "nvfp4" not in PATCH_LOG:
                print("load_with_reference_kernels: vLLM NVFP4 kernel selection failed (%s: %s); "
                      "using RefNvfp4W4A16Kernel" % (type(e).__name__, e), flush=True)
            PATCH_LOG.append("nvfp4")
            return RefNvfp4W4A16Kernel()

    mo.init_nvfp4_linear_kernel = init_nvfp4_linear_kernel


# --------------------------------------------------------------------------
# post-load inspection (runs inside the worker via llm.apply_model)
# --------------------------------------------------------------------------
FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"],
         "gate_up_proj": ["gate_proj", "up_proj"]}


def inspect_model(model_dir, base_dir):
    def fn(model):
        import glob
        import torch
        from safetensors import safe_open

        def open_all(d):
            out = {}
            for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
                h = safe_open(f, "pt")
                for k in h.keys():
                    out[k] = h
            return out

        ck = open_all(model_dir)
        base = open_all(base_dir)

        def get(src, name):
            return src[name].get_tensor(name)

        rows = []
        for mname, mod in model.named_modules():
            leaf = mname.rsplit(".", 1)[-1]
            parts = [mname.rsplit(".", 1)[0] + "." + p for p in FUSED.get(leaf, [leaf])] \
                if "." in mname else [mname]
            if hasattr(mod, "weight_packed"):
                kind = "int8"
                wp, ws = mod.weight_packed.data, mod.weight_scale.data
                in_f = wp.shape[1] * 4
                deq = dequant_int8_packed(wp, ws, in_f)
                ck_deq = torch.cat([dequant_int8_packed(get(ck, p + ".weight_packed"),
                                                        get(ck, p + ".weight_scale"), in_f)
                                    for p in parts])
                raw = torch.equal(wp, torch.cat([get(ck, p + ".weight_packed") for p in parts]))
                desc = "weight_packed %s %s, weight_scale %s %s" % (
                    tuple(wp.shape), wp.dtype, tuple(ws.shape), ws.dtype)
                csum = int(wp.view(torch.uint8).to(torch.int64).sum())
            elif getattr(mod, "weight", None) is not None and mod.weight.dtype == torch.float8_e4m3fn \
                    and hasattr(mod, "weight_scale"):
                kind = "fp8"
                w, ws = mod.weight.data, mod.weight_scale.data
                deq = dequant_fp8(w, ws)
                ck_deq = torch.cat([dequant_fp8(get(ck, p + ".weight"), get(ck, p + ".weight_scale"))
                                    for p in parts])
                raw = None
                desc = "weight %s %s, weight_scale %s %s" % (
                    tuple(w.shape), w.dtype, tuple(ws.shape), ws.dtype)
                csum = int(w.view(torch.uint8).to(torch.int64).sum())
            elif getattr(mod, "weight", None) is not None and mod.weight.dtype == torch.uint8 \
                    and hasattr(mod, "weight_global_scale"):
                kind = "nvfp4"
                w, ws, gs = mod.weight.data, mod.weight_scale.data, mod.weight_global_scale.data
                deq = dequant_nvfp4(w, ws, gs)
                s2 = [get(ck, p + ".weight_scale_2").reshape(()) for p in parts]
                # vLLM fuses q/k/v (gate/up) with one global scale = max of the parts
                ck_deq = torch.cat([dequant_nvfp4(get(ck, p + ".weight"), get(ck, p + ".weight_scale"),
                                                  max(s2)) for p in parts])
                raw = torch.equal(w, torch.cat([get(ck, p + ".weight") for p in parts])) and \
                    torch.equal(ws.view(torch.uint8),
                                torch.cat([get(ck, p + ".weight_scale").view(torch.uint8) for p in parts]))
                desc = "weight %s %s, weight_scale %s %s, global %.3g (s2 parts %s)" % (
                    tuple(w.shape), w.dtype, tuple(ws.shape), ws.dtype, float(gs),
                    "equal" if len(set(float(x) for x in s2)) == 1 else "differ")
                csum = int(w.to(torch.int64).sum())
            else:
                continue
            ref = torch.cat([get(base, p + ".weight") for p in parts]).to(torch.float32)
            same_as_file = torch.equal(deq, ck_deq)
            cos = torch.nn.functional.cosine_similarity(deq.flatten(), ref.flatten(), dim=0).item()
            rel = ((deq - ref).norm() / ref.norm()).item()
            rows.append((mname, kind, desc, csum, raw, same_as_file, cos, rel))
        return rows

    return fn


def main(argv):
    if len(argv) < 2 or len(argv) > 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    model_dir = argv[1]
    n_tokens = int(argv[2]) if len(argv) >= 3 else 8
    base_dir = argv[3] if len(argv) == 4 else BASE

    install_patches()
    llm = open_llm(model_dir)

    rows = llm.apply_model(inspect_model(model_dir, base_dir))[0]
    print("load_with_reference_kernels: %d quantized linears inspected" % len(rows))
    for r in rows[:4] + rows[-2:]:
        print("  %-36s %s %s checksum=%d raw_equal_file=%s dequant_equal_file=%s "
              "cos_vs_bf16=%.6f rel_err=%.4f" % r)
    n_eq = sum(1 for r in rows if r[5])
    print("load_with_reference_kernels: dequant(vLLM params) == dequant(checkpoint file) for %d/%d; "
          "cos vs BF16 base min %.6f mean %.6f; rel err max %.4f" % (
              n_eq, len(rows), min(r[6] for r in rows), sum(r[6] for r in rows) / len(rows),
              max(r[7] for r in rows)))
    if any(r[4] is False for r in rows):
        print("load_with_reference_kernels: WARNING raw weight_packed differs from file for some layers")

    print("patches used:", sorted(set(PATCH_LOG)) or "none")
    generate_and_print(llm, n_tokens)
    return 0


if __name__ == "__main__":
    run(main, "load_with_reference_kernels.py")
