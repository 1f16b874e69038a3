"""Host time of an eager sparse decode call (and of RoPE at one token), layer by layer.

An eager call at batch 1 costs its host time: the GPU work (16 us in a graph) hides under it.
Each row is the host time per call of back-to-back calls that are not synchronized (the launch
queue absorbs them), best of several rounds, through one more layer than the row above:

- ``run``: the compiled kernels' launchers alone (``CompiledKernel.run``, arguments prepared);
- ``FastLaunch``: our launch layer (key, pointers, stream) around ``run``;
- ``_cuda``: the implementation (tier choice, key rows, host arguments, both launches);
- ``public API``: validation, the argument record, dispatch;

then the public call's wall time with a synchronize after each call, and a cProfile of it.
Shapes: DeepSeek-V3.2 decode, batch 1, 128 heads, top-k 2048, e4m3, ``metadata=`` and ``out=``
given (``--tier`` picks the kernel tier); RoPE + quantize of one token (sglang's call).

Run from the repository root::

    PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-mla/src \\
        python3 benchmarks/decode_eager.py --out OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _requires import OUT, require_cuda_gpu  # noqa: E402

require_cuda_gpu("decode_eager.py")  # before bench_mla imports Triton
import bench_mla  # noqa: E402
from launch_overhead import profile  # noqa: E402


def host_us(fn, calls=200, rounds=15) -> float:
    """Host time per call, unsynchronized, best round (synchronized between rounds)."""
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return best


def recorded_launches(launchers, fn):
    """(launcher, grid, args, kwargs) of each launch ``fn`` makes through ``launchers``."""
    seen = []
    originals = {id(launcher): launcher.launch for launcher in launchers}

    def recorder(launcher):
        def launch(grid, *args, **kwargs):
            seen.append((launcher, grid, args, kwargs))
            originals[id(launcher)](grid, *args, **kwargs)

        return launch

    for launcher in launchers:
        launcher.launch = recorder(launcher)
    try:
        fn()
    finally:
        for launcher in launchers:
            del launcher.launch  # the class's method again
    return seen


def raw_runs(seen):
    """Callables that launch each recorded kernel through its compiled launcher only."""
    from triton.runtime import driver

    runs = []
    for launcher, grid, args, kwargs in seen:
        ((launch, options, constexprs),) = [
            entry for key, entry in launcher._compiled.items() if key[2] == tuple(kwargs.items())
        ][-1:]
        call_args = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
        stream = driver.active.get_current_stream(torch.cuda.current_device())
        dims = (*grid, *(1,) * (3 - len(grid)))
        runs.append(
            lambda launch=launch, options=options, constexprs=constexprs, call_args=call_args, dims=dims,
            stream=stream: launch(*dims, stream, *options, *call_args, *constexprs)
        )  # fmt: skip
    return lambda: [r() for r in runs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)))
    parser.add_argument("--tier", default="auto")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.environ["FLASHINFER_KERNEL_TIER"] = args.tier

    import flashinfer.rope
    from flashinfer.mla import _cuda
    from flashinfer.mla.kernels import mla_decode, mla_decode_gluon
    from flashinfer.mla.kernels import rope_quantize as rope_kernels

    case = bench_mla.sparse_case(1, 128, 1, torch.float8_e4m3fn)
    topk = case["indices"].shape[-1]
    decode_api = bench_mla.decode_api_call(case)
    plan = _cuda.decode_plan(1, 1, 128, topk, case["query"].device)
    decode_impl = lambda: bench_mla.run_sparse(_cuda, case, plan)  # noqa: E731
    decode_api()
    launchers = (mla_decode_gluon._DECODE, mla_decode_gluon._COMBINE, mla_decode._DECODE, mla_decode._COMBINE)
    seen = recorded_launches(launchers, decode_impl)
    decode_launch = lambda: [launcher.launch(grid, *a, **kw) for launcher, grid, a, kw in seen]  # noqa: E731

    rope_public, rope_internal, _ = bench_mla.rope_case(1)
    rope_api = lambda: flashinfer.rope.mla_rope_quantize_fp8(**rope_public)  # noqa: E731
    rope_impl = lambda: _cuda.rope_quantize(rope_internal)  # noqa: E731
    rope_api()
    rope_seen = recorded_launches((rope_kernels._ROPE_QUANTIZE,), rope_impl)
    rope_launch = lambda: [launcher.launch(grid, *a, **kw) for launcher, grid, a, kw in rope_seen]  # noqa: E731

    facts = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": __import__("triton").__version__,
        "tier": args.tier, "decode_launches": [type(s[0].kernel).__name__ + ":" + s[0].kernel.__name__ for s in seen],
        "decode_grids": [s[1] for s in seen],
    }  # fmt: skip
    print(json.dumps(facts), flush=True)
    rows = []
    for op, layers in (
        ("decode B1 H128 top-k 2048 e4m3", (("run", raw_runs(seen)), ("FastLaunch", decode_launch),
                                            ("_cuda", decode_impl), ("public API", decode_api))),
        ("rope 1 token", (("run", raw_runs(rope_seen)), ("FastLaunch", rope_launch), ("_cuda", rope_impl),
                          ("public API", rope_api))),
    ):  # fmt: skip
        for layer, fn in layers:
            fn()
            rows.append({"op": op, "layer": layer, "host_us": host_us(fn)})
            print(f"{op:32s} {layer:12s} host {rows[-1]['host_us']:7.2f} us", flush=True)
        api = layers[-1][1]
        rows.append({"op": op, "layer": "public API, synchronized", "wall_us": bench_mla.eager_wall_us(api)})
        print(f"{op:32s} public API wall (eager, back to back) {rows[-1]['wall_us']:7.2f} us", flush=True)
    text = profile(decode_api, top=25) + profile(rope_api, top=25)
    print(text)
    with open(os.path.join(args.out, f"decode_eager_{args.tier}.json"), "w") as f:
        json.dump({"meta": facts, "rows": rows, "profile": text}, f, indent=1)


if __name__ == "__main__":
    main()
