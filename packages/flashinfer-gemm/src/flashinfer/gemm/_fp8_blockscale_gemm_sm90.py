"""``fp8_blockscale_gemm_sm90``: the block-scaled FP8 GEMM vLLM calls for DeepSeek linear layers.

Upstream's function (not wrapped in ``backend_requirement``: no ``skip_check``, no hooks) runs
a TensorRT-LLM / DeepGEMM kernel on SM90 only. Here it runs on every device: 16-bit operands
are quantized per block (one small kernel each), then the groupwise GEMM's implementation
(``gemm_groupwise``: cuBLASLt or the Triton/Gluon kernels on CUDA, MATE on MUSA) computes the
product.
"""

from __future__ import annotations

import torch

from flashinfer._core import scratch
from flashinfer._core.checks import check_device, check_k_major, check_no_overlap, fail, require_tensors
from flashinfer._core.compile import one_node
from flashinfer._core.replay import Replays
from flashinfer.api_logging import flashinfer_api
from flashinfer.utils import ceil_div

from ._args import Groupwise, QuantizeBlocks
from ._dispatch import DISPATCH, compile_layer

_BLOCK = 128
_E4M3 = torch.float8_e4m3fn
_BF16 = torch.bfloat16
_OUT = (torch.bfloat16, torch.float16)
# replays of the call signatures seen (flashinfer._core.replay)
_REPLAYS = Replays("fp8_blockscale_gemm_sm90")


def _check_shapes(input_shape, weight_shape) -> tuple:
    """Upstream's shape rules, in its order and with its messages; returns ``(M, N, K)``."""
    if len(input_shape) != 2:
        raise ValueError(f"Input must be 2D (M, K), got shape {tuple(input_shape)}")
    if len(weight_shape) != 2:
        raise ValueError(f"Weight must be 2D (N, K), got shape {tuple(weight_shape)}")
    M, K = input_shape
    N, K_weight = weight_shape
    if K_weight != K:
        raise ValueError(f"K dimension mismatch: input has K={K}, weight has K={K_weight}")
    if K % _BLOCK != 0:
        raise ValueError(f"K dimension must be divisible by block size ({_BLOCK}), got K={K}")
    if N % 64 != 0:
        raise ValueError(f"N dimension must be divisible by 64, got N={N}")
    return M, N, K


def _input_scale_view(input_scale, M: int, kb: int):
    """The logical ``(M, K/128)`` view of ``input_scale``.

    Upstream's kernel reads MN-major memory (K block ``kb``, row ``i`` at ``kb * ld + i``). An
    ``(M, K/128)`` tensor is read through its strides (its column-major view is that memory),
    and a ``(K/128, M)`` tensor (upstream's test passes one) as its transpose. When
    ``M == K/128`` the shape cannot tell: a contiguous tensor is taken as the MN-major storage,
    as upstream's kernel would read it.
    """
    shape = input_scale.shape
    if shape == (M, kb) and (M != kb or (input_scale.stride(0) == 1 and input_scale.stride(1) != 1)):
        return input_scale
    if shape == (kb, M):
        return input_scale.t()
    fail(
        ValueError,
        "input_scale",
        f"shape ({M}, {kb}) (one scale per 1x128 block of `input`) or its MN-major storage ({kb}, {M})",
        input_scale,
    )


