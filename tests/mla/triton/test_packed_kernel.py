"""The decode kernel's ``PACKED`` mode under the interpreter, against a float64 oracle written here.

The 656-byte rows are built from float64 values (e4m3 codes, float32 scales, bf16 RoPE values),
so the oracle uses those values, never a decode of the bytes. The kernel rounds each dequantized K
value to bf16 once (exact for power-of-two scales), so the oracle takes K rounded the same way.
Small sizes keep the interpreter fast. Tolerances: output within 2e-2 of ``max |ref|`` (bf16
probabilities and output), LSE within 1e-4 relative (float32 statistics).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from oracles import packed_oracle as oracle

from flashinfer.mla._args import Decode

pytestmark = pytest.mark.triton

E4M3 = torch.float8_e4m3fn
INT32_MAX = 2**31 - 1


def launch_packed(md, call, lengths):
    """The launcher's record holds the pool as a cache of one-row pages."""
    from flashinfer.mla.kernels.mla_decode_shared import key_rows

    md.mla_decode(call, key_rows(call, False), packed=True, lengths=lengths)


def packed_pool(slots, pow2=True):
    """``(rows [slots, 656] uint8, keys [slots, 576] float64)``: random codes, scales, RoPE values."""
    codes = torch.randn(slots, 512).mul(40).clamp(-448, 448).to(E4M3)
    if pow2:
        scales = torch.pow(2.0, torch.randint(-9, -3, (slots, 4)).float())
    else:
        scales = torch.rand(slots, 4) * 0.02 + 1e-3
    rope = torch.randn(slots, 64).bfloat16()
    rows = torch.cat(
        (codes.view(torch.uint8), scales.contiguous().view(torch.uint8), rope.contiguous().view(torch.uint8)),
        -1,
    )
    keys = torch.cat((codes.double() * scales.double().repeat_interleave(128, -1), rope.double()), -1)
    return rows, keys


def assert_close(out, lse, ref_out, ref_lse):
    assert not out.isnan().any(), "an output element was not written"
    scale = max(ref_out.abs().max().item(), 1e-3)
    assert (out.double() - ref_out).abs().max().item() <= 2e-2 * scale
    if lse is not None:
        assert torch.equal(lse.isneginf(), ref_lse.isneginf()), "empty rows must have lse -inf"
        finite = ~ref_lse.isneginf()
        err = (lse.double()[finite] - ref_lse[finite]).abs().max().item()
        assert err <= 1e-4 * max(1.0, ref_lse[finite].abs().max().item())


PACKED_CASES = [
    # heads, q_len, splits, sinks, lengths ("tokens", None), pow2 scales, strided out
    (16, 2, 1, True, "tokens", True, False),
    (3, 1, 3, False, None, False, True),
    (17, 2, 2, True, None, True, False),
    (40, 1, 1, False, "tokens", False, False),
    (33, 2, 3, True, "tokens", True, True),
]


@pytest.mark.parametrize(
    ("heads", "q_len", "splits", "with_sinks", "lengths", "pow2", "strided_out"), PACKED_CASES
)
def test_packed_decode(kernels, seed, heads, q_len, splits, with_sinks, lengths, pow2, strided_out):
    _, md = kernels
    batch, topk, slots = 3, 128, 300
    rows, keys = packed_pool(slots, pow2)
    query = torch.randn(batch, q_len, heads, 576).bfloat16()
    indices = torch.randint(0, slots, (batch, q_len, topk), dtype=torch.int32)
    indices[0, -1, 3] = -1
    indices[0, 0, 5] = INT32_MAX
    indices[-1, -1, 1] = slots
    indices[-1, 0, 7] = -(2**31)
    indices[2, 0] = -1  # a token with every entry invalid
    token_lengths = None
    if lengths == "tokens":  # short, longer than topk, negative, zero, ...
        token_lengths = torch.tensor(
            [topk - 9, topk + 50, -3, 0, 7, topk][: batch * q_len], dtype=torch.int32
        )
    sinks = torch.randn(heads) if with_sinks else None
    if strided_out:
        out = torch.full((batch, q_len, heads + 2, 520), math.nan, dtype=torch.bfloat16)[:, :, 1:-1, :512]
    else:
        out = torch.full((batch, q_len, heads, 512), math.nan, dtype=torch.bfloat16)
    lse = torch.full((batch, q_len, heads), math.nan)
    workspace = torch.full((4 << 20,), 0xFF, dtype=torch.uint8)  # not zeroed: NaN floats
    plan = dataclasses.replace(md.plan_decode(batch, q_len, heads, topk, num_sms=132), num_splits=splits)
    bmm1 = 0.06
    launch_packed(md, Decode(query, rows.unsqueeze(1), indices, token_lengths, bmm1, 1.0, sinks, out, lse, plan,
                             workspace), md.Lengths.PER_TOKEN if lengths else md.Lengths.ALL)  # fmt: skip
    ref_out, ref_lse = oracle(query, keys.bfloat16().double(), indices, token_lengths, bmm1, sinks)
    assert_close(out, lse, ref_out, ref_lse)
    assert (out[2, 0] == 0).all(), "a token with no valid entry gets 0"


def test_packed_rows_are_read_at_their_byte_offsets(kernels, seed):
    """One key per token: the output is that row's dequantized latent part, and a one-hot query
    reads single K values (latent and RoPE) through the LSE."""
    _, md = kernels
    slots, heads = 40, 8
    rows, keys = packed_pool(slots, pow2=False)
    dims = torch.tensor([0, 127, 128, 300, 511, 512, 540, 575])
    query = torch.zeros(1, 1, heads, 576)
    query[0, 0, torch.arange(heads), dims] = 1.0
    query = query.bfloat16()
    indices = torch.full((1, 1, 64), -1, dtype=torch.int32)
    indices[0, 0, 17] = 29
    out = torch.full((1, 1, heads, 512), math.nan, dtype=torch.bfloat16)
    lse = torch.full((1, 1, heads), math.nan)
    plan = md.plan_decode(1, 1, heads, 64, num_sms=132)
    workspace = torch.empty(1 << 16, dtype=torch.uint8)
    call = Decode(query, rows.unsqueeze(1), indices, None, 1.0, 1.0, None, out, lse, plan, workspace)
    launch_packed(md, call, md.Lengths.ALL)
    expected = keys[29, :512].expand(heads, 512)
    torch.testing.assert_close(out[0, 0].double(), expected, rtol=2**-8, atol=0)  # one bf16 rounding
    # a single key: lse2 = s * log2(e), with s the (bf16-rounded) K value the query picks
    picked = keys[29, dims].bfloat16().double()
    torch.testing.assert_close(lse[0, 0].double(), picked / math.log(2.0), rtol=1e-6, atol=1e-6)
