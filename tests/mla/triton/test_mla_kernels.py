"""The MLA Triton kernels under the interpreter, against the float64 oracles of tests/oracles.py.

Small sizes (heads <= 17, topk <= 128, batch <= 3) keep the interpreter fast; D = 576 and 320 are
the real head dims. Every output element is checked after poisoning with NaN.

Tolerances: RoPE outputs by ``oracles.assert_fp8_close`` (within one FP8 rounding step of the
float64 value, nearly all bit-exact: the kernel rotates in float32, so a value next to a rounding
boundary may land on the other side); decode outputs within 2e-2 of ``max |ref|`` (bf16
probabilities and bf16 output), LSE within 1e-4 (float32 softmax statistics).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from oracles import assert_fp8_close, rope_oracle, rotate
from oracles import decode_oracle_rows as decode_oracle

from flashinfer.mla._args import Decode, Rope

pytestmark = pytest.mark.triton

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
INT32_MAX = 2**31 - 1
FP8_NAN_BITS = 0x7F


# ----------------------------------------------------------------------------- decode tolerance
def assert_decode_close(out, lse, ref_out, ref_lse):
    assert not out.isnan().any(), "an output element was not written"
    scale = max(ref_out.abs().max().item(), 1e-3)
    assert (out.double() - ref_out).abs().max().item() <= 2e-2 * scale
    if lse is not None:
        assert torch.equal(lse.isinf(), ref_lse.isinf()), "empty rows must have lse +inf"
        finite = ~ref_lse.isinf()
        assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() <= 1e-4 * max(
            1.0, ref_lse[finite].abs().max().item()
        )
        assert (lse[~finite] > 0).all()


# ------------------------------------------------------------------------------------------ RoPE
def fp8_poisoned(*shape, dtype):
    return torch.full(shape, FP8_NAN_BITS, dtype=torch.uint8).view(dtype)


@pytest.mark.parametrize("k_2d", [True, False], ids=["k-2d", "k-3d-view"])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("out_dtype", [E4M3, E5M2])
@pytest.mark.parametrize(
    ("in_dtype", "cache_dtype", "pos_dtype"),
    [(torch.bfloat16, torch.float32, torch.int64), (torch.float16, torch.bfloat16, torch.int32)],
)
def test_rope_mla_merged_outputs(kernels, seed, k_2d, is_neox, out_dtype, in_dtype, cache_dtype, pos_dtype):
    """sglang's layout: transposed q_nope, sliced q_rope, 2-D K (as given, or as a one-head
    3-D view), merged q output."""
    rope, _ = kernels
    nnz, heads, nope, rdim, max_pos = 5, 7, 96, 64, 40
    q_nope = torch.randn(heads, nnz, nope).to(in_dtype).transpose(0, 1)
    q_rope = (torch.randn(nnz, heads, 2 * rdim) * 4).to(in_dtype)[..., rdim:]
    latent = (torch.randn(nnz, nope + rdim) * 4).to(in_dtype)
    cache = torch.randn(max_pos, rdim).to(cache_dtype)
    pos = torch.tensor([0, 39, -1, 40, 17], dtype=pos_dtype)  # -1 and 40: outside the cache
    q_out = fp8_poisoned(nnz, heads, nope + rdim, dtype=out_dtype)
    k_out = fp8_poisoned(nnz, nope + rdim, dtype=out_dtype)
    scale_q, scale_kv = 3.0, 0.5
    k_in, k_dst = (latent, k_out) if k_2d else (latent[:, None], k_out[:, None])
    rope.rope_quantize(Rope(
        q_rope, k_in[..., nope:], q_nope, k_in[..., :nope], cache, pos, is_neox,
        scale_q, scale_kv, q_out[..., nope:], k_dst[..., nope:], q_out[..., :nope], k_dst[..., :nope],
    ))  # fmt: skip
    expected = rope_oracle(
        q_rope, latent[:, nope:], q_nope, latent[:, :nope], cache, pos, is_neox, scale_q, scale_kv, out_dtype
    )
    outputs = (q_out[..., nope:], k_out[:, nope:], q_out[..., :nope], k_out[:, :nope])
    for name, out, want in zip(("q_rope", "k_rope", "q_nope", "k_nope"), outputs, expected):
        assert_fp8_close(out, want, name)


def test_rope_gqa_stride0_heads_no_nope_saturation(kernels, seed):
    """3-D K with an expanded (stride-0) head dim, nope_dim 0, and values that saturate."""
    rope, _ = kernels
    nnz, hq, hk, rdim = 3, 4, 6, 32
    q_rope = (torch.randn(nnz, hq, rdim) * 300).to(torch.bfloat16)
    k_rope = (torch.randn(nnz, 1, rdim) * 300).to(torch.bfloat16).expand(nnz, hk, rdim)
    empty_q, empty_k = (
        torch.empty(nnz, hq, 0, dtype=torch.bfloat16),
        torch.empty(nnz, hk, 0, dtype=torch.bfloat16),
    )
    cache = torch.randn(8, rdim)
    pos = torch.tensor([1, 7, 3])
    q_out, k_out = fp8_poisoned(nnz, hq, rdim, dtype=E4M3), fp8_poisoned(nnz, hk, rdim, dtype=E4M3)
    rope.rope_quantize(Rope(
        q_rope, k_rope, empty_q, empty_k, cache, pos, True, 2.0, 1.0,
        q_out, k_out, empty_q.to(E4M3), empty_k.to(E4M3),
    ))  # fmt: skip
    assert (rotate(q_rope, cache, pos, True).abs() * 2.0 > 448).any(), "the case must exercise saturation"
    q_ref, k_ref, _, _ = rope_oracle(q_rope, k_rope, None, None, cache, pos, True, 2.0, 1.0, E4M3)
    assert_fp8_close(q_out, q_ref, "q_rope")
    assert_fp8_close(k_out, k_ref, "k_rope")


# ---------------------------------------------------------------------------------------- decode
@dataclasses.dataclass
class SparseCase:
    query: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    seq_lens: torch.Tensor


def sparse_case(batch, q_len, heads, dim, topk, slots, dtype):
    query = torch.randn(batch, q_len, heads, dim).to(dtype)
    kv = torch.randn(slots, dim).to(dtype)
    indices = torch.randint(0, slots, (batch, q_len, topk), dtype=torch.int32)
    # invalid entries inside the attended prefix: never loaded, never counted
    indices[0, -1, 3] = -1
    indices[0, 0, 5] = INT32_MAX
    indices[-1, -1, 1] = slots
    indices[-1, 0, 7] = -(2**31)
    # request 0: fewer keys than topk (the per-token limit drops one more for earlier tokens);
    # request 1 (if any): more than topk; request 2 (if any): every entry invalid -> empty rows
    lens = [topk - 9, topk + 50, topk][:batch]
    if batch > 2:
        indices[2] = -1
    return SparseCase(query, kv, indices, torch.tensor(lens, dtype=torch.int32))


def sparse_call(case, bmm1, bmm2, sinks, out, lse, plan, workspace):
    """The launcher's record: the flat pool as a cache of one-token pages."""
    kv_cache = case.kv.unsqueeze(1)
    return Decode(
        case.query, kv_cache, case.indices, case.seq_lens, bmm1, bmm2, sinks, out, lse, plan, workspace
    )