def _check_input_weight_scales(input_dtype, weight_dtype, input_scale, weight_scale, device, M, N, K):
    """Upstream's dtype-combination and scale rules; returns the logical scale views."""
    input_is_fp8 = input_dtype == _E4M3
    if input_is_fp8 and weight_dtype == _BF16:
        raise ValueError("FP8 input + BF16 weight is not supported (missing kernel implementation). ")
    kb = K // _BLOCK
    if input_is_fp8:
        if input_scale is None:
            raise ValueError("input_scale is required when input is FP8. ")
        if input_scale.dtype != torch.float32:
            raise ValueError(f"input_scale must be float32, got {input_scale.dtype}")
        if input_scale.device != device:
            raise ValueError(f"input_scale device mismatch. Expected {device}, got {input_scale.device}")
        input_scale = _input_scale_view(input_scale, M, kb)
    else:
        if input_dtype != _BF16:
            raise ValueError(
                f"Input must be either FP8 (torch.float8_e4m3fn) or BF16 (torch.bfloat16), got {input_dtype}"
            )
        if input_scale is not None:
            raise ValueError(
                "input_scale should not be provided for BF16 inputs. "
                "Use FP8 inputs if you want to provide external scales."
            )
    if weight_dtype == _E4M3:
        if weight_scale is None:
            raise ValueError("weight_scale is required when weight is FP8. ")
        shape = weight_scale.shape
        per_token, per_block = (N, kb), (ceil_div(N, _BLOCK), kb)
        if shape != per_token and shape != per_block:
            raise ValueError(
                f"weight_scale shape mismatch. Expected either {per_token} "
                f"(per-token, 1x128 blocks) or {per_block} "
                f"(per-block, 128x128 blocks), got {tuple(shape)}"
            )
        if weight_scale.dtype != torch.float32:
            raise ValueError(f"weight_scale must be float32, got {weight_scale.dtype}")
        if weight_scale.device != device:
            check_device(weight_scale, "weight_scale", device, "input")
    else:
        if weight_dtype != _BF16:
            raise ValueError(
                f"Weight must be either FP8 (torch.float8_e4m3fn) or BF16 (torch.bfloat16), got {weight_dtype}"
            )
        if weight_scale is not None:
            raise ValueError(
                "weight_scale should not be provided for BF16 weights. "
                "Use FP8 weights if you want to provide external scales."
            )
    return input_scale, weight_scale


