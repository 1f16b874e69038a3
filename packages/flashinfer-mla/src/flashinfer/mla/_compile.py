"""RoPE + FP8 quantize and the MLA decode as ``torch.library`` custom ops, for traced calls.

Imported by the hand-off of ``rope_quantize_fp8`` and ``trtllm_batch_decode_with_kv_cache_mla``
only while Dynamo traces them (:mod:`flashinfer._core.compile` says why and how);
``mla_rope_quantize_fp8`` calls ``rope_quantize_fp8`` and so is one ``flashinfer::rope_quantize_fp8``
node. :func:`call` binds the traced call; each function here allocates the outputs the caller
left to the public function (shapes and dtypes of the contract, contiguous) and calls its op,
which runs the public function eagerly with them when the compiled graph runs.

Each op is registered from its public function's own parameters and annotations
(:func:`flashinfer._core.custom_ops.public_op`), so the argument list is written in one place. A
custom op takes tensors, scalars, strings and lists only, so a few decode arguments travel as
other values (:class:`~flashinfer._core.custom_ops.Travel`): a scale that may be a float or a tensor becomes both
(one of them used), ``sinks`` (a tensor, a list of one, or None) a list and its form, and the
``metadata=`` object its ``id`` (-1 for None), which :func:`flashinfer._core.compile.kept` maps back
to the object when the graph runs (every ``DecodeMetadata`` is kept from its making).
"""

from __future__ import annotations

import torch

from .._core.compile import PUBLIC, kept
from .._core.custom_ops import Travel, public_op
from ._args import ROPE_OUTPUTS as _ROPE_OUTPUTS
from ._args import rope_output_dtype, rope_outputs

Tensor = torch.Tensor

# ------------------------------------------------------------------------- rope_quantize_fp8

_ROPE = public_op(
    PUBLIC["rope_quantize_fp8"],
    _ROPE_OUTPUTS,
    travels={name: Travel(((name, Tensor),)) for name in _ROPE_OUTPUTS},  # allocated when missing
)


def rope_quantize_fp8(arguments: dict) -> tuple:
    """``rope_quantize_fp8`` as one node; returns the four outputs as the eager function does.

    Missing outputs are allocated by the op's rules (:func:`~._args.rope_output_dtype`,
    :func:`~._args.rope_outputs`), as the eager call allocates them.
    """
    inputs = tuple(arguments[name] for name in ("q_rope", "k_rope", "q_nope", "k_nope"))
    given = tuple(arguments[name] for name in _ROPE_OUTPUTS)
    dtype = arguments["quantize_dtype"]
    if dtype is None:
        dtype = rope_output_dtype(given)[0]
    outs = rope_outputs(inputs, given, dtype)
    for name, out in zip(_ROPE_OUTPUTS, outs):
        arguments[name] = out
    arguments["is_neox"] = bool(arguments["is_neox"])
    arguments["enable_pdl"] = bool(arguments["enable_pdl"])
    _ROPE(arguments)
    return outs


# -------------------------------------------------------- trtllm_batch_decode_with_kv_cache_mla

# the forms `sinks` comes in; the op takes a list and this code
_NO_SINKS, _SINKS_TENSOR, _SINKS_LIST = 0, 1, 2


def _split_scale(scale) -> tuple:
    """``(float, None)`` for a Python number, ``(1.0, tensor)`` for a tensor scale."""
    if isinstance(scale, torch.Tensor):
        return 1.0, scale
    return scale, None


def _join_scale(value: float, tensor: Tensor | None):
    return value if tensor is None else tensor


def _scale_travel(name: str) -> Travel:
    return Travel(((name, float), (f"{name}_tensor", Tensor | None)), _split_scale, _join_scale)


def _split_sinks(sinks) -> tuple:
    if sinks is None:
        return [], _NO_SINKS
    if isinstance(sinks, torch.Tensor):
        return [sinks], _SINKS_TENSOR
    return list(sinks), _SINKS_LIST


def _join_sinks(sinks: list[Tensor], form: int):
    return None if form == _NO_SINKS else sinks[0] if form == _SINKS_TENSOR else sinks


def _metadata_key(metadata) -> tuple:
    return (-1 if metadata is None else id(metadata),)


def _metadata_object(key: int):
    return None if key < 0 else kept(key)


# `workspace_buffer` is scratch no caller reads (partials written and combined inside one call, in
# stream order), so it is not declared: as a mutated input, a 128-384 MiB buffer would be copied
# wherever functionalization cannot write it in place, and CUDA-graph trees skip graphs that
# mutate their inputs.
_DECODE = public_op(
    PUBLIC["trtllm_batch_decode_with_kv_cache_mla"],
    ("out", "lse"),
    travels={
        "out": Travel((("out", Tensor),)),  # allocated when missing
        "bmm1_scale": _scale_travel("bmm1_scale"),
        "bmm2_scale": _scale_travel("bmm2_scale"),
        "sinks": Travel((("sinks", list[Tensor]), ("sinks_form", int)), _split_sinks, _join_sinks),
        "metadata": Travel((("metadata", int),), _metadata_key, _metadata_object),
    },
)


def trtllm_batch_decode_with_kv_cache_mla(arguments: dict):
    """The decode as one node; returns ``out``, or ``(out, lse)`` with ``return_lse``.

    ``out`` is allocated as ``query.shape[:-1] +
    (kv_lora_rank,)`` bfloat16 (``[batch, q_len, heads, kv_lora_rank]``, or ``[total_q, heads,
    kv_lora_rank]`` for a compact query) and, with ``return_lse``, ``lse`` as float32 ``[tokens,
    heads]``, tokens the product of the query's leading dimensions: the eager function's
    allocations.
    """
    query, out, lse, return_lse = (arguments[name] for name in ("query", "out", "lse", "return_lse"))
    if out is None:
        out = torch.empty(
            (*query.shape[:-1], arguments["kv_lora_rank"]), dtype=torch.bfloat16, device=query.device
        )
        arguments["out"] = out
    if lse is None and return_lse:
        tokens = query.shape[0] if query.dim() == 3 else query.shape[0] * query.shape[1]
        lse = torch.empty((tokens, query.shape[-2]), dtype=torch.float32, device=query.device)
        arguments["lse"] = lse
    _DECODE(arguments)
    return (out, lse) if return_lse else out


_CALLS = {
    "rope_quantize_fp8": (_ROPE, rope_quantize_fp8),
    "trtllm_batch_decode_with_kv_cache_mla": (_DECODE, trtllm_batch_decode_with_kv_cache_mla),
}


def call(name: str, args: tuple, kwargs: dict):
    """The public function ``name``, called with ``args`` and ``kwargs``, as one node; returns
    what the eager call returns."""
    op, as_node = _CALLS[name]
    return as_node(op.bind(args, kwargs))
