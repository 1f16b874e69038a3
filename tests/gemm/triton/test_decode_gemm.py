"""The decode-size GEMM (``kernels.blockwise.fp8_decode_gemm``: A and B swapped, K split) under
TRITON_INTERPRET=1, against the float64 oracle of tests/oracles.py.

FP8 inputs and power-of-two scales are exact in float64, so the only rounding left is the fp32
accumulation (whose order the split changes) and the final cast: ``oracles.assert_matches``.
Outputs are poisoned with NaN; strided outputs keep their untouched elements NaN.
"""

from __future__ import annotations

import pytest
import torch
from oracles import assert_matches, oracle_groupwise
from test_triton_kernels import E4M3, E5M2, fp8, groupwise, nan_like, pow2

pytestmark = pytest.mark.triton


def decode():
    from flashinfer.gemm.kernels.blockwise import fp8_decode_gemm

    return fp8_decode_gemm


def scales(m, n, k, granularity):
    block_m, block_n, _ = granularity
    kb = -(-k // 128)
    # activation scales as the MN-major storage's transpose (upstream's layout), weight scales
    # row-major
    return pow2((kb, -(-m // block_m))).t(), pow2((-(-n // block_n), kb))


@pytest.fixture(params=[False, True], ids=["pointers", "tma"])
def tma(request, monkeypatch):
    """Both load paths: TMA descriptors (the interpreter reads them too, zero-filling boxes past
    the end as TMA does) and pointer loads."""
    if request.param:
        monkeypatch.setattr(decode(), "_tma_takes", lambda a, b: True)
    return request.param


@pytest.mark.parametrize(
    "block_n, block_m, split, swap",
    [
        (16, 16, 1, True),
        (32, 16, 3, True),
        (64, 16, 2, True),
        (64, 32, 4, True),
        (128, 64, 1, True),
        (64, 128, 2, True),
        (256, 16, 2, True),
        (16, 64, 1, False),
        (32, 64, 3, False),
    ],
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("granularity", [(1, 128, 128), (128, 128, 128), (1, 1, 128)], ids=str)
def test_every_tile_and_split(seed, tma, block_n, block_m, split, swap, granularity):
    m, n, k = 37, 200, 640  # m and n not multiples of any tile; 5 K steps over up to 4 ranges
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = scales(m, n, k, granularity)
    out = nan_like((m, n), torch.bfloat16)
    config = decode().DecodeGemmConfig(block_n, block_m, split, 2, 4, tma, swap)

    decode().gemm_groupwise(groupwise(a, b, a_scale, b_scale, granularity, out), config)

    assert_matches(out, *oracle_groupwise(a, b, a_scale, b_scale, *granularity))


@pytest.mark.parametrize("split", [1, 3])
def test_the_replay_runs_a_new_record_on_its_own_operands(seed, tma, split):
    """The launch's replay (what a repeated call signature runs) on a new record of the same
    shapes reads that record's operands, through their TMA descriptors too, and writes its out."""
    m, n, k = 5, 64, 384
    config = decode().DecodeGemmConfig(64, 16, split, 2, 4, tma)
    records = []
    for _ in range(2):
        a, b = fp8((m, k)), fp8((n, k))
        a_scale, b_scale = scales(m, n, k, (1, 128, 128))
        records.append(
            (groupwise(a, b, a_scale, b_scale, (1, 128, 128), nan_like((m, n), torch.bfloat16)), a, b)
        )
    replay = decode().gemm_groupwise(records[0][0], config)
    (record, a, b) = records[1]
    replay(record)
    assert_matches(record.out, *oracle_groupwise(a, b, record.a_scale, record.b_scale, 1, 128, 128))


@pytest.mark.parametrize("a_dtype, b_dtype", [(E4M3, E5M2), (E5M2, E5M2)], ids=str)
def test_fp8_formats_fp16_output_and_a_ragged_k(seed, a_dtype, b_dtype):
    m, n, k = 5, 96, 300  # k not a multiple of 128: the last K step is masked
    a, b = fp8((m, k), a_dtype), fp8((n, k), b_dtype)
    a_scale, b_scale = scales(m, n, k, (1, 128, 128))
    out = nan_like((m, n), torch.float16)

    decode().gemm_groupwise(groupwise(a, b, a_scale, b_scale, (1, 128, 128), out))

    assert_matches(out, *oracle_groupwise(a, b, a_scale, b_scale, 1, 128, 128))


@pytest.mark.parametrize("split, swap", [(1, True), (2, True), (2, False)])
def test_strided_and_transposed_outputs(seed, tma, split, swap):
    m, n, k = 9, 64, 256
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = scales(m, n, k, (1, 128, 128))
    oracle = oracle_groupwise(a, b, a_scale, b_scale, 1, 128, 128)
    config = (
        decode().DecodeGemmConfig(64, 16, split, 2, 4)
        if swap
        else decode().DecodeGemmConfig(16, 64, split, 2, 4, swap=False)
    )
    buffer = nan_like((m, 2 * n), torch.bfloat16)
    decode().gemm_groupwise(groupwise(a, b, a_scale, b_scale, (1, 128, 128), buffer[:, 1::2]), config)
    assert_matches(buffer[:, 1::2], *oracle)
    assert buffer[:, 0::2].isnan().all()
    transposed = nan_like((n, m), torch.bfloat16).t()
    decode().gemm_groupwise(groupwise(a, b, a_scale, b_scale, (1, 128, 128), transposed), config)
    assert_matches(transposed, *oracle)


def test_split_never_leaves_an_empty_range(seed):
    """6 K steps asked to split 4 ways: ranges of 2 steps, 3 programs (none without work), and the
    reduction adds exactly those parts."""
    m, n, k = 3, 64, 6 * 128
    a, b = fp8((m, k)), fp8((n, k))
    a_scale, b_scale = scales(m, n, k, (1, 128, 128))
    out = nan_like((m, n), torch.bfloat16)
    decode().gemm_groupwise(
        groupwise(a, b, a_scale, b_scale, (1, 128, 128), out), decode().DecodeGemmConfig(64, 16, 4, 2, 4)
    )
    assert_matches(out, *oracle_groupwise(a, b, a_scale, b_scale, 1, 128, 128))


@pytest.fixture
def fresh_configs():
    """``pick_config`` memoizes per shape: tests that swap the tables start and end without memo."""
    decode().pick_config.cache_clear()
    yield
    decode().pick_config.cache_clear()


def test_pick_config_reads_the_table_then_falls_back(monkeypatch, fresh_configs):
    module = decode()
    table = {(2112, 7168, 4): [(8, (16, 16, 4, 8, 4, True), False), (64, (64, 64, 4, 6, 4, False), True)]}
    monkeypatch.setattr(module, "TABLE", table)
    assert module.pick_config(1, 2112, 7168, 4) == module.DecodeGemmConfig(16, 16, 4, 8, 4, True)
    assert module.pick_config(9, 2112, 7168, 4) == module.DecodeGemmConfig(64, 64, 4, 6, 4, False)
    cpu = torch.device("cpu")  # 4 multiprocessors to the kernels' grid rules
    assert not module.cublas_ahead(8, 2112, 7168, cpu) and module.cublas_ahead(9, 2112, 7168, cpu)
    assert not module.cublas_ahead(65, 2112, 7168, cpu)
    # past the table's rows, another machine, another shape: the heuristic
    for m, n, k, sms in [(65, 2112, 7168, 4), (1, 2112, 7168, 132), (1, 4096, 512, 4)]:
        config = module.pick_config(m, n, k, sms)
        assert config == module._heuristic(m, n, k, sms, False)
        assert config.block_m >= min(m, 128) and config.split >= 1


def test_pick_config_keeps_a_table_per_kernel(monkeypatch, fresh_configs):
    """The Gluon form's launch shapes (and where cuBLASLt beats it) come from its own table."""
    module = decode()
    gluon_row = (64, 8, 4, 12, 4, True, True, True)
    monkeypatch.setattr(module, "TABLE", {(2112, 7168, 4): [(8, (16, 16, 4, 8, 4, True), True)]})
    monkeypatch.setattr(module, "GLUON_TABLE", {(2112, 7168, 4): [(8, gluon_row, False)]})
    assert module.pick_config(3, 2112, 7168, 4, gluon=True) == module.DecodeGemmConfig(*gluon_row)
    assert module.pick_config(3, 2112, 7168, 4).gluon is False
    cpu = torch.device("cpu")
    assert module.cublas_ahead(3, 2112, 7168, cpu) and not module.cublas_ahead(3, 2112, 7168, cpu, gluon=True)
    untabled = module.pick_config(3, 4096, 512, 4, gluon=True)
    assert untabled.gluon and untabled.block_m == 8 and untabled.block_n == 64


def test_heuristic_gives_every_multiprocessor_a_program():
    module = decode()
    for m, n, k in [(1, 2112, 7168), (64, 7168, 2048), (128, 4096, 7168), (256, 24576, 1536)]:
        for gluon in (False, True):
            c = module._heuristic(m, n, k, 132, gluon)
            programs = -(-n // c.block_n) * -(-m // c.block_m) * c.split
            assert programs >= 132 or c.split == (k // 128) // 4, (m, n, k, c)
