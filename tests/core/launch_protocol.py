"""Record the kernel launches of the NVIDIA path for a fixed set of public calls, on CPU.

The Gluon kernels (MLA decode, FP8 GEMMs) and the portable Triton kernels only run on a GPU,
which CI does not have. What the host code sends them can still be checked anywhere: this
module routes CPU tensors to ``flashinfer.{gemm,mla}._cuda``, stubs the device (compute
capability, multiprocessor count, the Gluon tier's device and Triton checks) and replaces every
launch (``FastLaunch.launch``, ``TunedLaunch.launch``, ``torch._scaled_mm``, ``torch.bmm``) by a
recorder. Each public call of :func:`cases` yields the list of its launches:
``(launcher, grid, positional arguments, keyword arguments)``, tensors described by the caller
tensor whose memory they are (or the order in which a new allocation first appears), byte
offset, shape, strides and dtype; TMA descriptors by all their fields; floats by ``repr``.

``tests/core/test_launch_protocol.py`` compares the record of the installed package with
``launch_protocol_main.json``, recorded from the main branch that ran on the H200
(``python tests/core/launch_protocol.py --out PATH`` with that checkout's packages first on
``PYTHONPATH``). Run it as a script in a process of its own: it patches module globals.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import sys

import torch

E4M3, E5M2, BF16, FP16, FP32 = (
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.bfloat16,
    torch.float16,
    torch.float32,
)
I32 = torch.int32
# (name, compute capability, FLASHINFER_KERNEL_TIER, multiprocessors) of the stubbed device
DEVICES = {
    "h200": ((9, 0), "auto", 132),
    "h200-tl": ((9, 0), "tl", 132),
    "h200-gluon": ((9, 0), "gluon", 132),
    "h200-few-sms": ((9, 0), "auto", 2),
    "l40": ((8, 9), "auto", 142),
    "a100": ((8, 0), "auto", 108),
}


class Recorder:
    """Collects launches; describes tensors against the tensors a case names."""

    def __init__(self):
        self.named: dict = {}
        self.launches: list = []
        self._new: dict = {}

    def start(self, named: dict) -> None:
        self.named = {n: t for n, t in named.items() if isinstance(t, torch.Tensor)}
        self.launches = []
        self._new = {}

    def tensor(self, t: torch.Tensor) -> dict:
        storage = t.untyped_storage().data_ptr()
        owner = None
        for name, x in self.named.items():
            if x.untyped_storage().data_ptr() == storage and storage != 0:
                owner = name
                break
        if owner is None:
            owner = self._new.setdefault(storage, f"new#{len(self._new)}")
        return {
            "tensor": owner,
            "offset": t.data_ptr() - storage,
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "dtype": str(t.dtype),
        }

    def value(self, x):
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if "block_shape" in getattr(type(x), "__dataclass_fields__", ()) or hasattr(x, "block_shape"):
            return {
                "descriptor": {
                    "base": self.tensor(x.base),
                    "shape": list(x.shape),
                    "strides": list(x.strides),
                    "block_shape": list(x.block_shape),
                    "layout": repr(getattr(x, "layout", None)),
                    "padding": getattr(x, "padding", None),
                }
            }
        if isinstance(x, float):
            return {"float": repr(x)}
        if isinstance(x, (bool, int, str)) or x is None:
            return x
        if isinstance(x, (tuple, list)):
            return [self.value(v) for v in x]
        if isinstance(x, torch.dtype):
            return str(x)
        return {"repr": repr(x)}

    def record(self, launcher: str, grid, args, kwargs) -> None:
        if callable(grid):  # a function of the meta-parameters: its value on a fixed set of them
            grid = {"grid_of_meta": list(grid(collections.defaultdict(lambda: 64, kwargs)))}
        self.launches.append(
            {
                "launcher": launcher,
                "grid": self.value(grid),
                "args": [self.value(a) for a in args],
                "kwargs": {k: self.value(v) for k, v in sorted(kwargs.items())},
            }
        )


def _name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)  # an autotuner wraps the JIT function
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', repr(fn))}"


def _replace_everywhere(original, replacement) -> None:
    """Rebind every ``flashinfer`` module global that is ``original`` (names imported by value)."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("flashinfer") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                setattr(module, attr, replacement)


