"""One grouped contiguous FP8 GEMM, ours (Gluon, each 128-row tile) and DeepGEMM's, for Nsight Compute.

Each kernel runs three times on the same inputs; profile the third call of each:

    ncu --clock-control none --set detailed --section WarpStateStats --section SchedulerStats \\
        --launch-skip 2 --launch-count 1 -k regex:"fp8_blockwise_ws_kernel|fp8_gemm_kernel" \\
        python3 benchmarks/profile_gemm.py --groups 8 --rows 512 --n 7168 --k 2048

(PYTHONPATH as for ``bench_gemm.py --deepgemm``.) Prints the relative difference between
the two outputs, so a profile of a wrong kernel is noticed.
"""

from __future__ import annotations

import argparse

import _deepgemm
import torch
from _harness import fp8, require_cuda_gpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--n", type=int, default=7168)
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--configs", default="WIDE,MEDIUM", help="Gluon tiles to run, by name")
    args = parser.parse_args()
    require_cuda_gpu("profile_gemm.py")
    from flashinfer.gemm._args import GroupedContiguous
    from flashinfer.gemm.kernels.blockwise import gluon_fp8_blockwise as glu

    groups, rows, n, k = args.groups, args.rows, args.n, args.k
    total = groups * rows
    a, b = fp8(total, k), fp8(groups, n, k)
    a_scale = torch.rand(total, k // 128, device="cuda") + 0.5
    b_scale = torch.rand(groups, n // 128, k // 128, device="cuda") + 0.5
    m_indices = torch.arange(groups, device="cuda", dtype=torch.int32).repeat_interleave(rows)
    ours = torch.empty(total, n, device="cuda", dtype=torch.bfloat16)
    for name in args.configs.split(","):
        for _ in range(3):
            glu.group_gemm_contiguous(
                GroupedContiguous(a, b, a_scale, b_scale, m_indices, ours), config=getattr(glu, name)
            )
    theirs = torch.empty_like(ours)
    run = _deepgemm.contiguous(a, b, a_scale, b_scale, m_indices, theirs)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    diff = (ours.float() - theirs.float()).norm() / theirs.float().norm()
    print(f"G={groups} rows={rows} n={n} k={k}: |ours - deepgemm| / |deepgemm| = {diff.item():.2e}")


if __name__ == "__main__":
    main()
