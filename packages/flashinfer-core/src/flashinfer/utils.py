"""Upstream-compatible helpers and exception classes (``flashinfer.utils``).

The helpers answer truthfully on CPU, CUDA and MUSA devices: a MUSA device reports its own
compute capability (MP31 is ``(3, 1)``) and multiprocessor count; ``get_compute_capability``
keeps upstream's ``ValueError`` for devices that have no compute capability (CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ._core.errors import BackendSupportedError, GPUArchitectureError, LibraryError

__all__ = [
    "BackendSupportedError",
    "GPUArchitectureError",
    "LibraryError",
    "backend_requirement",
    "ceil_div",
    "device_support_pdl",
    "get_compute_capability",
    "get_device_sm_count",
    "get_trtllm_gen_multi_ctas_kv_counter_bytes",
    "has_flashinfer_jit_cache",
    "is_sm90a_supported",
    "is_sm100a_supported",
    "is_sm100f_supported",
    "is_sm110a_supported",
    "is_sm120a_supported",
    "is_sm121a_supported",
    "next_positive_power_of_2",
    "round_up",
    "supported_compute_capability",
]


def _device(device) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device)


def _musa():
    musa = getattr(torch, "musa", None)
    if musa is None:
        raise ValueError("a MUSA device needs torch_musa, which is not imported")
    return musa


@functools.cache
def get_compute_capability(device: torch.device) -> tuple[int, int]:
    """``(major, minor)`` of a CUDA or MUSA device.

    Raises
    ------
    ValueError
        ``"device must be a cuda device"`` for a device without a compute capability (CPU).
    """
    device = _device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device.index)
    if device.type == "musa":
        return tuple(_musa().get_device_capability(device.index))
    raise ValueError("device must be a cuda device")


@functools.cache
def get_device_sm_count(device: torch.device) -> int:
    """Number of streaming multiprocessors (CUDA), MUSA multiprocessors, or CPU cores."""
    device = _device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    if device.type == "musa":
        return _musa().get_device_properties(device).multi_processor_count
    import os

    return os.cpu_count() or 1


def round_up(x: int, y: int) -> int:
    """Smallest multiple of ``y`` that is at least ``x``."""
    return (x + y - 1) // y * y


def ceil_div(x: int, y: int) -> int:
    """``ceil(x / y)`` for positive integers (on the host: ``triton.cdiv`` is a constexpr
    function whose host calls cost microseconds each)."""
    return (x + y - 1) // y


def next_positive_power_of_2(x: int) -> int:
    """Smallest power of two that is at least ``x`` (1 for ``x < 1``); a plain-Python
    ``triton.next_power_of_2`` for host code."""
    if x < 1:
        return 1
    return 1 << (int(x) - 1).bit_length()


def get_trtllm_gen_multi_ctas_kv_counter_bytes(batch_size: int, num_q_heads: int, sm_count: int) -> int:
    """Minimum byte size of MLA decode's ``multi_ctas_kv_counter_buffer``.

    ``round_up(max(batch_size * num_q_heads, sm_count), 8) * 4``.
    """
    return round_up(max(batch_size * num_q_heads, sm_count), 8) * 4


def _cuda_cc(device) -> tuple[int, int] | None:
    device = _device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return get_compute_capability(device)


def _cuda_version() -> tuple[int, int]:
    v = torch.version.cuda
    if not v:
        return (0, 0)
    major, minor = v.split(".")[:2]
    return int(major), int(minor)


def _is_arch(device, majors, minors=None, min_cuda=(12, 8)) -> bool:
    cc = _cuda_cc(device)
    if cc is None or cc[0] not in majors:
        return False
    if minors is not None and cc[1] not in minors:
        return False
    return _cuda_version() >= min_cuda


def has_flashinfer_jit_cache() -> bool:
    """False: there is no ``flashinfer-jit-cache`` package of prebuilt kernel modules here (this
    build compiles nothing with nvcc; Triton kernels compile on first use). Upstream tests then
    "warm up" with :func:`flashinfer.jit.build_jit_specs`, which has nothing to build."""
    return False


def is_sm90a_supported(device: torch.device) -> bool:
    """Whether ``device`` is an SM90 (Hopper) CUDA device with CUDA >= 12.3."""
    return _is_arch(device, (9,), min_cuda=(12, 3))


def is_sm100a_supported(device: torch.device) -> bool:
    """Whether ``device`` is an SM100 (Blackwell) CUDA device with CUDA >= 12.8."""
    return _is_arch(device, (10,), (0,))


def is_sm100f_supported(device: torch.device) -> bool:
    """Whether ``device`` is an SM10x CUDA device with CUDA >= 12.9."""
    return _is_arch(device, (10,), min_cuda=(12, 9))


def is_sm110a_supported(device: torch.device) -> bool:
    """Whether ``device`` is an SM110 CUDA device with CUDA >= 13.0."""
    return _is_arch(device, (11,), (0,), min_cuda=(13, 0))


def is_sm120a_supported(device: torch.device) -> bool:
    """Whether ``device`` is an SM120 CUDA device with CUDA >= 12.8."""
    return _is_arch(device, (12,), (0,))


def is_sm121a_supported(device: torch.device) -> bool:
    """Whether ``device`` is an SM121 CUDA device with CUDA >= 12.9."""
    return _is_arch(device, (12,), (1,), min_cuda=(12, 9))


def device_support_pdl(device: torch.device) -> bool:
    """Whether programmatic dependent launch exists on ``device`` (CUDA SM90+)."""
    cc = _cuda_cc(device)
    return cc is not None and cc[0] >= 9


def supported_compute_capability(supported_ccs):
    """Tag a checker with the compute capabilities (``major*10+minor``) it supports."""

    def decorator(func):
        func._supported_ccs = set(supported_ccs)
        func.is_compute_capability_supported = lambda cc: cc in func._supported_ccs
        return func

    return decorator


def backend_requirement(
    backend_checks: dict,
    common_check: Callable | None = None,
    heuristic_func: Callable | None = None,
):
    """Upstream's backend/compute-capability gate for functions with a ``backend`` argument.

    Adds the hidden ``skip_check`` keyword and the hooks ``is_backend_supported``,
    ``is_compute_capability_supported``, ``has_backend`` and ``has_backend_choices``. Checkers
    tagged with :func:`supported_compute_capability` limit the capabilities; a checker that
    returns False raises ``ValueError("Problem size is not supported for <fn>")``.
    """

    def decorator(func):
        import inspect

        sig = inspect.signature(func)
        name = func.__name__

        def _ccs(checker):
            return getattr(checker, "_supported_ccs", None)

        def is_backend_supported(backend: str, cc: int | None = None) -> bool:
            if backend not in backend_checks:
                return False
            ccs = _ccs(backend_checks[backend])
            return cc is None or ccs is None or cc in ccs

        def is_compute_capability_supported(cc: int) -> bool:
            checkers = list(backend_checks.values()) or ([common_check] if common_check else [])
            return any(_ccs(c) is None or cc in _ccs(c) for c in checkers)

        @functools.wraps(func)
        def wrapper(*args, skip_check: bool = False, **kwargs):
            if skip_check:
                return func(*args, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            tensor = next((v for v in bound.arguments.values() if isinstance(v, torch.Tensor)), None)
            cc = None
            if tensor is not None:
                major, minor = get_compute_capability(tensor.device)
                cc = major * 10 + minor
            backend = bound.arguments.get("backend")
            if backend_checks and backend == "auto":
                suitable = [b for b in backend_checks if is_backend_supported(b, cc)]
                if heuristic_func is not None:
                    suitable = heuristic_func(suitable, **bound.arguments)
                if not suitable:
                    raise BackendSupportedError(f"No suitable auto backends found for {name}")
                wrapper.suitable_auto_backends = list(suitable)
            elif backend_checks:
                if not is_backend_supported(backend, cc):
                    raise BackendSupportedError(
                        f"{name} does not support backend '{backend}' with capability {cc}"
                    )
                for check in (common_check, backend_checks[backend]):
                    if check is not None and check(**bound.arguments) is False:
                        raise ValueError(f"Problem size is not supported for {name}")
            elif common_check is not None:
                ccs = _ccs(common_check)
                if ccs is not None and cc not in ccs:
                    raise BackendSupportedError(f"{name} does not support compute capability {cc}")
                if common_check(**bound.arguments) is False:
                    raise ValueError(f"Problem size is not supported for {name}")
            return func(*args, **kwargs)

        wrapper.is_backend_supported = is_backend_supported
        wrapper.is_compute_capability_supported = is_compute_capability_supported
        wrapper.has_backend = lambda backend: backend in backend_checks
        wrapper.has_backend_choices = lambda: bool(backend_checks)
        wrapper.suitable_auto_backends = []
        return wrapper

    return decorator