def install(recorder: Recorder, device: dict) -> None:
    """Route CPU tensors to the NVIDIA path of a stubbed device whose launches are recorded."""
    import flashinfer.gemm._cuda  # noqa: F401
    import flashinfer.mla._cuda  # noqa: F401
    import flashinfer.utils
    from flashinfer._core import dispatch, kernel_tier, triton_launch
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise, fp8_quantize, gluon_fp8_blockwise  # noqa: F401
    from flashinfer.gemm.kernels.bmm import fp8_bmm, gluon_fp8_bmm  # noqa: F401
    from flashinfer.mla.kernels import mla_decode, mla_decode_gluon, rope_quantize  # noqa: F401

    dispatch.ROUTING = dispatch.ROUTING.routed("cpu", "cuda")._replace(force_reference=False)
    _replace_everywhere(flashinfer.utils.get_compute_capability, lambda d=None: device["capability"])
    _replace_everywhere(flashinfer.utils.get_device_sm_count, lambda d=None: device["sms"])
    _replace_everywhere(kernel_tier.gluon_supported, lambda index=None: device["capability"] == (9, 0))
    for module in (gluon_fp8_blockwise, gluon_fp8_bmm):
        if hasattr(module, "multiprocessors"):
            module.multiprocessors = lambda d=None: device["sms"]
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda index=None: device["capability"]

    # a launcher by the module global that holds it (the Gluon decode has its own combine launcher)
    holders = {
        id(value): f"{name}.{attr}"
        for name, module in list(sys.modules.items())
        if name.startswith("flashinfer") and module is not None
        for attr, value in vars(module).items()
        if isinstance(value, (triton_launch.FastLaunch, triton_launch.TunedLaunch))
    }

    def fast(self, grid, *args, **kwargs):
        recorder.record(holders.get(id(self), _name(self.kernel)), grid, args, kwargs)

    def tuned(self, grid, key, *args, **constants):
        recorder.record(
            holders.get(id(self), _name(self.tuned)), grid, args, {**constants, "__key__": list(key)}
        )

    triton_launch.FastLaunch.launch = fast
    triton_launch.TunedLaunch.launch = tuned

    def library(name):
        return lambda *args, **kwargs: recorder.record(name, (), args, kwargs)

    torch._scaled_mm = library("torch._scaled_mm")
    torch.bmm = library("torch.bmm")


def set_device(device: dict, name: str) -> None:
    import flashinfer.mla._cuda as mla_cuda

    capability, tier, sms = DEVICES[name]
    device.update(capability=capability, sms=sms)
    os.environ["FLASHINFER_KERNEL_TIER"] = tier
    # keyed by device, not by what the stub says about it
    mla_cuda.decode_plan.cache_clear()
    _clear_replays()


# ---------------------------------------------------------------------------------------------
# the calls


def _fp8(*shape, dtype=E4M3):
    return torch.randn(*shape).to(dtype)