def shared_host():
    """The host code both decode tiers share (imported after ``kernels`` has decorated it)."""
    from flashinfer.mla.kernels import mla_decode_shared

    return mla_decode_shared


def launch(md, call, paged):
    md.mla_decode(call, shared_host().key_rows(call, paged))


def sparse_keys(case):
    slots = case.kv.shape[0]

    def keys_of(b, t, n):
        ids = [i for i in case.indices[b, t, :n].tolist() if 0 <= i < slots]
        return case.kv[ids].double()

    return keys_of


def make_plan(md, batch, q_len, heads, topk, splits):
    plan = md.plan_decode(batch, q_len, heads, topk, num_sms=132)
    return dataclasses.replace(plan, num_splits=splits)


DECODE_CASES = [
    # dtype, heads, q_len, dim, splits, sinks, tensor scales, lse, strided out
    (torch.bfloat16, 16, 2, 576, 1, True, False, True, False),
    (torch.bfloat16, 3, 1, 576, 3, False, True, True, True),
    (E4M3, 16, 2, 576, 3, True, True, True, True),
    (E4M3, 17, 1, 576, 1, False, False, False, False),
    (E4M3, 5, 2, 320, 2, True, False, True, False),
    (torch.bfloat16, 4, 1, 320, 1, False, True, True, True),
    (E4M3, 33, 1, 576, 2, True, False, True, False),
    (torch.bfloat16, 40, 2, 576, 1, False, False, True, False),
]


