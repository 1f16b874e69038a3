"""Which implementation module serves RoPE and MLA decode, and what each one runs per op.

``DISPATCH.module(device)`` returns ``flashinfer.mla._reference``, ``._cuda`` or ``._mate``
(:mod:`flashinfer._core.dispatch`); each is an :class:`MlaImpl`: ``rope_quantize``,
``decode_plan``, ``sparse_decode``, ``packed_sparse_decode`` and ``dense_decode`` with the
normalized arguments of ``docs/internals.md``. ``ROUTES`` (with the backend tables' rules) is the one description of
what runs where: the README's tables and ``python -m flashinfer show-config`` are generated from it.
"""

from __future__ import annotations

from typing import Protocol

from .._core.dispatch import Dispatcher
from .._core.replay import Replay
from ._args import Decode, Rope
from ._checks import DECODE_BACKENDS


class MlaImpl(Protocol):
    """What every implementation module (``_reference``, ``_cuda``, ``_mate``) offers: the same
    functions, each taking one validated record (``tests/mla/test_mla_impl_protocol.py`` checks
    the three modules against it). Outputs are written in place; nothing is returned but the plan
    and, from the functions annotated ``Replay | None``, possibly a replay of the call
    (``flashinfer._core.replay``).
    """

    def rope_quantize(self, call: Rope) -> Replay | None:
        """RoPE on the rope parts, then scale and saturating FP8 cast of all four parts."""

    def decode_plan(self, batch: int, q_len: int, heads: int, topk: int, device) -> object:
        """The schedule of a sparse decode call shape (None where the implementation needs none);
        ``Decode.plan`` of a call whose caller passed metadata."""

    def sparse_decode(self, call: Decode) -> Replay | None:
        """Sparse decode over per-token slot lists; plans the call when ``call.plan`` is None."""

    def packed_sparse_decode(self, call: Decode) -> Replay | None:
        """Sparse decode over the packed 656-byte rows."""

    def dense_decode(self, call: Decode) -> Replay | None:
        """Paged (dense) decode through the block table."""


DISPATCH = Dispatcher("flashinfer.mla")

# op -> implementation kind -> what runs
ROUTES = {
    "rope_quantize_fp8, mla_rope_quantize_fp8": {
        "reference": "PyTorch, float32 math, saturating FP8 cast",
        "cuda": "one fused Triton launch for q and k",
        "mate": "mate mla_rope_quantize_fp8 for BF16, 2-D (or one-head) K, nope 512 / rope 64, e4m3; "
        "the reference otherwise",
    },
    "trtllm_batch_decode_with_kv_cache_mla (sparse)": {
        "reference": "PyTorch, float32 math, chunked online softmax",
        "cuda": "on Hopper (sm_90) with Triton 3.6 or 3.7, the warp-specialized Gluon kernel for e4m3/bf16 at "
        "dims 512/64; elsewhere the portable Triton split-K kernel; the reference for FP8 below compute "
        "capability 8.9 and for float16",
        "mate": "mate sparse_mla_fp8_decode for FP8 e4m3, dims 512/64, float bmm1_scale; the reference "
        "for BF16 and tensor bmm1_scale",
    },
    "trtllm_batch_decode_with_kv_cache_mla (sparse on the packed 656-byte cache)": {
        "reference": "PyTorch, float32 math on the dequantized rows",
        "cuda": "Triton split-K MLA decode, packed mode (FP8 rows dequantized in registers)",
        "mate": "mate.flashmla flash_mla_with_kvcache (FlashMLA's sparse FP8 decode); the reference "
        "without it",
    },
    "trtllm_batch_decode_with_kv_cache_mla (dense)": {
        "reference": "PyTorch, float32 math, chunked online softmax",
        "cuda": "on Hopper (sm_90) with Triton 3.6 or 3.7, the Gluon kernel (page lookups in its gather "
        "warps) for e4m3/bf16 at dims 512/64; elsewhere the portable Triton split-K paged kernel; the "
        "reference for FP8 below compute capability 8.9 and for float16",
        "mate": "the reference (MATE has no dense decode for 576-wide rows)",
    },
}

BACKEND_TABLES = (DECODE_BACKENDS,)


def compile_layer():
    """The custom-op layer of RoPE and the decode (``_compile``), imported only by a traced call's
    hand-off (:func:`flashinfer._core.compile.one_node`)."""
    from . import _compile

    return _compile
