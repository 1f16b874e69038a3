"""Where an eager call's time goes: host issue time beside GPU time, per ``eager_calls.py`` row.

``eager_calls.py`` times 2,000 calls back to back: the slower of host and GPU sets the pace. This
splits the two, in the same process and on the same operands:

- host: the CPU time of issuing 200 calls (no synchronization inside the batch, so the launch
  queue never fills), per call, best of five batches;
- GPU: the same call captured 20 times into a CUDA graph and replayed, per call (the kernels and
  the gaps between them, no host work), best of five replays;
- with ``--profile``: the top functions by own time over 2,000 calls (cProfile, whose own cost
  inflates every figure: read it as shares).

``--impl ours`` or ``--impl upstream`` as in ``eager_calls.py`` (upstream's wheel alone on
``PYTHONPATH``; FlashMLA's decode beside ours where ``flash_mla`` is importable); ``--join OURS
UPSTREAM --json PATH`` joins the two runs' files (what ``report.py`` reads). Run from the
repository root::

    PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src:packages/flashinfer-mla/src:\\
packages/flashinfer-python/src python3 benchmarks/eager_split.py --impl ours [--profile] [--json PATH]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import json
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eager_calls  # noqa: E402


def host_us(fn, calls: int = 200, batches: int = 5) -> float:
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(batches):
        torch.cuda.synchronize()
        start = time.thread_time_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time_ns() - start) / calls / 1e3)
        torch.cuda.synchronize()
    return best


def gpu_us(fn, calls: int = 20, replays: int = 5) -> float | None:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as error:  # a call that cannot be captured: no GPU figure
        print(f"  (not captured: {type(error).__name__}: {str(error)[:120]})")
        return None
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(replays):
        graph.replay()
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, begin.elapsed_time(end) * 1e3 / calls)
    return best


def profile(fn, calls: int = 2000, top: int = 18) -> str:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("ours", "upstream"))
    parser.add_argument("--join", nargs=2, metavar="JSON", help="join an ours and an upstream run's files")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions per call")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if args.join:
        runs = [json.load(open(path)) for path in args.join]
        joined = {"meta": [run["meta"] for run in runs], "rows": [r for run in runs for r in run["rows"]]}
        with open(args.json, "w") as f:
            json.dump(joined, f, indent=1)
        return
    if not args.impl:
        parser.error("--impl or --join")
    calls = {(name, args.impl): fn for name, fn in eager_calls.gemm_calls().items()}
    calls[(eager_calls.ROWS[0], args.impl)] = eager_calls.rope_call(args.impl)
    calls.update(eager_calls.decode_calls(args.impl))
    rows = []
    for (op, who), fn in calls.items():
        host, gpu = host_us(fn), gpu_us(fn)
        rows.append({"op": op, "impl": who, "host_us": host, "gpu_us": gpu})
        gpu_text = "-" if gpu is None else f"{gpu:6.1f}"
        print(f"{op:58s} {who:9s} host {host:6.1f} us  GPU {gpu_text} us", flush=True)
        if args.profile:
            print(profile(fn), flush=True)
    if args.json:
        meta = {
            "impl": args.impl, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }  # fmt: skip
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
