"""The packed 656-byte FP8 cache through the public decode (upstream's ``sparse`` backend form).

On the reference implementation (CPU) and on the MATE adapter over the MATE stand-in: the byte
layout (a row written byte by byte and read back by a float64 decoder written here), the
``seq_lens`` forms (per-token top-k lengths, flattened, ``[batch]`` ignored, None), entries that
must never be read, names that must all work, metadata, and how the adapter maps the call onto
``mate.flashmla.flash_mla_with_kvcache``. The op table (``mla_ops.OPS``) covers the samples and
error inputs; ``tests/integration/test_bad_inputs.py`` checks nothing is written before an error.
Tolerances: output rtol 1e-2 / atol 2e-3 (one bf16 rounding plus float32 sums), LSE 1e-4.
"""

from __future__ import annotations

import math
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mla_ops import packed_kwargs
from oracles import PACKED_ROW_BYTES as ROW_BYTES
from oracles import assert_decode_close, packed_oracle

from flashinfer.decode import get_batch_decode_metadata_mla, trtllm_batch_decode_with_kv_cache_mla
from flashinfer.utils import LibraryError

LOG2E = 1.0 / math.log(2.0)


@pytest.fixture(params=["reference", "mate"])
def implementation(request):
    if request.param == "mate":
        request.getfixturevalue("mate_standin")
    return request.param


def decode(**kwargs):
    return trtllm_batch_decode_with_kv_cache_mla(**kwargs)


# ---------------------------------------------------------------------------------------- layout
def e4m3_value(byte: int) -> float:
    """float8_e4m3fn by its definition: sign, 4 exponent bits (bias 7), 3 mantissa bits."""
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def bf16_bytes(value: float) -> bytes:
    """The two high bytes of the float32 (``value`` is exactly representable in bfloat16)."""
    return struct.pack("<f", value)[2:]