@pytest.mark.parametrize(("dtype", "heads", "q_len", "dim", "splits", "with_sinks", "tensor_scales",
                          "with_lse", "strided_out"), DECODE_CASES)  # fmt: skip
def test_sparse_decode(kernels, seed, dtype, heads, q_len, dim, splits, with_sinks, tensor_scales,
                       with_lse, strided_out):  # fmt: skip
    _, md = kernels
    batch, topk, slots, d_v = 3, 128, 500, dim - 64
    case = sparse_case(batch, q_len, heads, dim, topk, slots, dtype)
    sinks = torch.randn(heads) if with_sinks else None
    bmm1, bmm2 = 0.07, 1.3
    if strided_out:
        out = torch.full((batch, q_len, heads + 2, d_v + 8), math.nan, dtype=torch.bfloat16)[:, :, 1:-1, :d_v]
    else:
        out = torch.full((batch, q_len, heads, d_v), math.nan, dtype=torch.bfloat16)
    lse = torch.full((batch * q_len, heads), math.nan).view(batch, q_len, heads) if with_lse else None
    workspace = torch.full((4 << 20,), 0xFF, dtype=torch.uint8)  # not zeroed: NaN floats
    scale_args = (torch.tensor(bmm1), torch.tensor(bmm2)) if tensor_scales else (bmm1, bmm2)
    plan = make_plan(md, batch, q_len, heads, topk, splits)
    launch(md, sparse_call(case, *scale_args, sinks, out, lse, plan, workspace), paged=False)
    ref_out, ref_lse = decode_oracle(
        case.query, sparse_keys(case), case.seq_lens, topk, d_v, bmm1, bmm2, sinks
    )
    assert_decode_close(out, lse, ref_out, ref_lse)
    assert (out[2] == 0).all(), "rows with no valid entry are 0"


TILE_VARIANTS = [
    # block_h, block_n, warps, stages, upcast_qk: the planner's tiles and the tuner's neighbours
    (64, 64, 8, 2, False),
    (64, 32, 8, 3, False),
    (32, 32, 8, 3, True),
    (16, 32, 4, 3, True),
    (16, 64, 4, 3, False),
]


