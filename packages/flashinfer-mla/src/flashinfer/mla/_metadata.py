"""Reusable decode metadata: ``get_batch_decode_metadata_mla`` and ``DecodeMetadata``.

Not an upstream FlashInfer API: a MUSA caller (vllm-musa) looks for
``flashinfer.decode.get_batch_decode_metadata_mla`` and MATE's decode takes its result as
``metadata=``. Here it records the decode configuration and the implementation's schedule
(``decode_plan``), so a decode that receives it skips planning and can check it was built for
this call.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from .._core.checks import describe, fail, require_tensors
from .._core.compile import is_compiling, keep
from ..api_logging import flashinfer_api
from ._checks import reject_topk
from ._dispatch import DISPATCH

__all__ = ["DecodeMetadata", "get_batch_decode_metadata_mla"]


@dataclass(frozen=True, eq=False)
class DecodeMetadata:
    """The schedule of one MLA decode configuration, reusable across calls.

    Attributes
    ----------
    batch, q_len, heads : int
        The query's ``[batch, q_len, heads, head_dim]`` (a compact ``[total_q, heads, head_dim]``
        query counts as ``batch = total_q``, ``q_len = 1``).
    topk : int
        ``sparse_mla_top_k`` (0: dense decode, no schedule).
    device : torch.device
        The device of the query.
    kind : str
        The implementation that planned it: ``"reference"``, ``"cuda"`` or ``"mate"``.
    plan : object
        That implementation's schedule (None for the reference). It never depends on the
        values of ``seq_lens``.
    """

    batch: int
    q_len: int
    heads: int
    topk: int
    device: torch.device
    kind: str
    plan: object

    def __post_init__(self) -> None:
        keep(self)  # a compiled decode receives it by id (flashinfer.mla._compile)

    def check(self, batch: int, q_len: int, heads: int, topk: int, device: torch.device, kind: str) -> None:
        """Raise ``ValueError`` naming the first field that differs from this call's."""
        if self._config == (batch, q_len, heads, topk, kind, device):
            return
        call = {"batch": batch, "q_len": q_len, "heads": heads, "topk": topk, "device": device, "kind": kind}
        for field, value in call.items():
            if getattr(self, field) != value:
                raise ValueError(
                    f"`metadata` was prepared for {field}={getattr(self, field)!r} but this decode "
                    f"call has {field}={value!r}; prepare it again with "
                    f"get_batch_decode_metadata_mla for this configuration"
                )

    @cached_property
    def _config(self) -> tuple:
        """The fields :meth:`check` compares, in its order, as one tuple: read once per object,
        not on every decode call (host time)."""
        return (self.batch, self.q_len, self.heads, self.topk, self.kind, self.device)


def check_metadata(metadata, batch: int, q_len: int, heads: int, topk: int, device: torch.device) -> None:
    """A decode call's ``metadata=``: a :class:`DecodeMetadata` prepared for this configuration
    and this device's implementation (``TypeError`` / ``ValueError`` otherwise)."""
    if type(metadata) is not DecodeMetadata:
        expected = "a DecodeMetadata from get_batch_decode_metadata_mla"
        fail(TypeError, "metadata", expected, type(metadata).__name__)
    metadata.check(batch, q_len, heads, topk, device, DISPATCH.kind(device))


def metadata_config(query: torch.Tensor) -> tuple[int, int, int]:
    """``(batch, q_len, heads)`` of a 4-D query or a compact 3-D one."""
    if query.dim() == 3:
        return query.shape[0], 1, query.shape[1]
    return query.shape[0], query.shape[1], query.shape[2]


@flashinfer_api
def get_batch_decode_metadata_mla(
    query: torch.Tensor, seq_lens: torch.Tensor, sparse_mla_top_k: int
) -> DecodeMetadata:
    """Prepare decode metadata once, to pass as ``metadata=`` to many decode calls.

    Parameters
    ----------
    query : torch.Tensor
        The query the decode calls will take: ``[batch, q_len, num_heads, 576]`` (or a compact
        ``[total_q, num_heads, 576]`` with ``cum_seq_lens_q``). Only its shape and device are used.
    seq_lens : torch.Tensor
        ``[batch]`` int32 on the query's device (the packed form's per-token lengths too). Its
        values are never read: the schedule does not depend on them.
    sparse_mla_top_k : int
        The decode's ``sparse_mla_top_k`` (0 for dense decode).

    Returns
    -------
    DecodeMetadata
        The configuration and the implementation's schedule for it.

    Raises
    ------
    TypeError
        ``query`` or ``seq_lens`` is not a tensor.
    ValueError
        A query that is not 3-D or 4-D, ``seq_lens`` not int32, on another device or (4-D query)
        of none of the decode's shapes, a negative ``sparse_mla_top_k``.
    RuntimeError
        ``sparse_mla_top_k`` not a multiple of 4 (the decode's rule); called inside
        ``torch.compile``: prepare the object outside and pass it in.

    Notes
    -----
    Reuse one object for every decode call with the same query shape (batch, q_len, heads),
    top-k, device and implementation: all layers of a step, and later steps. The schedule is
    built for the full top-k of every row and never reads ``seq_lens``, so it stays exact when
    the lengths change between calls (and inside a captured CUDA/MUSA graph). A call whose
    configuration differs raises ``ValueError``; prepare a new object then. Do not share one
    object between decode calls that run concurrently on different streams.

    Examples
    --------
    >>> import torch, flashinfer.decode
    >>> q = torch.zeros(2, 1, 16, 576, dtype=torch.float8_e4m3fn)
    >>> md = flashinfer.decode.get_batch_decode_metadata_mla(q, torch.tensor([5, 9], dtype=torch.int32), 64)
    >>> (md.batch, md.q_len, md.heads, md.topk, md.kind)
    (2, 1, 16, 64, 'reference')
    """
    if is_compiling():
        # an object made by traced code is Dynamo's reconstruction, which the compiled decode could
        # not be handed when it runs: metadata is host state, prepared outside like the inputs
        raise RuntimeError(
            "get_batch_decode_metadata_mla cannot run inside torch.compile: prepare the metadata "
            "outside the compiled function and pass it as metadata="
        )
    require_tensors(query=query, seq_lens=seq_lens)
    if query.dim() not in (3, 4):
        fail(
            ValueError,
            "query",
            "a [batch, q_len, num_heads, head_dim] or [total_q, num_heads, head_dim] tensor",
            query,
        )
    if seq_lens.dtype != torch.int32 or seq_lens.device != query.device:
        fail(ValueError, "seq_lens", f"an int32 tensor on {query.device}", seq_lens)
    if not isinstance(sparse_mla_top_k, int) or sparse_mla_top_k < 0:
        fail(ValueError, "sparse_mla_top_k", "a non-negative int", describe(sparse_mla_top_k))
    if sparse_mla_top_k % 4:  # the decode's rule, said where the object is made
        reject_topk(sparse_mla_top_k)
    batch, q_len, heads = metadata_config(query)
    if query.dim() == 4 and seq_lens.shape not in ((batch,), (batch, q_len), (batch * q_len,)):
        # [batch] KV lengths, or the packed form's one length per query token
        expected = f"shape ({batch},), ({batch}, {q_len}) or ({batch * q_len},) for a query of batch {batch}"
        fail(ValueError, "seq_lens", expected, seq_lens)
    device = query.device
    plan = None
    if sparse_mla_top_k > 0:
        plan = DISPATCH.module(device).decode_plan(batch, q_len, heads, sparse_mla_top_k, device)
    return DecodeMetadata(batch, q_len, heads, sparse_mla_top_k, device, DISPATCH.kind(device), plan)
