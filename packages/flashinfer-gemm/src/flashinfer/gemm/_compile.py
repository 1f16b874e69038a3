"""The GEMM APIs as ``torch.library`` custom ops, for calls traced by ``torch.compile``.

Imported by a public GEMM's hand-off only while Dynamo traces it (:mod:`flashinfer._core.compile`
says why and how). Each op is registered from its public function's own parameters
(:func:`flashinfer._core.custom_ops.public_op`); :func:`call` binds a traced call, allocates the
output the caller left to the function (shape and dtype of the contract, contiguous) and calls
the op, which runs the public function eagerly with that output when the compiled graph runs.
``gemm_fp8_nt_blockscaled`` forwards to ``gemm_fp8_nt_groupwise`` and so is one
``flashinfer::gemm_fp8_nt_groupwise`` node.
"""

from __future__ import annotations

import torch

from flashinfer._core.compile import PUBLIC
from flashinfer._core.custom_ops import Travel, public_op

# the types of the GEMM APIs' parameters that are not tensors (the functions are not annotated)
_NOT_TENSORS = {
    "dtype": torch.dtype,
    "out_dtype": torch.dtype,
    "backend": str,
    "scale_major_mode": str,
    "mma_sm": int,
    "expected_m": int,
    "scale_granularity_mnk": list[int],
    "skip_check": bool,
}
# what the ops write
_OUTPUTS = ("out", "output_scale")
# `out` is allocated here when the caller leaves it to the function, so the op always receives a tensor
_ALLOCATED = {"out": Travel((("out", torch.Tensor),))}

# public function's name -> the shape of its `out`, as (parameter, dimension) pairs
_OUT_SHAPES = {
    "bmm_bf16": (("A", 0), ("A", 1), ("B", 2)),
    "bmm_fp8": (("A", 0), ("A", 1), ("B", 2)),
    "gemm_fp8_nt_groupwise": (("a", 0), ("b", 0)),
    "fp8_blockscale_gemm_sm90": (("input", 0), ("weight", 0)),
    "group_gemm_fp8_nt_groupwise": (("a", 0), ("b", 1)),
    "group_deepgemm_fp8_nt_groupwise": (("a", 0), ("b", 1)),
    "batch_deepgemm_fp8_nt_groupwise": (("a", 0), ("a", 1), ("b", 1)),
}

# name -> the op (registered when Dynamo first imports this module)
_OPS = {
    name: public_op(PUBLIC[name], _OUTPUTS, types=_NOT_TENSORS, travels=_ALLOCATED) for name in _OUT_SHAPES
}


def call(name: str, args: tuple, kwargs: dict) -> torch.Tensor:
    """The public GEMM ``name``, called with ``args`` and ``kwargs``, as one node.

    Returns
    -------
    torch.Tensor
        ``out``: the caller's, or a contiguous tensor of the contract's shape and dtype (the
        dtype argument, else bfloat16, or float8_e4m3fn with ``output_scale``).
    """
    op, out_shape = _OPS[name], _OUT_SHAPES[name]
    arguments = op.bind(args, kwargs)
    out = arguments["out"]
    if name == "bmm_fp8" and isinstance(out, str):
        # vLLM's flashinfer_scaled_fp8_mm passes the backend name positionally in `out`'s slot
        out, arguments["out"], arguments["backend"] = None, None, out
    if out is None:
        dtype = arguments.get("out_dtype", arguments.get("dtype"))  # bmm_fp8 calls it `dtype`
        if dtype is None:
            dtype = torch.bfloat16 if arguments.get("output_scale") is None else torch.float8_e4m3fn
        shape = [arguments[parameter].shape[dim] for parameter, dim in out_shape]
        # the first operand names the device: A, a or input, the first parameter of every row
        out = torch.empty(shape, dtype=dtype, device=arguments[out_shape[0][0]].device)
        arguments["out"] = out
    op(arguments)
    return out
