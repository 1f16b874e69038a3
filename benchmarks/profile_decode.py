"""Run one sparse MLA decode a few times, for a profiler (``ncu``/``nsys``) to attach to.

Run::

    PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-mla/src \\
        ncu --section SpeedOfLight --section WarpStateStats -k regex:mla_decode -c 1 \\
        python3 benchmarks/profile_decode.py --batch 128 --heads 128 --dtype fp8
"""

from __future__ import annotations

import argparse

import torch
from _requires import require_cuda_gpu

require_cuda_gpu("profile_decode.py")  # before bench_mla imports Triton
import bench_mla  # noqa: E402

from flashinfer.mla import _cuda  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--heads", type=int, default=128)
    parser.add_argument("--q-len", type=int, default=1)
    parser.add_argument("--dtype", choices=sorted(bench_mla.DTYPES) + ["packed"], default="fp8")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    if args.dtype == "packed":  # the 656-byte rows, bf16 query
        bench_mla._cuda = _cuda
        case = bench_mla.packed_case(args.batch, args.heads, args.q_len)
    else:
        case = bench_mla.sparse_case(args.batch, args.heads, args.q_len, bench_mla.DTYPES[args.dtype])
    plan = _cuda.decode_plan(args.batch, args.q_len, args.heads, bench_mla.TOPK, case["query"].device)
    print(plan, flush=True)
    for _ in range(args.calls):
        if args.dtype == "packed":
            bench_mla.run_packed(case, plan, case["rows"].unsqueeze(1))
        else:
            bench_mla.run_sparse(_cuda, case, plan)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