def _output_dtype(out, out_dtype, M, N, device) -> torch.dtype:
    """Upstream's ``out`` / ``out_dtype`` rules and messages."""
    if out is None:
        dtype = out_dtype or torch.bfloat16
        if dtype not in _OUT:
            raise ValueError(f"Output dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        return dtype
    if out.shape != (M, N):
        raise ValueError(f"Output shape mismatch. Expected ({M}, {N}), got {tuple(out.shape)}")
    if out.device != device:
        raise ValueError(f"Output device mismatch. Expected {device}, got {out.device}")
    dtype = out.dtype
    if dtype not in _OUT:
        raise ValueError(f"Output dtype must be torch.bfloat16 or torch.float16, got {dtype}")
    if out_dtype is not None and dtype != out_dtype:
        raise ValueError(f"Output dtype mismatch. Expected {out_dtype}, got {dtype}")
    return dtype


@one_node(compile_layer)
@flashinfer_api
def fp8_blockscale_gemm_sm90(input, weight, input_scale=None, weight_scale=None, out=None, out_dtype=None):
    """Block-scaled FP8 GEMM ``out = dequant(input) @ dequant(weight).T`` (DeepSeek-V3 linear layers).

    Three dtype combinations, as upstream: FP8 input + FP8 weight (W8A8, both scaled by the
    caller), BF16 input + FP8 weight (the input is quantized inside, per 1x128 block), BF16 +
    BF16 (the input per 1x128 block and the weight per 128x128 block, inside). The internal
    quantization is upstream's: per block, ``q = 448 / amax`` (1 for an all-zero block),
    ``e4m3(x * q)`` saturated, dequantization scale ``1 / q``, each rounded in float32.

    Parameters
    ----------
    input : torch.Tensor
        ``[M, K]`` float8_e4m3fn or bfloat16, K-major (``input.stride(1) == 1``).
    weight : torch.Tensor
        ``[N, K]`` float8_e4m3fn or bfloat16, K-major.
    input_scale : torch.Tensor, optional
        Required with an FP8 ``input`` (and only then): float32 dequantization multipliers, one
        per 1x128 block: ``[M, K/128]``, read through its strides (upstream's kernel reads the
        MN-major memory of its column-major view), or the MN-major storage ``[K/128, M]`` itself.
    weight_scale : torch.Tensor, optional
        Required with an FP8 ``weight`` (and only then): float32, ``[ceil(N/128), K/128]`` (one
        per 128x128 block) or ``[N, K/128]`` (one per 1x128 block of each row); any strides.
    out : torch.Tensor, optional
        ``[M, N]`` bf16/fp16, written in place and returned; any strides.
    out_dtype : torch.dtype, optional
        ``torch.bfloat16`` (default) or ``torch.float16``; must equal ``out.dtype`` when both
        are given.

    Returns
    -------
    torch.Tensor
        ``out``, ``[M, N]``, bfloat16 unless ``out_dtype`` says float16.

    Raises
    ------
    ValueError
        Upstream's rules, with its messages: 2-D operands, matching K, ``K % 128 == 0``,
        ``N % 64 == 0``, FP8 input with a BF16 weight, dtypes other than e4m3/bf16, a missing,
        unexpected, non-float32 or misshapen scale, ``out`` shape/device/dtype, an
        ``out_dtype`` other than bf16/fp16 or differing from ``out.dtype``. Ours: an
        ``input_scale`` of another shape, tensors on different devices, non-K-major operands,
        an ``out`` overlapping an input.
    TypeError
        A non-tensor scale or ``out``.

    Notes
    -----
    Accuracy against the product of the operands as given (float32 accumulation and one output
    rounding aside): FP8 + FP8 is exact; a BF16 operand quantized inside keeps 3 mantissa bits,
    so each of its elements moves by at most ``2**-4 |x| + 2**-10 amax / 448`` (its block's
    amax): BF16 input + FP8 weight adds at most ``2**-4 sum_k |x||w|`` (plus that subnormal
    term), BF16 + BF16 about twice as much.

    Upstream raises ``ValueError`` off SM90; here it runs on every device. Upstream's kernel
    always writes bf16 (an fp16 ``out`` receives bf16 bits there); here fp16 output is fp16.

    Examples
    --------
    >>> import torch
    >>> from flashinfer.gemm import fp8_blockscale_gemm_sm90
    >>> x = torch.randn(4, 256, dtype=torch.bfloat16)
    >>> w = torch.randn(128, 256, dtype=torch.bfloat16)
    >>> y = fp8_blockscale_gemm_sm90(x, w)
    >>> y.shape, y.dtype
    (torch.Size([4, 128]), torch.bfloat16)
    >>> w_fp8 = w.to(torch.float8_e4m3fn)
    >>> fp8_blockscale_gemm_sm90(x, w_fp8, None, torch.ones(1, 2)).shape
    torch.Size([4, 128])
    """
    key = None
    if _REPLAYS.serves(input):  # False for a non-tensor: the checks below say
        tensors = (input, weight, input_scale, weight_scale, out)
        if input_scale is None or weight_scale is None or out is None:  # the head says which
            tensors = tuple(t for t in tensors if t is not None)
        key = (input.shape, input_scale is None, weight_scale is None, out is None, out_dtype)
        replay = _REPLAYS.find(key, tensors)
        if replay is not None:  # this signature passed every check below (flashinfer._core.replay)
            if out is not None:
                check_no_overlap(out, "out", ("input", "weight"), input, weight)
            plan, replays = replay
            return _compute(plan, None, replays, input, weight, input_scale, weight_scale, out)[0]
    try:
        M, N, K = _check_shapes(input.shape, weight.shape)
        input_dtype, weight_dtype, device = input.dtype, weight.dtype, input.device
        scale_view, _ = _check_input_weight_scales(
            input_dtype, weight_dtype, input_scale, weight_scale, device, M, N, K
        )
        dtype = _output_dtype(out, out_dtype, M, N, device)
        # what upstream's kernel assumes without checking: one device, K-major operands, an
        # `out` that does not share memory with the operands
        if weight.device != device:
            check_device(weight, "weight", device, "input")
        if not (input.is_contiguous() and weight.is_contiguous()):  # else both are K-major
            check_k_major(input, "input")
            check_k_major(weight, "weight")
        if out is not None:
            check_no_overlap(out, "out", ("input", "weight"), input, weight)
    except AttributeError:
        require_tensors(
            input=input,
            weight=weight,
            input_scale=input_scale,
            weight_scale=weight_scale,
            out=out,
            optional=("input_scale", "weight_scale", "out"),
        )
        raise
    if M == 0 or N == 0 or K == 0:  # nothing to quantize or multiply: the sum over no k is 0
        return (torch.empty(M, N, dtype=dtype, device=device) if out is None else out).zero_()
    # what the signature decides (a plain tuple: host time), _compute's `plan`
    plan = (
        M,
        N,
        K,
        dtype,
        device,
        input_dtype == _BF16,
        weight_dtype == _BF16,
        scale_view is not input_scale,  # the MN-major storage, read as its transpose
        weight_dtype == _E4M3 and weight_scale.shape[0] == N,  # N >= 64 tells the two shapes apart
    )
    out, replays = _compute(
        plan, DISPATCH.module(device), None, input, weight, input_scale, weight_scale, out
    )
    if key is not None and all(r is not None for r, used in zip(replays, (plan[5], plan[6], True)) if used):
        _REPLAYS.put(key, tensors, (plan, replays))  # every launch the call made has its replay
    return out


def _compute(plan: tuple, impl, replays, input, weight, input_scale, weight_scale, out) -> tuple:
    """Allocate, quantize and multiply a validated call through the implementation module
    ``impl`` or, for a repeated call signature, the ``replays`` its first call returned.

    ``plan``: ``(M, N, K, out dtype, device, quantize the input, quantize the weight, the input
    scale given as its [K/128, M] MN-major storage, 1x128 weight scale blocks)``. Returns ``(out,
    what the quantizations and the GEMM returned)`` (each a replay or None)."""
    if replays is None:
        quantize_a = quantize_b = impl.quantize_fp8_blocks
        gemm = impl.gemm_groupwise
    else:
        quantize_a, quantize_b, gemm = replays
    M, N, K, dtype, device, quantize_input, quantize_weight, input_scale_mn_major, weight_scale_per_row = plan
    k_blocks = K // _BLOCK
    if out is None:  # sizes as arguments (docs/internals.md, host time)
        out = torch.empty(M, N, dtype=dtype, device=device)
    replay_input = replay_weight = None
    if quantize_input:
        if replays is None:
            a = torch.empty(M, K, dtype=_E4M3, device=device)
            # column-major (M, K/128): the layout cuBLASLt's 1x128 scales take without a copy
            input_scale = torch.empty(k_blocks, M, dtype=torch.float32, device=device).t()
        else:  # replays read only pointers: the current stream's scratch (flashinfer._core.scratch)
            a = scratch.take(device, "blockscale GEMM quantized input", M * K, _E4M3)
            input_scale = scratch.take(device, "blockscale GEMM input scales", k_blocks * M, torch.float32)
        replay_input = quantize_a(QuantizeBlocks._make((input, 1, a, input_scale)))
    else:
        a = input
        if input_scale_mn_major and replays is None:  # replays read only its pointer
            input_scale = input_scale.t()
    if quantize_weight:
        n_blocks = ceil_div(N, _BLOCK)
        if replays is None:
            b = torch.empty(N, K, dtype=_E4M3, device=device)
            weight_scale = torch.empty(n_blocks, k_blocks, dtype=torch.float32, device=device)
        else:
            b = scratch.take(device, "blockscale GEMM quantized weight", N * K, _E4M3)
            weight_scale = scratch.take(
                device, "blockscale GEMM weight scales", n_blocks * k_blocks, torch.float32
            )
        replay_weight = quantize_b(QuantizeBlocks._make((weight, _BLOCK, b, weight_scale)))
    else:
        b = weight
    block_n = 1 if weight_scale_per_row else _BLOCK
    replay_gemm = gemm(
        Groupwise._make((a, b, input_scale, weight_scale, False, False, 1, block_n, _BLOCK, out, None))
    )
    return out, (replay_input, replay_weight, replay_gemm)
