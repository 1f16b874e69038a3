"""Host time of eager MLA calls on a CUDA device: Triton's JIT launch against FastLaunch.

At one RoPE token or a batch-1 decode the GPU work is a few microseconds, so back-to-back eager
calls measure the host: this times (wall clock per call, 2000 calls after a warm-up) the
public API, the ``_cuda`` implementation with ``FastLaunch`` (``flashinfer._core.triton_launch``)
and the same with Triton's own ``kernel[grid]`` launch, then prints a cProfile of one thousand
implementation calls of each kind (top functions by own time) to show where the time goes.

Run from the repository root on a CUDA machine:
``PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-mla/src python benchmarks/launch_overhead.py``
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
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
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import flashinfer.decode
    import flashinfer.rope
    from flashinfer._core import triton_launch
    from flashinfer.mla import _cuda
    from flashinfer.mla.kernels import mla_decode
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
    rope_impl = lambda: _cuda.rope_quantize(*internal)  # noqa: E731
    case = sparse_case(1, 128, 1, torch.float8_e4m3fn)
    plan = _cuda.decode_plan(1, 1, 128, bench_mla.TOPK, case["query"].device)
    decode_impl = lambda: run_sparse(_cuda, case, plan)  # noqa: E731
    rope_impl()
    decode_impl()
    facts["rope_compiled_entries"] = len(rope_kernels._ROPE_QUANTIZE._compiled)
    facts["decode_compiled_entries"] = len(mla_decode._DECODE._compiled)
    facts["jit_launch_returns"] = repr(type(_jit_launch_result(rope_kernels, internal)))
    print(json.dumps(facts, indent=1), flush=True)

    rows = []
    launchers = (rope_kernels._ROPE_QUANTIZE, mla_decode._DECODE, mla_decode._COMBINE)
    for name, fn in (("rope 1 token, public API", rope_api), ("rope 1 token, _cuda", rope_impl),
                     ("decode B=1 H=128 fp8, _cuda (2 launches)", decode_impl)):  # fmt: skip
        fast = eager_wall_us(fn)
        with jit_launch(*launchers):
            jit = eager_wall_us(fn)
        rows.append({"call": name, "fast_launch_us": fast, "jit_launch_us": jit})
        print(f"{name:42s} FastLaunch {fast:7.1f} us   Triton JIT launch {jit:7.1f} us", flush=True)
    for name, fn in (("rope _cuda", rope_impl), ("decode _cuda", decode_impl)):
        print(f"--- cProfile, {name}, FastLaunch\n{profile(fn)}")
        with jit_launch(*launchers):
            print(f"--- cProfile, {name}, Triton JIT launch\n{profile(fn)}")
    with open(os.path.join(args.out, "launch_overhead.json"), "w") as f:
        json.dump({"meta": facts, "rows": rows}, f, indent=1)


def _jit_launch_result(rope_kernels, internal):
    # the object Triton's kernel[grid] returns: FastLaunch caches it when it is a CompiledKernel
    captured = []
    launcher = rope_kernels._ROPE_QUANTIZE
    original = launcher._compile_and_launch

    def spy(key, grid, args, kwargs):
        captured.append(launcher.kernel[grid](*args, **kwargs))

    launcher._compile_and_launch = spy
    launcher._compiled.clear()
    try:
        from flashinfer.mla import _cuda

        _cuda.rope_quantize(*internal)
    finally:
        launcher._compile_and_launch = original
    return captured[0] if captured else None


if __name__ == "__main__":
    main()
