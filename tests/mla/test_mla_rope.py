"""rope_quantize_fp8 / mla_rope_quantize_fp8: upstream's test grid, caller patterns R1-R2, edges.

Tolerance: every FP8 element within one rounding step of the float64 oracle (a float32 vs
float64 tie), nearly all bit-exact (oracles.assert_fp8_close).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from mla_ops import rope_kwargs
from oracles import E4M3, E5M2, assert_fp8_close, cos_sin_cache, rope_oracle

import flashinfer.rope
from flashinfer.rope import mla_rope_quantize_fp8, rope_quantize_fp8

OUTPUTS = ("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out")
ORACLE_ARGS = ("q_rope", "k_rope", "q_nope", "k_nope", "cos_sin_cache", "pos_ids")


def _check(kwargs, result):
    expected = rope_oracle(
        *(kwargs[k] for k in ORACLE_ARGS),
        kwargs.get("is_neox", True),
        kwargs.get("quant_scale_q", 1.0),
        kwargs.get("quant_scale_kv", 1.0),
        kwargs.get("quantize_dtype")
        or next((kwargs[o].dtype for o in OUTPUTS if kwargs.get(o) is not None), E4M3),
    )
    for name, actual, want in zip(OUTPUTS, result, expected):
        assert_fp8_close(actual, want, name)
        if kwargs.get(name) is not None:
            assert actual is kwargs[name]


# Upstream test_generalized_rope_quantize: (type, Hq, Hkv, rope_dim, nope_dim).
UPSTREAM_CONFIGS = [
    ("mla", 128, 1, 64, 512), ("mla", 64, 1, 128, 256), ("mla", 128, 1, 64, 128), ("mla", 32, 1, 32, 96),
    ("gqa", 32, 8, 64, 64), ("gqa", 64, 16, 128, 128), ("gqa", 24, 6, 32, 96), ("gqa", 32, 8, 128, 0),
    ("gqa", 64, 8, 128, 0), ("gqa", 64, 8, 64, 0),
    ("mha", 32, 32, 64, 64), ("mha", 16, 16, 128, 128), ("mha", 8, 8, 32, 96),
]  # fmt: skip


@pytest.mark.parametrize("config", UPSTREAM_CONFIGS, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("tokens", [1, 19])
@pytest.mark.parametrize("in_dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("out_dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_upstream_generalized_grid(config, tokens, in_dtype, out_dtype, seed):
    kind, q_heads, k_heads, rope_dim, nope_dim = config
    kwargs, _ = rope_kwargs(
        tokens, q_heads, k_heads, rope_dim, nope_dim, in_dtype, out_dtype, k_2d=kind == "mla"
    )
    kwargs["enable_pdl"] = tokens == 19  # both values, no effect on results
    _check(kwargs, rope_quantize_fp8(**kwargs))


@pytest.mark.parametrize("tokens", [1, 19])
@pytest.mark.parametrize("in_dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("out_dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_upstream_mla_rope_quantize(tokens, in_dtype, out_dtype, seed):
    # Upstream test_mla_rope_quantize: Hq = 128, D = 576, rope on the first 64 dims.
    q = torch.randn(tokens, 128, 576).to(in_dtype)
    k = torch.randn(tokens, 576).to(in_dtype)
    q_out = torch.empty(tokens, 128, 576, dtype=out_dtype)
    k_out = torch.empty(tokens, 576, dtype=out_dtype)
    kwargs = dict(q_rope=q[..., :64], k_rope=k[..., :64], q_nope=q[..., 64:], k_nope=k[..., 64:],
                  cos_sin_cache=cos_sin_cache(4096, 64), pos_ids=torch.arange(tokens), is_neox=False,
                  q_rope_out=q_out[..., :64], k_rope_out=k_out[..., :64], q_nope_out=q_out[..., 64:],
                  k_nope_out=k_out[..., 64:], enable_pdl=True)  # fmt: skip
    _check(kwargs, mla_rope_quantize_fp8(**kwargs))


def test_r1_sglang_verbatim(seed):
    # sglang mla_quantize_and_rope_for_fp8: transposed q_nope, q_rope a slice of [T, H, 192],
    # 2-D K slices of latent_cache (row stride 576), q outputs slices of one [T, H, 576] buffer.
    tokens, heads = 5, 16
    q_nope = torch.randn(heads, tokens, 512, dtype=torch.bfloat16).transpose(0, 1)
    q_rope = torch.randn(tokens, heads, 192, dtype=torch.bfloat16)[..., 128:]
    latent_cache = torch.randn(tokens, 576, dtype=torch.bfloat16)
    k_nope, k_rope = latent_cache[:, :512], latent_cache[:, 512:]
    cache = cos_sin_cache(4096, 64, yarn_mscale=1.2)
    positions = torch.randint(0, 4096, (tokens,))
    q_out = q_rope.new_empty(tokens, heads, 576, dtype=E4M3)
    k_rope_out = k_rope.new_empty(k_rope.shape, dtype=E4M3)
    k_nope_out = k_nope.new_empty(k_nope.shape, dtype=E4M3)
    kwargs = dict(q_rope=q_rope, k_rope=k_rope, q_nope=q_nope, k_nope=k_nope, cos_sin_cache=cache,
                  pos_ids=positions, is_neox=False, quantize_dtype=torch.float8_e4m3fn,
                  q_rope_out=q_out[..., 512:], k_rope_out=k_rope_out, q_nope_out=q_out[..., :512],
                  k_nope_out=k_nope_out, quant_scale_q=1.0, quant_scale_kv=1.0, enable_pdl=False)  # fmt: skip
    assert q_nope.stride() == (512, tokens * 512, 1)
    result = flashinfer.rope.mla_rope_quantize_fp8(**kwargs)
    _check(kwargs, result)


def test_r2a_vllm_dummy_3d_k(seed):
    # Q-only variant: dummy uninitialised [B, 1, *] K (3-D, Hkv = 1); garbage must not crash.
    batch, heads = 3, 8
    q_pe = torch.randn(batch, heads, 64, dtype=torch.bfloat16)
    ql_nope = torch.randn(batch, heads, 512, dtype=torch.bfloat16)
    k_rope = torch.empty(batch, 1, 64, dtype=torch.bfloat16)
    k_nope = torch.empty(batch, 1, 512, dtype=torch.bfloat16)
    q_out = torch.empty(batch, heads, 576, dtype=E4M3)
    cache = cos_sin_cache(256, 64).float()
    pos = torch.randint(0, 256, (batch,))
    result = mla_rope_quantize_fp8(
        q_pe, k_rope, ql_nope, k_nope, cache, pos, is_neox=False, quantize_dtype=E4M3,
        q_rope_out=q_out[..., 512:], k_rope_out=torch.empty(batch, 1, 64, dtype=E4M3),
        q_nope_out=q_out[..., :512], k_nope_out=torch.empty(batch, 1, 512, dtype=E4M3),
    )  # fmt: skip
    expected = rope_oracle(q_pe, k_rope, ql_nope, k_nope, cache, pos, False, 1.0, 1.0, E4M3)
    assert_fp8_close(result[0], expected[0], "q_rope_out")
    assert_fp8_close(result[2], expected[2], "q_nope_out")
    assert result[1].shape == (batch, 1, 64) and result[3].shape == (batch, 1, 512)


def test_r2b_expanded_k_nope128(seed):
    # tokenspeed-MLA prefill: nope 128, k_pe [T, 1, 64] expanded to [T, H, 64] (stride 0 on heads).
    tokens, heads = 6, 4
    q = torch.randn(tokens, heads, 192, dtype=torch.bfloat16)
    k_nope = torch.randn(tokens, heads, 128, dtype=torch.bfloat16)
    k_pe = torch.randn(tokens, 1, 64, dtype=torch.bfloat16).expand(tokens, heads, 64)
    q_out = torch.empty(tokens, heads, 192, dtype=E4M3)
    k_out = torch.empty(tokens, heads, 192, dtype=E4M3)
    kwargs = dict(q_rope=q[..., 128:], k_rope=k_pe, q_nope=q[..., :128], k_nope=k_nope,
                  cos_sin_cache=cos_sin_cache(512, 64), pos_ids=torch.randint(0, 512, (tokens,)),
                  is_neox=True, quantize_dtype=E4M3, q_rope_out=q_out[..., 128:], k_rope_out=k_out[..., 128:],
                  q_nope_out=q_out[..., :128], k_nope_out=k_out[..., :128], enable_pdl=True)  # fmt: skip
    assert k_pe.stride(1) == 0
    _check(kwargs, rope_quantize_fp8(**kwargs))


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_modes_scales_and_cache_dtypes(is_neox, cache_dtype, seed):
    kwargs, _ = rope_kwargs(9, 4, 1, 64, 512, k_2d=True, is_neox=is_neox, scale_q=0.625, scale_kv=1.75,
                            cache_dtype=cache_dtype, pos_dtype=torch.int32)  # fmt: skip
    _check(kwargs, rope_quantize_fp8(**kwargs))


@pytest.mark.parametrize("out_dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_saturates_to_finite_max(out_dtype, seed):
    kwargs, _ = rope_kwargs(4, 2, 1, 64, 512, k_2d=True, out_dtype=out_dtype, scale_q=1e6, scale_kv=-1e6)
    result = rope_quantize_fp8(**kwargs)
    fmax = torch.finfo(out_dtype).max
    for out in result:
        values = out.float()
        assert not values.isnan().any() and values.abs().max() == fmax
    _check(kwargs, result)


def test_out_of_range_positions_give_nan_rope_outputs(seed):
    kwargs, _ = rope_kwargs(4, 2, 1, 64, 512, k_2d=True, max_pos=32)
    kwargs["pos_ids"] = torch.tensor([0, 32, -1, 31])
    result = rope_quantize_fp8(**kwargs)
    for rope_out in result[:2]:
        nan_tokens = rope_out.float().isnan().flatten(1).all(1)
        assert nan_tokens.tolist() == [False, True, True, False]
    assert not result[2].float().isnan().any() and not result[3].float().isnan().any()


@pytest.mark.parametrize("k_2d", [True, False])
def test_nope_none_and_zero(k_2d, seed):
    kwargs, _ = rope_kwargs(5, 4, 1 if k_2d else 2, 64, 0, k_2d=k_2d, fused_outputs=False)
    kwargs["q_nope"] = kwargs["k_nope"] = None
    result = rope_quantize_fp8(**kwargs)
    assert result[2].shape == (5, 4, 0) and result[3].shape[-1] == 0
    _check(kwargs, result)


def test_quantize_dtype_follows_first_given_output(seed):
    kwargs, _ = rope_kwargs(3, 2, 1, 64, 512, k_2d=True, out_dtype=E5M2)
    kwargs["quantize_dtype"] = None
    result = rope_quantize_fp8(**kwargs)
    assert all(r.dtype == E5M2 for r in result)
    kwargs, _ = rope_kwargs(3, 2, 1, 64, 512, k_2d=True, fused_outputs=False)
    kwargs["quantize_dtype"] = None
    assert all(r.dtype == E4M3 and r.is_contiguous() for r in rope_quantize_fp8(**kwargs))


def test_quantize_dtype_is_read_only_for_outputs_allocated_here(seed):
    """Upstream allocates missing outputs with ``quantize_dtype`` and writes given ones in place,
    whatever it says (flashinfer-api.md 9.3)."""
    kwargs, _ = rope_kwargs(3, 2, 1, 64, 512, k_2d=True, out_dtype=E5M2)
    kwargs["quantize_dtype"] = E4M3  # every output given: they set the dtype
    result = rope_quantize_fp8(**kwargs)
    _check({**kwargs, "quantize_dtype": E5M2}, result)
    kwargs["q_nope_out"] = None  # one allocated as e4m3 beside e5m2 outputs: one kernel cannot
    with pytest.raises(RuntimeError, match="like every output.*`quantize_dtype`.*`q_rope_out`"):
        rope_quantize_fp8(**kwargs)


def test_zero_tokens():
    kwargs, _ = rope_kwargs(0, 2, 1, 64, 512, k_2d=True)
    result = rope_quantize_fp8(**kwargs)
    assert [r.shape[0] for r in result] == [0, 0, 0, 0]


def test_signatures_and_forwarding():
    expected = ["q_rope", "k_rope", "q_nope", "k_nope", "cos_sin_cache", "pos_ids", "is_neox", "quantize_dtype",
                "quant_scale_q", "quant_scale_kv", "q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out",
                "enable_pdl"]  # fmt: skip
    defaults = {
        "is_neox": True,
        "quantize_dtype": None,
        "quant_scale_q": 1.0,
        "quant_scale_kv": 1.0,
        "enable_pdl": False,
    }
    for fn in (rope_quantize_fp8, mla_rope_quantize_fp8):
        params = inspect.signature(fn).parameters
        assert list(params) == expected
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params.values())
        for name, value in defaults.items():
            assert params[name].default == value
    assert mla_rope_quantize_fp8 is not rope_quantize_fp8
    assert mla_rope_quantize_fp8.__name__ == "mla_rope_quantize_fp8"


@given(
    tokens=st.integers(1, 6),
    heads=st.integers(1, 5),
    rope_dim=st.sampled_from([32, 64]),
    nope_dim=st.sampled_from([0, 16, 128]),
    k_heads=st.sampled_from([0, 1, 2]),  # 0: 2-D (MLA) K
    pad=st.integers(0, 3),
    transpose=st.booleans(),
)
def test_hypothesis_strides(tokens, heads, rope_dim, nope_dim, k_heads, pad, transpose):
    torch.manual_seed(tokens * 100 + heads)

    def strided(shape):
        # Last dim contiguous, other strides padded and optionally token/head transposed.
        full = torch.randn(*shape[:-1], shape[-1] + pad, dtype=torch.bfloat16)[..., : shape[-1]]
        if transpose and len(shape) == 3:
            full = torch.randn(shape[1], shape[0], shape[2] + pad, dtype=torch.bfloat16)[
                ..., : shape[2]
            ].transpose(0, 1)
        return full

    k_shape = (tokens,) if k_heads == 0 else (tokens, k_heads)
    kwargs = dict(q_rope=strided((tokens, heads, rope_dim)), k_rope=strided((*k_shape, rope_dim)),
                  q_nope=strided((tokens, heads, nope_dim)), k_nope=strided((*k_shape, nope_dim)),
                  cos_sin_cache=cos_sin_cache(64, rope_dim), pos_ids=torch.randint(0, 64, (tokens,)),
                  is_neox=bool(pad % 2), quant_scale_q=0.5, quant_scale_kv=2.0)  # fmt: skip
    q_out = torch.empty(tokens, heads, rope_dim + nope_dim + pad, dtype=E4M3)
    kwargs.update(q_rope_out=q_out[..., :rope_dim], q_nope_out=q_out[..., rope_dim : rope_dim + nope_dim])
    _check(kwargs, rope_quantize_fp8(**kwargs))


def test_reference_chunks_over_tokens(monkeypatch, seed):
    from flashinfer.mla import _reference

    monkeypatch.setattr(_reference, "_ROPE_CHUNK_ELEMENTS", 1000)
    kwargs, _ = rope_kwargs(11, 3, 1, 64, 512, k_2d=True, is_neox=True, scale_q=1.5)
    _check(kwargs, rope_quantize_fp8(**kwargs))
