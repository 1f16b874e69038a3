"""Launch shapes of the decode-size GEMM (:mod:`.fp8_decode_gemm`), measured on the H200.

Written by ``benchmarks/decode_gemm_sweep.py --write-table``: for each ``(n, k, multiprocessors)``
the fastest launch shape ``(block_n, block_m, split, stages, warps, tma, swap[, gluon])`` of its sweep
per row count, and whether cuBLASLt's block-scaled GEMM was faster still, as ``(max_m, config,
cublas_ahead)`` rows in increasing ``max_m``: ``TABLE`` for the portable kernel, ``GLUON_TABLE`` for
the Gluon tier (the fastest launch there of either kernel: the Gluon one,
:mod:`.gluon_fp8_decode_gemm`, or the portable one, ``gluon`` False). Shapes not listed take the
kernel's heuristic.
"""

TABLE: dict = {
    (2112, 7168, 132): [
        (1, (64, 16, 8, 4, 4, False, True), False),
        (8, (64, 16, 14, 4, 4, False, True), False),
        (16, (64, 16, 14, 4, 4, False, True), False),
        (32, (64, 32, 6, 4, 4, False, True), False),
        (64, (64, 64, 4, 10, 4, True, False), False),
        (128, (64, 128, 4, 8, 8, True, False), False),
        (256, (64, 128, 2, 8, 8, True, False), False),
    ],
    (4096, 7168, 132): [
        (1, (64, 16, 6, 4, 4, False, True), False),
        (8, (64, 16, 4, 4, 4, False, True), False),
        (16, (64, 16, 4, 4, 4, False, True), False),
        (32, (64, 32, 4, 4, 4, False, True), False),
        (64, (64, 64, 6, 4, 4, False, True), False),
        (128, (128, 128, 4, 6, 8, True, True), False),
        (256, (128, 128, 2, 6, 8, True, True), True),
    ],
    (7168, 2048, 132): [
        (1, (64, 16, 3, 4, 4, False, True), False),
        (8, (64, 16, 3, 4, 4, False, True), False),
        (16, (64, 16, 2, 4, 4, False, True), False),
        (32, (64, 32, 2, 4, 4, False, True), True),
        (64, (64, 64, 1, 10, 4, True, False), True),
        (128, (64, 128, 1, 4, 8, False, True), True),
        (256, (128, 128, 1, 6, 8, True, True), True),
    ],
    (7168, 16384, 132): [
        (1, (64, 16, 4, 4, 4, False, True), False),
        (8, (256, 16, 4, 6, 4, True, True), False),
        (16, (64, 16, 4, 4, 4, False, True), False),
        (32, (64, 32, 4, 4, 4, False, True), False),
        (64, (256, 64, 4, 5, 8, True, True), False),
        (128, (128, 128, 2, 6, 8, True, True), True),
        (256, (128, 128, 1, 6, 8, True, True), True),
    ],
    (24576, 1536, 132): [
        (1, (64, 16, 1, 4, 4, False, True), False),
        (8, (64, 16, 1, 4, 4, False, True), False),
        (16, (64, 16, 1, 4, 4, False, True), False),
        (32, (64, 32, 1, 4, 4, False, True), False),
        (64, (64, 64, 1, 4, 4, False, True), False),
        (128, (128, 128, 1, 6, 8, True, True), True),
        (256, (128, 128, 1, 6, 8, True, True), True),
    ],
}

GLUON_TABLE: dict = {
    (2112, 7168, 132): [
        (1, (64, 16, 8, 4, 4, False, True, False), False),
        (8, (64, 8, 3, 10, 4, True, True, True), False),
        (16, (64, 16, 2, 9, 4, True, True, True), False),
        (32, (64, 32, 3, 8, 4, True, True, True), False),
        (64, (64, 64, 4, 6, 4, True, True, True), False),
        (128, (64, 64, 2, 9, 4, True, True, True), False),
        (256, (64, 64, 1, 9, 4, True, True, True), False),
    ],
    (4096, 7168, 132): [
        (1, (64, 16, 6, 4, 4, False, True, False), False),
        (8, (64, 8, 1, 10, 4, True, True, True), False),
        (16, (64, 16, 1, 9, 4, True, True, True), False),
        (32, (64, 32, 2, 8, 4, True, True, True), False),
        (64, (64, 64, 2, 6, 4, True, True, True), False),
        (128, (64, 64, 1, 9, 4, True, True, True), False),
        (256, (64, 128, 1, 6, 4, True, True, True), True),
    ],
    (7168, 2048, 132): [
        (1, (64, 8, 1, 10, 4, True, True, True), False),
        (8, (64, 8, 1, 10, 4, True, True, True), False),
        (16, (64, 16, 1, 9, 4, True, True, True), False),
        (32, (64, 32, 1, 8, 4, True, True, True), False),
        (64, (64, 64, 1, 9, 4, True, True, True), False),
        (128, (64, 128, 1, 4, 4, True, True, True), True),
        (256, (128, 128, 1, 4, 4, True, True, True), True),
    ],
    (7168, 16384, 132): [
        (1, (64, 8, 1, 10, 4, True, True, True), False),
        (8, (64, 8, 1, 10, 4, True, True, True), False),
        (16, (64, 16, 1, 9, 4, True, True, True), False),
        (32, (64, 32, 1, 8, 4, True, True, True), False),
        (64, (128, 64, 2, 6, 4, True, True, True), False),
        (128, (128, 128, 2, 4, 4, True, True, True), True),
        (256, (128, 128, 1, 3, 4, True, True, True), True),
    ],
    (24576, 1536, 132): [
        (1, (64, 16, 1, 4, 4, False, True, False), False),
        (8, (64, 16, 1, 4, 4, False, True, False), False),
        (16, (64, 16, 1, 4, 4, False, True, False), False),
        (32, (64, 32, 1, 4, 4, False, True, False), False),
        (64, (64, 64, 1, 4, 4, False, True, False), False),
        (128, (128, 128, 1, 4, 4, True, True, True), True),
        (256, (128, 128, 1, 4, 4, True, True, True), True),
    ],
}
