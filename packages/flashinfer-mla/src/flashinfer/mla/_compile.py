"""RoPE + FP8 quantize and the MLA decode as ``torch.library`` custom ops, for traced calls.

Imported by ``rope_quantize_fp8`` and ``trtllm_batch_decode_with_kv_cache_mla`` only while
Dynamo traces them (:mod:`flashinfer._core.compile` says why and how); ``mla_rope_quantize_fp8``
runs ``rope_quantize_fp8``'s code and so is one ``flashinfer::rope_quantize_fp8`` node. A public
function hands its arguments over as ``locals()`` (name -> value); each wrapper here allocates
the outputs the caller left to the function (shapes and dtypes of the contract, contiguous) and
calls its op, which runs the public function eagerly with them when the compiled graph runs.

Each op's parameters are its public function's, in the same order and with the same
annotations, read from the signature once at import, so the argument list is written in one
place. A custom op takes tensors, scalars, strings and lists only, so a few decode arguments
travel as other values (:class:`_Travel`): a scale that may be a float or a tensor becomes both
(one of them used), ``sinks`` (a tensor, a list of one, or None) a list and its form, and the
``metadata=`` object a key of :func:`flashinfer._core.custom_ops.remember` (-1 for None).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NamedTuple

import torch

from .._core.custom_ops import custom_op, recall, remember
from ._decode import trtllm_batch_decode_with_kv_cache_mla as _eager_decode
from ._rope import _OUTPUTS as _ROPE_OUTPUTS
from ._rope import rope_quantize_fp8 as _eager_rope

Tensor = torch.Tensor


class _Travel(NamedTuple):
    """How one public argument reaches the op when it cannot be passed as it is."""

    parameters: tuple[tuple[str, object], ...]  # the op's parameters for it: (name, type)
    split: Callable | None = None  # the argument -> the values of `parameters`; None: as is
    join: Callable | None = None  # the values of `parameters` -> the argument; None: as is


class _PublicOp:
    """A public function as the custom op ``flashinfer::<its name>`` that runs it.

    Parameters
    ----------
    public : callable
        The public function; the op's parameters are its parameters, in its order, typed by its
        annotations, except where ``travels`` says otherwise.
    mutates_args : tuple of str
        The op parameters written in place (every output buffer the caller can read).
    travels : dict of str to _Travel
        The public arguments that reach the op as other values, or as a narrower type.
    """

    def __init__(self, public: Callable, mutates_args: tuple[str, ...], travels: dict[str, _Travel]):
        signature = inspect.signature(public, eval_str=True)
        self.names = tuple(signature.parameters)
        self.splits = tuple(travels[name].split if name in travels else None for name in self.names)
        parameters = [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation)
            for public_name, parameter in signature.parameters.items()
            for name, annotation in (
                travels[public_name].parameters
                if public_name in travels
                else ((public_name, parameter.annotation),)
            )
        ]
        # per public parameter, in order: how many op values it arrived as, and how to join them
        joins = tuple(
            (len(travels[name].parameters), travels[name].join) if name in travels else (1, None)
            for name in self.names
        )

        def run(*values) -> None:  # the op's implementation: the public function, run eagerly
            arguments, start = [], 0
            for count, join in joins:
                arguments.append(values[start] if join is None else join(*values[start : start + count]))
                start += count
            public(*arguments)

        run.__signature__ = inspect.Signature(parameters, return_annotation=None)
        self.op = custom_op(public.__name__, mutates_args=mutates_args)(run)

    def __call__(self, arguments: dict) -> None:
        """Call the op (while Dynamo traces) with the public function's ``arguments``, outputs set."""
        values = []
        for name, split in zip(self.names, self.splits):
            if split is None:
                values.append(arguments[name])
            else:
                values.extend(split(arguments[name]))
        self.op(*values)


# ------------------------------------------------------------------------- rope_quantize_fp8

_ROPE = _PublicOp(
    _eager_rope,
    mutates_args=_ROPE_OUTPUTS,
    travels={name: _Travel(((name, Tensor),)) for name in _ROPE_OUTPUTS},  # allocated when missing
)


def rope_quantize_fp8(arguments: dict) -> tuple:
    """``rope_quantize_fp8`` as one node; returns the four outputs as the eager function does.

    ``arguments`` are the public function's. Missing outputs are allocated with the shapes of
    their inputs (a missing nope input: its rope input's leading dimensions and width 0) and
    ``quantize_dtype``, else the dtype of the first given output, else float8_e4m3fn.
    """
    q_rope, k_rope, q_nope, k_nope = (arguments[name] for name in ("q_rope", "k_rope", "q_nope", "k_nope"))
    given = tuple(arguments[name] for name in _ROPE_OUTPUTS)
    dtype = arguments["quantize_dtype"]
    if dtype is None:
        dtype = next((out.dtype for out in given if out is not None), torch.float8_e4m3fn)
    shapes = (
        q_rope.shape,
        k_rope.shape,
        (*q_rope.shape[:-1], 0) if q_nope is None else q_nope.shape,
        (*k_rope.shape[:-1], 0) if k_nope is None else k_nope.shape,
    )
    outs = tuple(
        torch.empty(shape, dtype=dtype, device=q_rope.device) if out is None else out
        for out, shape in zip(given, shapes)
    )
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


def _scale_travel(name: str) -> _Travel:
    return _Travel(((name, float), (f"{name}_tensor", Tensor | None)), _split_scale, _join_scale)


def _split_sinks(sinks) -> tuple:
    if sinks is None:
        return [], _NO_SINKS
    if isinstance(sinks, torch.Tensor):
        return [sinks], _SINKS_TENSOR
    return list(sinks), _SINKS_LIST


def _join_sinks(sinks: list[Tensor], form: int):
    return None if form == _NO_SINKS else sinks[0] if form == _SINKS_TENSOR else sinks


def _metadata_key(metadata) -> tuple:
    return (-1 if metadata is None else remember(metadata),)


def _metadata_object(key: int):
    return None if key < 0 else recall(key)


# `workspace_buffer` is scratch no caller reads (partials written and combined inside one call, in
# stream order), so it is not declared: as a mutated input, a 128-384 MiB buffer would be copied
# wherever functionalization cannot write it in place, and CUDA-graph trees skip graphs that
# mutate their inputs.
_DECODE = _PublicOp(
    _eager_decode,
    mutates_args=("out", "lse"),
    travels={
        "out": _Travel((("out", Tensor),)),  # allocated when missing
        "bmm1_scale": _scale_travel("bmm1_scale"),
        "bmm2_scale": _scale_travel("bmm2_scale"),
        "sinks": _Travel((("sinks", list[Tensor]), ("sinks_form", int)), _split_sinks, _join_sinks),
        "metadata": _Travel((("metadata", int),), _metadata_key, _metadata_object),
    },
)


def trtllm_batch_decode_with_kv_cache_mla(arguments: dict):
    """The decode as one node; returns ``out``, or ``(out, lse)`` with ``return_lse``.

    ``arguments`` are the public function's. ``out`` is allocated as ``query.shape[:-1] +
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