def decode_cases():
    """MLA decode (576-wide and packed) calls: (name, devices, function, kwargs)."""
    from flashinfer.decode import get_batch_decode_metadata_mla
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla as decode

    def call(dtype, batch=2, q_len=1, heads=128, topk=128, pages=8, page_size=64, sparse=True, **changes):
        query = torch.randn(batch, q_len, heads, 576).to(dtype)
        kv_cache = torch.randn(pages, page_size, 576).to(dtype)
        args = dict(
            query=query, kv_cache=kv_cache, workspace_buffer=torch.empty(64 << 20, dtype=torch.uint8),
            qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64,
            block_tables=torch.randint(0, pages * page_size, (batch, q_len, topk), dtype=I32),
            seq_lens=torch.full((batch,), topk, dtype=I32), max_seq_len=topk, sparse_mla_top_k=topk,
            bmm1_scale=0.07, bmm2_scale=1.0,
        )  # fmt: skip
        if not sparse:
            args.update(sparse_mla_top_k=0, block_tables=torch.randint(0, pages, (batch, 4), dtype=I32))
        args.update(changes)
        return args

    def strided_out(batch=2, q_len=1, heads=128):
        return torch.empty(batch, q_len, heads, 1024, dtype=BF16)[..., :512]

    tiers = ("h200", "h200-tl", "l40", "a100")
    rows = []
    for dtype in (E4M3, BF16):
        d = str(dtype).split(".")[-1]
        rows += [
            (f"sparse {d}", tiers, decode, call(dtype)),
            (f"sparse {d}, few SMs (no split)", ("h200-few-sms",), decode, call(dtype)),
            (f"sparse {d}, lse, sinks, strided out", tiers, decode,
             call(dtype, out=strided_out(), lse=torch.empty(2, 128), sinks=torch.randn(128))),
            (f"sparse {d}, return_lse, tensor scales", tiers, decode,
             call(dtype, return_lse=True, bmm1_scale=torch.tensor(0.07), bmm2_scale=torch.tensor([1.5]))),
            (f"sparse {d}, 4-D cache, q_len 2, 3-D lse", tiers, decode,
             call(dtype, q_len=2, kv_cache=torch.randn(8, 1, 64, 576).to(dtype), lse=torch.empty(2, 2, 128),
                  seq_lens=torch.tensor([100, 128], dtype=I32))),
            (f"sparse {d}, 16 heads, small workspace", tiers, decode,
             call(dtype, heads=16, workspace_buffer=torch.empty(300000, dtype=torch.int8))),
            (f"sparse {d}, cache not 16-byte aligned", tiers, decode,
             call(dtype, kv_cache=torch.randn(8 * 64 * 576 + 8).to(dtype)[8:].view(8, 64, 576))),
            (f"paged {d}", tiers, decode, call(dtype, sparse=False)),
            (f"paged {d}, 4-D cache, lse, sinks, q_len 2", tiers, decode,
             call(dtype, sparse=False, q_len=2, kv_cache=torch.randn(8, 1, 64, 576).to(dtype),
                  return_lse=True, sinks=[torch.randn(128)])),
            (f"paged {d}, strided pages", tiers, decode,
             call(dtype, sparse=False, kv_cache=torch.randn(8, 2, 64, 576).to(dtype)[:, 0])),
        ]  # fmt: skip
    meta_query = torch.randn(2, 1, 128, 576).to(E4M3)
    with_metadata = call(E4M3, query=meta_query)
    with_metadata["metadata"] = lambda: get_batch_decode_metadata_mla(
        meta_query, with_metadata["seq_lens"], 128
    )
    rows.append(("sparse e4m3, metadata", tiers, decode, with_metadata))
    compact = call(BF16, query=torch.randn(5, 128, 576).to(BF16), block_tables=torch.randint(0, 512, (5, 128), dtype=I32),
                   cum_seq_lens_q=torch.tensor([0, 2, 5], dtype=I32), max_q_len=3)  # fmt: skip
    rows.append(("sparse bf16, compact query", tiers, decode, compact))
    rows.append(("sparse bf16, 256/64 dims", tiers, decode,
                 call(BF16, query=torch.randn(2, 1, 16, 320).to(BF16), kv_cache=torch.randn(8, 64, 320).to(BF16),
                      kv_lora_rank=256, heads=16)))  # fmt: skip
    rows.append(("sparse bf16, native 512/0 dims", tiers, decode,
                 call(BF16, q_len=2, query=torch.randn(2, 2, 128, 512).to(BF16),
                      kv_cache=torch.randn(8, 64, 512).to(BF16), qk_rope_head_dim=0,
                      sparse_mla_top_k_lens=torch.tensor([5, 128, 0, 64], dtype=I32))))  # fmt: skip

    def packed(q_len=1, **changes):
        args = call(BF16, q_len=q_len, kv_cache=torch.randint(0, 100, (8, 64, 656), dtype=torch.uint8),
                    backend="sparse", seq_lens=torch.tensor([[100], [128]], dtype=I32))  # fmt: skip
        args.update(changes)
        return args

    rows += [
        ("packed", tiers, decode, packed()),
        ("packed, no lengths, lse, sinks", tiers, decode, packed(seq_lens=None, return_lse=True, sinks=torch.randn(128))),
        ("packed, 4-D cache, q_len 2, strided out", tiers, decode,
         packed(q_len=2, query=torch.randn(2, 2, 128, 576).to(BF16), block_tables=torch.randint(0, 512, (2, 2, 128), dtype=I32),
                kv_cache=torch.randint(0, 100, (8, 1, 64, 656), dtype=torch.uint8),
                seq_lens=torch.tensor([7, 128, 0, 64], dtype=I32), out=strided_out(q_len=2))),
        ("packed, 16 heads, few SMs", ("h200-few-sms",), decode,
         packed(query=torch.randn(2, 1, 16, 576).to(BF16))),
    ]  # fmt: skip
    return rows