@pytest.mark.parametrize("dtype", [E4M3, torch.bfloat16])
@pytest.mark.parametrize("tile", TILE_VARIANTS, ids=lambda t: "bh{}-bn{}-w{}-s{}-up{:d}".format(*t))
def test_sparse_decode_tile_variants(kernels, seed, dtype, tile):
    """Every tile shape the planner or the tuner may pick computes the same attention
    (masked head blocks, two splits, FP8 rows upcast or not for QK^T)."""
    _, md = kernels
    block_h, block_n, warps, stages, upcast_qk = tile
    batch, q_len, heads, topk, slots = 3, 2, 20, 160, 400
    case = sparse_case(batch, q_len, heads, 576, topk, slots, dtype)
    config = md.DecodeConfig(block_h, block_n, warps, stages, 1, upcast_qk)
    plan = md.DecodePlan(2, -(-heads // block_h), config, config)
    out = torch.full((batch, q_len, heads, 512), math.nan, dtype=torch.bfloat16)
    lse = torch.full((batch, q_len, heads), math.nan)
    workspace = torch.full((4 << 20,), 0xFF, dtype=torch.uint8)
    launch(md, sparse_call(case, 0.06, 1.1, None, out, lse, plan, workspace), paged=False)
    ref_out, ref_lse = decode_oracle(case.query, sparse_keys(case), case.seq_lens, topk, 512, 0.06, 1.1, None)
    assert_decode_close(out, lse, ref_out, ref_lse)


def test_sparse_decode_small_workspace_reduces_splits(kernels, seed):
    """A workspace too small for the planned splits runs with fewer, still exact."""
    _, md = kernels
    batch, q_len, heads, topk, slots = 2, 1, 16, 128, 300
    case = sparse_case(batch, q_len, heads, 576, topk, slots, torch.bfloat16)
    part_bytes = batch * q_len * heads * 513 * 4
    workspace = torch.full((2 * part_bytes + 16,), 0xFF, dtype=torch.uint8)
    assert shared_host()._workspace_splits(8, batch * q_len * heads, 512, workspace.numel()) == 2
    out = torch.full((batch, q_len, heads, 512), math.nan, dtype=torch.bfloat16)
    lse = torch.full((batch, q_len, heads), math.nan)
    plan = make_plan(md, batch, q_len, heads, topk, 8)
    launch(md, sparse_call(case, 0.05, 1.0, None, out, lse, plan, workspace[1:]), paged=False)
    ref_out, ref_lse = decode_oracle(case.query, sparse_keys(case), case.seq_lens, topk, 512, 0.05, 1.0, None)
    assert_decode_close(out, lse, ref_out, ref_lse)


@pytest.mark.parametrize(("dtype", "page_size", "splits"), [(torch.bfloat16, 32, 1), (E4M3, 16, 3)])
def test_dense_decode(kernels, seed, dtype, page_size, splits):
    """Pages through a block table: -1 and out-of-range page ids are skipped; entries past
    ceil(L / page_size) hold valid pages that would change the result if they were read."""
    _, md = kernels
    batch, q_len, heads, dim, num_pages, width = 3, 2, 6, 576, 12, 6
    query = torch.randn(batch, q_len, heads, dim).to(dtype)
    kv_pages = torch.randn(num_pages, page_size, dim).to(dtype)
    tables = torch.randint(0, num_pages, (batch, width), dtype=torch.int32)
    seq_lens = torch.tensor([2 * page_size + 3, 0, 4 * page_size], dtype=torch.int32)
    tables[0, 1] = -1
    tables[2, 2] = num_pages
    tables[2, 3] = INT32_MAX
    out = torch.full((batch, q_len, heads, 512), math.nan, dtype=torch.bfloat16)
    lse = torch.full((batch, q_len, heads), math.nan)
    workspace = torch.full((1 << 20,), 0xFF, dtype=torch.uint8)
    sinks = torch.randn(heads)
    plan = make_plan(md, batch, q_len, heads, width * page_size, splits)
    launch(
        md, Decode(query, kv_pages, tables, seq_lens, 0.05, 0.9, sinks, out, lse, plan, workspace), paged=True
    )

    def keys_of(b, t, n):
        rows = []
        for p in range(n):
            page = int(tables[b, p // page_size])
            if 0 <= page < num_pages:
                rows.append(kv_pages[page, p % page_size])
        return torch.stack(rows).double() if rows else torch.empty(0, dim, dtype=torch.float64)

    ref_out, ref_lse = decode_oracle(query, keys_of, seq_lens, width * page_size, 512, 0.05, 0.9, sinks)
    assert_decode_close(out, lse, ref_out, ref_lse)


def test_plan_depends_on_shape_only(kernels):
    _, md = kernels
    plans = {md.plan_decode(b, q, h, 2048, 132) for b in (1, 8, 128) for q in (1, 2) for h in (16, 128)}
    for plan in plans:
        assert 1 <= plan.num_splits <= shared_host().MAX_SPLITS
    one = md.plan_decode(1, 1, 128, 2048, 132)
    assert one.num_splits > 1, "a single request is split over the key list"
    assert md.plan_decode(128, 1, 128, 2048, 132).num_splits == 1, "a full wave needs no combine"
    assert md.plan_decode(1, 1, 128, 64, 132).num_splits == 1, "short lists are not split"


def test_the_combine_launch_names_every_constexpr():
    """The one combine launch (both decode tiers call ``launch_combine``) passes every constexpr of
    the shared combine kernel (a missing one is a TypeError at the first launch, on a GPU only):
    the constexprs read from its source."""
    import inspect
    import re

    from flashinfer.mla.kernels import mla_decode_shared

    kernel = getattr(mla_decode_shared.mla_combine_kernel, "fn", mla_decode_shared.mla_combine_kernel)
    combine = {
        name
        for name, p in inspect.signature(kernel).parameters.items()
        if "constexpr" in str(p.annotation) and p.default is inspect.Parameter.empty
    }
    assert "SINK_IN_LSE" in combine
    launch = inspect.getsource(mla_decode_shared.launch_combine)
    assert combine <= set(re.findall(r"(\w+)=", launch))