def hand_built_row(seed: int):
    """One 656-byte row written field by field, and the float64 K it stands for."""
    gen = torch.Generator().manual_seed(seed)
    codes = [int(b) for b in torch.randint(0, 256, (512,), generator=gen)]
    codes = [b if b & 0x7F != 0x7F else 0x3C for b in codes]  # no NaN codes
    scales = [0.375, 2.0**-7, 0.0031, 1.5]  # one per 128 codes; 0.0031 is no power of two
    rope = [float(k) / 64 for k in torch.randint(-200, 200, (64,), generator=gen)]
    row = bytes(codes) + struct.pack("<4f", *scales) + b"".join(bf16_bytes(v) for v in rope)
    assert len(row) == ROW_BYTES
    scale32 = struct.unpack("<4f", struct.pack("<4f", *scales))  # the float32 values stored
    key = [e4m3_value(b) * scale32[i // 128] for i, b in enumerate(codes)] + rope
    return row, torch.tensor(key, dtype=torch.float64)


def test_layout_hand_built_bytes(implementation, seed):
    """One valid entry per token: the output is that row's V, and one-hot query heads read single
    K values (latent blocks 0-3 and RoPE) through the LSE: ``lse2 = bmm1 * K[d] * log2(e)``."""
    pool = [hand_built_row(seed + i) for i in range(16)]
    cache = torch.frombuffer(bytearray(b"".join(row for row, _ in pool)), dtype=torch.uint8).view(
        2, 8, ROW_BYTES
    )
    dims = [0, 127, 128, 255, 256, 383, 384, 511, 512, 543, 575]
    query = torch.zeros(1, 2, len(dims), 576, dtype=torch.bfloat16)
    for h, d in enumerate(dims):
        query[0, :, h, d] = 1.0
    indices = torch.full((1, 2, 64), -1, dtype=torch.int32)
    indices[0, 0, 5], indices[0, 1, 63] = 13, 2  # page 1 offset 5, page 0 offset 2
    out, lse = decode(query=query, kv_cache=cache, workspace_buffer=torch.empty(64, dtype=torch.uint8),
                      qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=indices,
                      seq_lens=None, max_seq_len=64, sparse_mla_top_k=64, bmm1_scale=1.0, return_lse=True,
                      kv_scale_format="arbitrary_fp32")  # fmt: skip
    for token, slot in ((0, 13), (1, 2)):
        key = pool[slot][1]
        expected = key[:512].expand(len(dims), 512)
        torch.testing.assert_close(out[0, token].double(), expected, rtol=2**-8, atol=1e-30)
        torch.testing.assert_close(lse[token].double(), key[dims] * LOG2E, rtol=1e-6, atol=1e-6)


# -------------------------------------------------------------------------------------- seq_lens
def test_seq_lens_forms(implementation, seed):
    """``[batch, q_len]``, flattened, strided: the same per-token lengths; ``[batch]`` with
    q_len > 1 is ignored (every column active), as None is."""
    kwargs, oracle = packed_kwargs(batch=2, q_len=3, heads=4, topk=64, lengths="2d")
    out = decode(**kwargs)
    assert_decode_close(out, None, oracle()[0], None)
    lengths = kwargs["seq_lens"]
    strided = torch.stack((lengths, lengths), -1)[..., 0]
    assert not strided.is_contiguous()
    for form in (lengths.reshape(-1), strided):
        assert torch.equal(decode(**{**kwargs, "seq_lens": form}), out)
    full = decode(**{**kwargs, "seq_lens": None})
    assert torch.equal(decode(**{**kwargs, "seq_lens": lengths[:, 0].contiguous()}), full)
    assert not torch.equal(full, out)


def test_batch_lengths_with_one_token_are_per_token(implementation, seed):
    kwargs, oracle = packed_kwargs(batch=3, q_len=1, lengths="batch")
    assert_decode_close(decode(**kwargs), None, oracle()[0], None)


def test_entries_never_read(implementation, seed):
    """Positions past a token's length hold valid slots of NaN rows; negative and out-of-pool
    entries sit anywhere: none of them reaches the result."""
    kwargs, _ = packed_kwargs(batch=2, q_len=2, heads=4, topk=64, lengths="tokens", pages=6)
    rows = kwargs["kv_cache"].view(-1, ROW_BYTES)
    poisoned = torch.arange(160, 192)
    rows[poisoned, :512] = 0x7F  # e4m3 NaN codes
    rows[poisoned, 512:528] = torch.tensor([0, 0, 0xC0, 0x7F], dtype=torch.uint8).repeat(4)  # NaN scales
    indices, lengths = kwargs["block_tables"], kwargs["seq_lens"]
    indices.copy_(torch.where((indices >= 160) & (indices < 192), 159, indices))  # keeps out-of-pool ones
    for i, n in enumerate(lengths.tolist()):
        b, t = divmod(i, 2)
        indices[b, t, min(n, 64) :] = poisoned.repeat(2)[: 64 - min(n, 64)].int()
    indices[1, 1, 0] = -(2**31)
    indices[0, 1, 3] = 2**31 - 1
    out, lse = decode(**kwargs, return_lse=True)
    assert torch.isfinite(out.float()).all()
    keys = _keys(rows)
    expected_out, expected_lse = packed_oracle(
        kwargs["query"], keys, indices, lengths, kwargs["bmm1_scale"], None
    )
    assert_decode_close(out, lse.view(2, 2, 4), expected_out, expected_lse)
    assert torch.isneginf(lse[-1]).all() and (out[-1, -1] == 0).all(), "the last token has length 0"


def _keys(rows):
    """float64 K of packed rows (NaN rows stay NaN)."""
    latent = rows[:, :512].view(torch.float8_e4m3fn).double()
    scales = rows[:, 512:528].contiguous().view(torch.float32).double()
    return torch.cat(
        (
            latent * scales.repeat_interleave(128, -1),
            rows[:, 528:].contiguous().view(torch.bfloat16).double(),
        ),
        -1,
    )


def test_sinks_enter_the_lse(implementation, seed):
    kwargs, oracle = packed_kwargs(batch=2, q_len=1, heads=8, lengths="tokens", sinks=True)
    out, lse = decode(**kwargs, return_lse=True)
    expected_out, expected_lse = oracle()
    assert_decode_close(out, lse.view(2, 1, 8), expected_out, expected_lse)
    sinks = kwargs["sinks"]
    torch.testing.assert_close(lse[-1].double(), sinks.double() * LOG2E)  # empty token: the sink alone


# ------------------------------------------------------------------------------- names, metadata
@pytest.mark.parametrize("backend", ["auto", "sparse", "trtllm-gen", "cute-dsl", "xqa"])
@pytest.mark.parametrize("scale_format", ["auto", "POW2-FP32", "Arbitrary_FP32"])
def test_every_backend_and_scale_format_name(backend, scale_format, seed):
    kwargs, oracle = packed_kwargs(lengths="tokens")
    out = decode(**{**kwargs, "backend": backend, "kv_scale_format": scale_format})
    assert_decode_close(out, None, oracle()[0], None)


def test_metadata_is_accepted_and_checked(implementation, seed):
    kwargs, oracle = packed_kwargs(batch=2, q_len=2, heads=4, topk=64)
    query = kwargs["query"]
    metadata = get_batch_decode_metadata_mla(query, torch.zeros(2, dtype=torch.int32), 64)
    assert_decode_close(decode(**kwargs, metadata=metadata), None, oracle()[0], None)
    other = get_batch_decode_metadata_mla(query[:1], torch.zeros(1, dtype=torch.int32), 64)
    with pytest.raises(ValueError, match="get_batch_decode_metadata_mla"):
        decode(**kwargs, metadata=other)


def test_zero_tokens(seed):
    kwargs, _ = packed_kwargs(batch=2, q_len=1)
    kwargs.update(query=kwargs["query"][:0], block_tables=kwargs["block_tables"][:0], seq_lens=None)
    out, lse = decode(**kwargs, return_lse=True)
    assert out.shape == (0, 1, 4, 512) and lse.shape == (0, 4)


# ------------------------------------------------------------------------------- MATE adapter
def _calls(mate, name):
    return [args for called, args in mate.CALLS if called == name]


def test_mate_gets_views_and_per_token_lengths(mate_standin, seed):
    kwargs, oracle = packed_kwargs(batch=2, q_len=3, heads=64, topk=128, lengths="tokens")
    out, lse = decode(**kwargs, return_lse=True)
    (call,) = _calls(mate_standin, "flash_mla_with_kvcache")
    assert call["q"].shape == (6, 1, 64, 576) and call["q"].data_ptr() == kwargs["query"].data_ptr()
    assert (
        call["k_cache"].data_ptr() == kwargs["kv_cache"].data_ptr() and call["k_cache"].shape[-1] == ROW_BYTES
    )
    assert (
        call["indices"].shape == (6, 1, 128)
        and call["indices"].data_ptr() == kwargs["block_tables"].data_ptr()
    )
    assert torch.equal(call["topk_length"], kwargs["seq_lens"].clamp(0, 128))
    assert call["softmax_scale"] == kwargs["bmm1_scale"] and not call["causal"] and call["is_fp8_kvcache"]
    assert call["block_table"] is None and call["cache_seqlens"] is None and call["head_dim_v"] == 512
    (metadata,) = _calls(mate_standin, "get_mla_metadata")
    assert metadata["topk"] == 128 and metadata["topk_length"] is None and metadata["is_fp8_kvcache"]
    assert (metadata["num_q_tokens_per_head_k"], metadata["num_heads_q"]) == (64, 64)
    expected_out, expected_lse = oracle()
    assert_decode_close(out, lse.view(2, 3, 64), expected_out, expected_lse)


def test_mate_padding_sinks_and_lse(mate_standin, seed):
    """16 heads and top-k 68 are padded to 64 and 128 (copies); the sinks reach MATE padded with
    -inf; MATE's natural, sink-free, +inf-when-empty LSE becomes upstream's."""
    kwargs, oracle = packed_kwargs(batch=2, q_len=1, heads=16, topk=68, lengths="tokens", sinks=True)
    out, lse = decode(**kwargs, return_lse=True)
    (call,) = _calls(mate_standin, "flash_mla_with_kvcache")
    assert call["q"].shape == (2, 1, 64, 576) and call["indices"].shape == (2, 1, 128)
    assert (call["indices"][..., 68:] == -1).all()
    assert (
        torch.equal(call["attn_sink"][:16], kwargs["sinks"]) and torch.isneginf(call["attn_sink"][16:]).all()
    )
    expected_out, expected_lse = oracle()
    assert_decode_close(out, lse.view(2, 1, 16), expected_out, expected_lse)


def test_mate_without_flashmla_uses_the_reference(mate_standin, monkeypatch, seed):
    import mate.flashmla

    from flashinfer._core import mate as mate_loader

    monkeypatch.delattr(mate.flashmla, "flash_mla_with_kvcache")
    mate_loader.reset_cache()
    kwargs, oracle = packed_kwargs(lengths="tokens")
    assert_decode_close(decode(**kwargs), None, oracle()[0], None)
    assert not _calls(mate_standin, "flash_mla_with_kvcache")


def test_missing_mate_raises_library_error(no_mate, seed):
    kwargs, _ = packed_kwargs()
    with pytest.raises(LibraryError, match="MATE"):
        decode(**kwargs)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    batch=st.integers(1, 3),
    q_len=st.integers(1, 3),
    heads=st.sampled_from([1, 3, 16, 64, 72]),
    topk=st.sampled_from([4, 60, 64, 100]),
    lengths=st.sampled_from(["tokens", "2d", "batch", None]),
    sinks=st.booleans(),
    pow2=st.booleans(),
)
def test_hypothesis_shapes(mate_standin, batch, q_len, heads, topk, lengths, sinks, pow2):
    """Shapes through the MATE adapter (padding, flattening) against the float64 oracle."""
    torch.manual_seed(batch + 10 * q_len + 100 * heads + topk)
    kwargs, oracle = packed_kwargs(batch=batch, q_len=q_len, heads=heads, topk=topk, page_size=16,
                                   lengths=lengths, sinks=sinks, pow2=pow2)  # fmt: skip
    out, lse = decode(**kwargs, return_lse=True)
    expected_out, expected_lse = oracle()
    assert_decode_close(out, lse.view(batch, q_len, heads), expected_out, expected_lse)