def rope_cases():
    from flashinfer.rope import mla_rope_quantize_fp8 as rope

    def call(tokens=3, heads=16, nope=512, k_2d=False, dtype=E4M3, **changes):
        k_shape = (tokens, 64) if k_2d else (tokens, 1, 64)
        kn_shape = (tokens, nope) if k_2d else (tokens, 1, nope)
        args = dict(
            q_rope=torch.randn(tokens, heads, 64).to(BF16), k_rope=torch.randn(*k_shape).to(BF16),
            q_nope=torch.randn(tokens, heads, nope).to(BF16), k_nope=torch.randn(*kn_shape).to(BF16),
            cos_sin_cache=torch.randn(256, 64), pos_ids=torch.randint(0, 256, (tokens,)), is_neox=False,
            q_rope_out=torch.empty(tokens, heads, 64, dtype=dtype), k_rope_out=torch.empty(*k_shape, dtype=dtype),
            q_nope_out=torch.empty(tokens, heads, nope, dtype=dtype), k_nope_out=torch.empty(*kn_shape, dtype=dtype),
        )  # fmt: skip
        args.update(changes)
        return args

    merged_q = torch.empty(3, 16, 576, dtype=E4M3)
    merged_k = torch.empty(3, 576, dtype=E4M3)
    latent = torch.randn(3, 576).to(BF16)
    tiers = ("h200", "a100")
    return [
        ("rope 3-D K", tiers, rope, call()),
        ("rope 2-D K, merged outputs (sglang)", tiers, rope,
         call(k_2d=True, k_rope=latent[:, 512:], k_nope=latent[:, :512], q_rope_out=merged_q[..., 512:],
              q_nope_out=merged_q[..., :512], k_rope_out=merged_k[:, 512:], k_nope_out=merged_k[:, :512],
              quant_scale_q=0.5, quant_scale_kv=2.0)),
        ("rope neox, e5m2, int32 positions, bf16 cache", tiers, rope,
         call(is_neox=True, dtype=E5M2, pos_ids=torch.randint(0, 256, (3,), dtype=I32),
              cos_sin_cache=torch.randn(256, 64).to(BF16))),
        ("rope no nope part, 128 heads", tiers, rope, call(heads=128, nope=0)),
        ("rope strided q", tiers, rope, call(q_nope=torch.randn(16, 3, 512).to(BF16).transpose(0, 1))),
    ]  # fmt: skip


