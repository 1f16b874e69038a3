"""Host time of eager calls on a CUDA device: Triton's JIT launch against FastLaunch.

At one RoPE token, a batch-1 decode or a few-row GEMM the GPU work is a few microseconds, so
back-to-back eager calls measure the host: this times (wall clock per call, 2000 calls after a
warm-up) calls with ``FastLaunch`` (``flashinfer._core.triton_launch``), the same with Triton's
own ``kernel[grid]`` launch, and for the autotuned GEMM kernels with Triton's Autotuner on every
call, then prints a cProfile of one thousand RoPE and decode calls of each kind (top functions
by own time) to show where the time goes.

Run from the repository root on a CUDA machine:
``PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src:packages/flashinfer-mla/src python benchmarks/launch_overhead.py``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from _requires import OUT, require_cuda_gpu  # noqa: E402

require_cuda_gpu("launch_overhead.py")  # before bench_mla imports Triton
import bench_mla  # noqa: E402  (the sglang RoPE call and the sparse decode inputs)
from bench_mla import eager_wall_us, jit_launch, rope_case, run_sparse, sparse_case  # noqa: E402


def profile(fn, calls=1000, top=12) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import flashinfer.decode
    import flashinfer.rope
    from flashinfer._core import triton_launch
    from flashinfer.mla import _cuda
    from flashinfer.mla.kernels import mla_decode, mla_decode_gluon
    from flashinfer.mla.kernels import rope_quantize as rope_kernels

    bench_mla._cuda = _cuda
    runtime = triton_launch.knobs.runtime if triton_launch.knobs is not None else None
    facts = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "launch_enter_hook": repr(getattr(runtime, "launch_enter_hook", None)),
        "launch_exit_hook": repr(getattr(runtime, "launch_exit_hook", None)),
        "fast_launch_enabled": rope_kernels._ROPE_QUANTIZE.enabled,
    }

    public, internal, _ = rope_case(1)
    rope_api = lambda: flashinfer.rope.mla_rope_quantize_fp8(**public)  # noqa: E731
    rope_impl = lambda: _cuda.rope_quantize(internal)  # noqa: E731
    case = sparse_case(1, 128, 1, torch.float8_e4m3fn)
    plan = _cuda.decode_plan(1, 1, 128, bench_mla.TOPK, case["query"].device)
    decode_impl = lambda: run_sparse(_cuda, case, plan)  # noqa: E731
    rope_impl()
    decode_impl()
    facts["rope_compiled_entries"] = len(rope_kernels._ROPE_QUANTIZE._compiled)
    facts["decode_compiled_entries"] = len(mla_decode._DECODE._compiled)
    print(json.dumps(facts, indent=1), flush=True)

    import flashinfer.gemm
    from flashinfer.gemm.kernels.blockwise import fp8_blockwise
    from flashinfer.gemm.kernels.bmm import fp8_bmm

    e4m3, bf16 = torch.float8_e4m3fn, torch.bfloat16
    A = torch.randn(128, 4, 128, device="cuda").to(e4m3)  # MLA absorb: 128 heads, 4 tokens
    B = torch.randn(128, 512, 128, device="cuda").to(e4m3).transpose(1, 2)
    one = torch.ones((), device="cuda")
    bmm_out = torch.empty(128, 4, 512, dtype=bf16, device="cuda")
    bmm_api = lambda: flashinfer.gemm.bmm_fp8(A, B, one, one, bf16, bmm_out)  # noqa: E731
    a, b = torch.randn(4, 7168, device="cuda").to(e4m3), torch.randn(2, 2048, 7168, device="cuda").to(e4m3)
    m_indices = torch.zeros(4, dtype=torch.int32, device="cuda")
    a_scale, b_scale = torch.ones(4, 56, device="cuda"), torch.ones(2, 16, 56, device="cuda")
    group_out = torch.empty(4, 2048, dtype=bf16, device="cuda")
    group_api = lambda: flashinfer.gemm.group_deepgemm_fp8_nt_groupwise(  # noqa: E731
        a, b, a_scale, b_scale, m_indices, out=group_out
    )

    rows = []
    launchers = (rope_kernels._ROPE_QUANTIZE, mla_decode._DECODE, mla_decode._COMBINE, mla_decode_gluon._DECODE,
                 mla_decode_gluon._COMBINE, fp8_bmm._TUNED.fast, fp8_blockwise._TUNED.fast)  # fmt: skip
    for name, fn, tuned in (
        ("rope 1 token, public API", rope_api, None),
        ("rope 1 token, _cuda", rope_impl, None),
        ("decode B=1 H=128 fp8, _cuda (2 launches)", decode_impl, None),
        ("bmm_fp8 128 x (4 x 128) x (128 x 512), public API", bmm_api, fp8_bmm),
        ("group_deepgemm 4 rows, n 2048, k 7168, public API", group_api, fp8_blockwise),
    ):
        fn()
        fast = eager_wall_us(fn)
        with jit_launch(*launchers):
            jit = eager_wall_us(fn)
        row = {"call": name, "fast_launch_us": fast, "jit_launch_us": jit}
        if tuned is not None:  # the Autotuner's own launch on every call (the previous code)
            with autotuner_launch(tuned):
                row["autotuner_launch_us"] = eager_wall_us(fn)
        rows.append(row)
        print(
            f"{name:52s} FastLaunch {fast:7.1f} us   Triton JIT launch {jit:7.1f} us"
            + (f"   Autotuner launch {row['autotuner_launch_us']:7.1f} us" if tuned is not None else ""),
            flush=True,
        )
    for name, fn in (("rope _cuda", rope_impl), ("decode _cuda", decode_impl)):
        print(f"--- cProfile, {name}, FastLaunch\n{profile(fn)}")
        with jit_launch(*launchers):
            print(f"--- cProfile, {name}, Triton JIT launch\n{profile(fn)}")
    with open(os.path.join(args.out, "launch_overhead.json"), "w") as f:
        json.dump({"meta": facts, "rows": rows}, f, indent=1)


@contextlib.contextmanager
def autotuner_launch(module):
    """Launch the module's autotuned kernel through Triton's Autotuner on every call."""
    from flashinfer._core.triton_launch import AUTOTUNED_LAUNCH

    class ThroughAutotuner:
        def launch(self, grid, key, *args, **constants):
            with AUTOTUNED_LAUNCH:
                saved.tuned[grid](*args, **constants)

    saved = module._TUNED
    module._TUNED = ThroughAutotuner()
    try:
        yield
    finally:
        module._TUNED = saved


if __name__ == "__main__":
    main()
