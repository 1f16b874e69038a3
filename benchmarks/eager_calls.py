"""Eager wall time of one public call, ours beside upstream FlashInfer and FlashMLA (issue 32).

What an engine pays for a call it does not capture in a CUDA graph: each call runs 2,000 times
back to back after a warm-up (synchronized before and after the batch, so the launch queue
absorbs the calls and the slower of host and GPU sets the pace), best of three batches:

- ``mla_rope_quantize_fp8`` on one token (sglang's call: 128 heads, 2-D K, the merged 576-wide
  outputs);
- ``bmm_fp8`` at m = 1, n = 2112, k = 7168 (per-tensor scales, bf16 out);
- ``fp8_blockscale_gemm_sm90`` at the same shape, BF16 input (vLLM's call: the input quantized
  inside) and FP8 input (W8A8, its 1 x 128 scales MN-major as upstream's test passes them);
- the sparse MLA decode at batch 1, 128 heads, top-k 2048, e4m3, ``metadata=`` and ``out=``
  given (ours); FlashMLA's sparse decode on the same shape's 656-byte rows is its anchor
  (upstream FlashInfer has no sm90 sparse decode).

Ours and upstream are both the ``flashinfer`` package, so each is timed in its own process on
the same machine, one after the other: ``--impl ours`` (FlashMLA too where ``flash_mla`` is
importable, ``benchmarks/flashmla_anchor.sh``) and ``--impl upstream`` (upstream's wheel alone on
``PYTHONPATH``, ``benchmarks/upstream_anchor.sh``); ``--table OURS [UPSTREAM]`` joins the files into
``eager_calls.json`` (what ``report.py`` reads) and prints the table (an anchor not run: "not run").

Run from the repository root::

    PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-gemm/src:packages/flashinfer-mla/src:\\
packages/flashinfer-python/src:benchmarks/.anchor-build/FlashMLA python3 benchmarks/eager_calls.py --impl ours
    (eval "$(bash benchmarks/upstream_anchor.sh env)"; python3 benchmarks/eager_calls.py --impl upstream)
    python3 benchmarks/eager_calls.py --table OUT/eager_ours.json OUT/eager_upstream.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _requires import OUT  # noqa: E402
from _tables import EAGER_CALLS, eager_calls_table  # noqa: E402

CALLS, BATCHES = 2000, 3
M, N, K = 1, 2112, 7168
ROWS = list(EAGER_CALLS)  # the calls, in the table's order


def gemm_calls() -> dict:
    """The GEMM rows' calls, on fresh random operands."""
    import flashinfer.gemm as fg

    def fp8(*shape):
        return torch.randn(*shape, device="cuda").to(torch.float8_e4m3fn)

    kb = K // 128
    x16 = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    x, w = fp8(M, K), fp8(N, K)
    w_scale = torch.rand(N // 128 + (N % 128 > 0), kb, device="cuda") + 0.5
    # upstream's W8A8 input scale: MN-major (k/128, m), rows padded to 4 (its test)
    x_scale = (torch.rand(kb, 4, device="cuda") + 0.5)[:, :M]
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    one = torch.ones((), device="cuda")
    x3, w3, out3 = x.unsqueeze(0), w.unsqueeze(0), out.unsqueeze(0)
    return {
        ROWS[1]: lambda: fg.bmm_fp8(x3, w3.transpose(1, 2), one, one, torch.bfloat16, out3),
        ROWS[2]: lambda: fg.fp8_blockscale_gemm_sm90(x16, w, None, w_scale, out=out),
        ROWS[3]: lambda: fg.fp8_blockscale_gemm_sm90(x, w, x_scale, w_scale, out=out),
    }


def rope_call(impl: str):
    import bench_mla

    import flashinfer.rope

    public, _, _ = bench_mla.rope_case(1, with_record=impl == "ours")
    return lambda: flashinfer.rope.mla_rope_quantize_fp8(**public)


def decode_calls(impl: str) -> dict:
    """Our decode and FlashMLA's where importable, in ours' process (upstream has no sm90 sparse
    decode): ``{(name, who): call}``."""
    import bench_mla

    if impl != "ours":
        return {}
    name = ROWS[4]
    case = bench_mla.sparse_case(1, 128, 1, torch.float8_e4m3fn)
    calls = {(name, "ours"): bench_mla.decode_api_call(case)}
    try:
        flashmla, _ = bench_mla.flashmla_decode(bench_mla.packed_case(1, 128, 1, seed=0))
    except ImportError:
        return calls
    calls[(name, "FlashMLA")] = flashmla
    return calls


def measure(impl: str) -> list[dict]:
    """One row per call this process can make: wall time per call of ``CALLS`` back-to-back
    calls, best of ``BATCHES``."""
    import bench_mla

    calls = {(name, impl): fn for name, fn in gemm_calls().items()}
    calls[(ROWS[0], impl)] = rope_call(impl)
    calls.update(decode_calls(impl))
    rows = []
    for (op, who), fn in calls.items():
        rows.append({"op": op, "impl": who, "wall_us": bench_mla.eager_wall_us(fn, CALLS, BATCHES)})
        print(f"{op:58s} {who:9s} {rows[-1]['wall_us']:8.1f} us", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("ours", "upstream"))
    parser.add_argument("--table", nargs="+", metavar="JSON", help="join --impl runs' files (ours, upstream)")
    parser.add_argument("--out", default=os.environ.get("OUT", str(OUT)))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.table:
        runs = [json.load(open(path)) for path in args.table]
        joined = {"meta": [run["meta"] for run in runs], "rows": [r for run in runs for r in run["rows"]]}
        with open(os.path.join(args.out, "eager_calls.json"), "w") as f:
            json.dump(joined, f, indent=1)
        print(eager_calls_table(joined["rows"]))
        return
    if not args.impl:
        parser.error("--impl or --table")
    from _requires import require_cuda_gpu

    require_cuda_gpu("eager_calls.py")
    import flashinfer

    meta = {
        "impl": args.impl, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "flashinfer": f"{getattr(flashinfer, '__version__', '?')} ({flashinfer.__file__})",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }  # fmt: skip
    print(meta, flush=True)
    rows = measure(args.impl)
    with open(os.path.join(args.out, f"eager_{args.impl}.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