def gemm_cases():
    import flashinfer.gemm as G

    tiers = ("h200", "h200-gluon", "h200-tl", "l40", "a100")
    rows = []
    A = _fp8(4, 64, 128)
    B = _fp8(4, 256, 128).transpose(1, 2)  # column-major
    out = torch.empty(4, 64, 256, dtype=BF16)
    rows += [
        ("bmm_fp8 () scales", tiers, G.bmm_fp8, dict(A=A, B=B, A_scale=torch.tensor(0.5), B_scale=torch.tensor(2.0),
                                                   dtype=BF16, out=out)),
        ("bmm_fp8 (1,) scales, fp16 allocated", tiers, G.bmm_fp8,
         dict(A=A, B=B, A_scale=torch.ones(1), B_scale=torch.ones(1), dtype=FP16)),
        ("bmm_fp8 channel scales", tiers, G.bmm_fp8,
         dict(A=A, B=B, A_scale=torch.rand(4, 64, 1), B_scale=torch.rand(4, 1, 256), dtype=BF16, out=out)),
        ("bmm_fp8 transposed channel scales", tiers, G.bmm_fp8,
         dict(A=A, B=B, A_scale=torch.rand(4, 1, 64), B_scale=torch.rand(4, 256, 1), dtype=BF16, out=out)),
        ("bmm_fp8 row-major B, e5m2 A, fp16 out", tiers, G.bmm_fp8,
         dict(A=_fp8(4, 64, 128, dtype=E5M2), B=_fp8(4, 128, 256), A_scale=torch.tensor(1.0),
              B_scale=torch.tensor(1.0), dtype=FP16)),
        ("bmm_fp8 one batch (cuBLASLt)", tiers, G.bmm_fp8,
         dict(A=A[:1], B=B[:1], A_scale=torch.tensor(0.5), B_scale=torch.tensor(2.0), dtype=BF16)),
        ("bmm_fp8 one batch, row scales", tiers, G.bmm_fp8,
         dict(A=A[:1], B=B[:1], A_scale=torch.rand(1, 64, 1), B_scale=torch.rand(1, 1, 256), dtype=BF16)),
        ("bmm_fp8 strided out", tiers, G.bmm_fp8,
         dict(A=A, B=B, A_scale=torch.tensor(0.5), B_scale=torch.tensor(2.0), dtype=BF16,
              out=torch.empty(4, 64, 512, dtype=BF16)[..., ::2])),
        ("bmm_bf16", tiers, G.bmm_bf16, dict(A=torch.randn(2, 8, 16).to(BF16), B=torch.randn(2, 16, 8).to(BF16))),
    ]  # fmt: skip
    for m in (8, 512):
        a, b = _fp8(m, 512), _fp8(256, 512)
        rows += [
            (f"groupwise m={m} K", tiers, G.gemm_fp8_nt_groupwise,
             dict(a=a, b=b, a_scale=torch.rand(m, 4), b_scale=torch.rand(2, 4), scale_major_mode="K")),
            (f"groupwise m={m} MN", tiers, G.gemm_fp8_nt_groupwise,
             dict(a=a, b=b, a_scale=torch.rand(4, m), b_scale=torch.rand(4, 2), scale_major_mode="MN",
                  out=torch.empty(m, 256, dtype=FP16))),
            (f"groupwise m={m} trtllm", tiers, G.gemm_fp8_nt_groupwise,
             dict(a=a, b=b, a_scale=torch.rand(4, m).t(), b_scale=torch.rand(2, 4), backend="trtllm")),
            (f"groupwise m={m} 128-row blocks", tiers, G.gemm_fp8_nt_groupwise,
             dict(a=a, b=b, a_scale=torch.rand((m + 127) // 128, 4), b_scale=torch.rand(2, 4), scale_major_mode="K",
                  scale_granularity_mnk=(128, 128, 128))),
            (f"groupwise m={m} FP8 output", tiers, G.gemm_fp8_nt_groupwise,
             dict(a=a, b=b, a_scale=torch.rand(m, 4), b_scale=torch.rand(2, 4), scale_major_mode="K",
                  out=torch.empty(m, 256, dtype=E4M3), output_scale=torch.empty(m, 2))),
            (f"groupwise m={m} strided out", tiers, G.gemm_fp8_nt_groupwise,
             dict(a=a, b=b, a_scale=torch.rand(m, 4), b_scale=torch.rand(2, 4),
                  scale_major_mode="K", out=torch.empty(m, 512, dtype=BF16)[:, 128:384])),
            (f"blockscaled m={m}", tiers, G.gemm_fp8_nt_blockscaled,
             dict(a=a, b=b, a_scale=torch.rand(4, (m + 127) // 128), b_scale=torch.rand(4, 2))),
        ]  # fmt: skip
    a, bg = _fp8(256, 256), _fp8(3, 128, 256)
    ids = torch.tensor([0] * 100 + [2] * 100 + [-1] * 56, dtype=I32)
    rows += [
        ("deepgemm contiguous", tiers, G.group_deepgemm_fp8_nt_groupwise,
         dict(a=a, b=bg, a_scale=torch.rand(256, 2), b_scale=torch.rand(3, 1, 2), m_indices=ids)),
        ("deepgemm contiguous, MN-major a_scale", tiers, G.group_deepgemm_fp8_nt_groupwise,
         dict(a=a, b=bg, a_scale=torch.rand(2, 256).t(), b_scale=torch.rand(3, 1, 2), m_indices=ids,
              out=torch.empty(256, 128, dtype=BF16))),
        ("deepgemm masked", tiers, G.batch_deepgemm_fp8_nt_groupwise,
         dict(a=_fp8(3, 64, 256), b=bg, a_scale=torch.rand(3, 64, 2), b_scale=torch.rand(3, 1, 2),
              masked_m=torch.tensor([5, 64, 0], dtype=I32), expected_m=32)),
        ("deepgemm masked, expected_m past the decode-MoE kernel's", tiers, G.batch_deepgemm_fp8_nt_groupwise,
         dict(a=_fp8(3, 128, 256), b=bg, a_scale=torch.rand(3, 128, 2), b_scale=torch.rand(3, 1, 2),
              masked_m=torch.tensor([100, 128, 0], dtype=I32), expected_m=100)),
        ("segments K", tiers, G.group_gemm_fp8_nt_groupwise,
         dict(a=a, b=bg, a_scale=torch.rand(256, 2), b_scale=torch.rand(3, 1, 2),
              m_indptr=torch.tensor([0, 100, 100, 256], dtype=I32), scale_major_mode="K")),
        ("segments K, e5m2 a", tiers, G.group_gemm_fp8_nt_groupwise,
         dict(a=_fp8(256, 256, dtype=E5M2), b=bg, a_scale=torch.rand(256, 2), b_scale=torch.rand(3, 1, 2),
              m_indptr=torch.tensor([0, 100, 100, 256], dtype=I32), scale_major_mode="K", backend="cutile")),
        ("segments MN, 128-row blocks, fp16", tiers, G.group_gemm_fp8_nt_groupwise,
         dict(a=a, b=bg, a_scale=torch.rand(2, 2), b_scale=torch.rand(3, 2, 1),
              m_indptr=torch.tensor([0, 128, 128, 256], dtype=I32), scale_granularity_mnk=(128, 128, 128),
              out_dtype=FP16)),
        ("blockscale sm90 bf16 + fp8 weight", tiers, G.fp8_blockscale_gemm_sm90,
         dict(input=torch.randn(16, 256).to(BF16), weight=_fp8(128, 256), weight_scale=torch.rand(1, 2))),
        ("blockscale sm90 bf16 + bf16", tiers, G.fp8_blockscale_gemm_sm90,
         dict(input=torch.randn(16, 256).to(BF16), weight=torch.randn(128, 256).to(BF16))),
        ("blockscale sm90 fp8 + fp8, per-row weight scales", tiers, G.fp8_blockscale_gemm_sm90,
         dict(input=_fp8(16, 256), weight=_fp8(128, 256), input_scale=torch.rand(2, 16),
              weight_scale=torch.rand(128, 2), out=torch.empty(16, 128, dtype=FP16))),
    ]  # fmt: skip
    return rows


def cases():
    torch.manual_seed(0)
    return decode_cases() + rope_cases() + gemm_cases()


def run() -> dict:
    """``{case name @ device: [launch, ...] or the error raised}`` for every case and device."""
    recorder, device = Recorder(), {}
    install(recorder, device)
    results = {}
    for name, devices, fn, kwargs in cases():
        for device_name in devices:
            set_device(device, device_name)
            args = {k: (v() if callable(v) else v) for k, v in kwargs.items()}
            recorder.start(args)
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    fn(**args)
                results[f"{name} @ {device_name}"] = recorder.launches
            except Exception as error:  # recorded: both versions must fail alike
                results[f"{name} @ {device_name}"] = {"raises": type(error).__name__, "message": str(error)}
    return results


def _like(args: dict) -> dict:
    """The same call on new memory: every tensor a view of a new storage of its storage's size, at
    its offset with its shape and strides (arguments sharing a storage share the new one)."""
    storages = {}

    def like(t):
        if isinstance(t, (list, tuple)):
            return type(t)(like(x) for x in t)
        if not isinstance(t, torch.Tensor):
            return t
        old = t.untyped_storage()
        new = storages.get(old.data_ptr())
        if new is None:
            new = storages[old.data_ptr()] = torch.empty(old.nbytes(), dtype=torch.uint8).untyped_storage()
            new.copy_(old)
        return torch.empty(0, dtype=t.dtype).set_(new, t.storage_offset(), t.shape, t.stride())

    return {k: like(v) for k, v in args.items()}


def _clear_replays() -> None:
    try:
        from flashinfer._core.replay import Replays
    except ImportError:  # a tree from before the replays (host_time.py --section eager-cpu --baseline)
        return

    for name, module in list(sys.modules.items()):
        if name.startswith("flashinfer") and module is not None:
            for value in vars(module).values():
                if isinstance(value, Replays):
                    value._replays.clear()


def replay_cases():
    """The cases, and the decode cases again as engines make them: ``out=`` given (the decode's
    replay needs it), 4-D and 3-D."""
    rows = cases()
    for name, devices, fn, kwargs in list(rows):
        if not name.startswith(("sparse", "paged", "packed")) or "out" in kwargs:
            continue
        if any(
            k in kwargs for k in ("lse", "return_lse", "sinks", "cum_seq_lens_q", "sparse_mla_top_k_lens")
        ):
            continue
        query = kwargs["query"]
        batch, q_len, heads = query.shape[:3]
        rank = kwargs.get("kv_lora_rank", 512)
        rows.append(
            (
                f"{name}, out=",
                devices,
                fn,
                {**kwargs, "out": torch.empty(batch, q_len, heads, rank, dtype=BF16)},
            )
        )
        if q_len == 1:
            rows.append(
                (
                    f"{name}, 3-D out=",
                    devices,
                    fn,
                    {**kwargs, "out": torch.empty(batch, heads, rank, dtype=BF16)},
                )
            )
    return rows


def _by_pointer(value):
    # every tensor in ``value`` by which tensor it is, its byte offset and dtype
    if isinstance(value, dict):
        if "tensor" in value:
            return {k: v for k, v in value.items() if k not in ("shape", "stride")}
        return {k: _by_pointer(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_by_pointer(v) for v in value]
    return value


def _triton_arguments_by_pointer(launches: list) -> list:
    """``launches`` with each Triton kernel's tensor arguments (descriptor bases too) described by
    pointer and dtype alone: the compiled launcher passes a tensor's pointer, never its shape or
    strides, and a replay may hand a kernel a flat scratch buffer (``flashinfer._core.scratch``)
    or a scale's storage untransposed where the whole path passes a shaped view of the same
    memory. A descriptor's own geometry, and library calls (``torch.*``), stay compared whole."""
    return [
        launch if launch["launcher"].startswith("torch.") else {**launch, "args": _by_pointer(launch["args"])}
        for launch in launches
    ]


def replays() -> dict:
    """``{case @ device: (replayed, equal)}`` for every case and device: a second call of the same
    call signature on new memory, replayed where the first call left a replay
    (``flashinfer._core.replay``), and whether its launches equal those of the whole path on that
    same memory (the replays cleared; Triton kernels' tensors by pointer:
    :func:`_triton_arguments_by_pointer`)."""
    from flashinfer._core.replay import Replays

    recorder, device = Recorder(), {}
    install(recorder, device)
    hits, lookup = [], Replays.find

    def counted(self, head, tensors):
        found = lookup(self, head, tensors)
        hits.append(found is not None)
        return found

    Replays.find = counted
    results = {}
    for name, devices, fn, kwargs in replay_cases():
        for device_name in devices:
            set_device(device, device_name)
            first = {k: (v() if callable(v) else v) for k, v in kwargs.items()}
            _clear_replays()
            recorder.start(first)
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    fn(**first)
            except Exception:  # an error case: nothing recorded to replay
                continue
            second = _like(first)
            recorder.start(second)
            hits.clear()
            fn(**second)
            replayed, repeated = any(hits), recorder.launches
            _clear_replays()
            recorder.start(second)
            fn(**second)
            whole = recorder.launches
            equal = _triton_arguments_by_pointer(repeated) == _triton_arguments_by_pointer(whole)
            results[f"{name} @ {device_name}"] = (replayed, equal)
    return results


def dumps(results: dict) -> str:
    """One line per case (``{"case": ..., "launches": ...}``), sorted: diffs read case by case."""
    return "".join(
        json.dumps({"case": k, "launches": results[k]}, sort_keys=True) + "\n" for k in sorted(results)
    )


def loads(text: str) -> dict:
    return {row["case"]: row["launches"] for row in map(json.loads, text.splitlines())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", required=True, help="where to write the record, one case a line ('-': stdout)"
    )
    parser.add_argument("--replays", action="store_true", help="record replays() instead, as JSON")
    args = parser.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    text = json.dumps(replays(), indent=0) if args.replays else dumps(run())
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
