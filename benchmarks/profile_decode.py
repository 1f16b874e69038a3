"""Run one sparse MLA decode a few times, for a profiler (``ncu``/``nsys``) to attach to.

Run::

    PYTHONPATH=packages/flashinfer-core/src:packages/flashinfer-mla/src \\
        ncu --section SpeedOfLight --section WarpStateStats -k regex:mla_decode -c 1 \\
        python3 benchmarks/profile_decode.py --batch 128 --heads 128 --dtype fp8
"""

from __future__ import annotations

import argparse

import _harness as h
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--heads", type=int, default=128)
    parser.add_argument("--q-len", type=int, default=1)
    parser.add_argument("--dtype", choices=sorted(h.DTYPES) + ["packed"], default="fp8")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    h.require_cuda_gpu("profile_decode.py")
    from flashinfer.mla import _cuda

    if args.dtype == "packed":  # the 656-byte rows, bf16 query
        case = h.packed_case(args.batch, args.heads, args.q_len)
    else:
        case = h.sparse_case(args.batch, args.heads, args.q_len, h.DTYPES[args.dtype])
    plan = _cuda.decode_plan(args.batch, args.q_len, args.heads, h.TOPK, case["query"].device)
    print(plan, flush=True)
    for _ in range(args.calls):
        if args.dtype == "packed":
            h.run_packed(case, plan, case["rows"].unsqueeze(1))
        else:
            h.run_sparse(_cuda, case, plan)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
