"""API-call logging with FlashInfer's environment variables, through the standard ``logging`` module.

``FLASHINFER_LOGLEVEL`` and ``FLASHINFER_LOGDEST`` are read once, when this module is imported
(set them before starting Python), with FlashInfer v0.6.17's meaning:

===== ============================================================================================
level what every public API call logs (to the ``flashinfer.api`` logger, before it runs)
===== ============================================================================================
0     nothing: :func:`flashinfer_api` returns the function itself, so there is no cost at all
1     ``[time] FlashInfer API Call: <function>``
3     the function name, every argument (tensors by shape, strides, dtype, device, contiguity,
      defaults marked ``[DEFAULT]``), then the value returned
5     level 3 and, per tensor, min / max / mean and NaN / Inf counts (these read the tensor back
      to the host: a synchronization; skipped while a CUDA graph is being captured)
10    upstream's "flight recorder" also dumps every tensor to disk; this build logs as level 5
      and says so once
===== ============================================================================================

``FLASHINFER_LOGDEST`` is ``stdout`` (the default), ``stderr`` or a file path (appended to; ``%i``
is replaced by the process id, one file per process). The ``flashinfer.api`` logger does not
propagate to the root logger. Inputs are logged before the call, so a call that crashes the
process still leaves its arguments in the log.

Warnings that are not API-call logging, such as a GPU tensor running the reference
implementation (:mod:`flashinfer._core.fallback`), go to the ``flashinfer`` logger and follow
the application's logging configuration.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
from datetime import datetime

import torch

from ._core.compile import is_compiling

__all__ = ["LOG_DEST_ENV", "LOG_LEVEL_ENV", "flashinfer_api"]

LOG_LEVEL_ENV = "FLASHINFER_LOGLEVEL"
LOG_DEST_ENV = "FLASHINFER_LOGDEST"
# levels with their own behaviour; a level in between logs as the one below it
LEVELS = (0, 1, 3, 5, 10)
_FLOATING = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
)

_logger = logging.getLogger("flashinfer.api")


def _read_level(text: str) -> int:
    try:
        return max(0, int(text))
    except ValueError:
        logging.getLogger("flashinfer").warning(
            "%s=%r is not an integer (0, 1, 3, 5 or 10): API logging stays off", LOG_LEVEL_ENV, text
        )
        return 0


def _destination(text: str) -> str:
    """``stdout``, ``stderr`` or a file path with ``%i`` replaced by the process id."""
    return text.replace("%i", str(os.getpid()))


LEVEL = _read_level(os.environ.get(LOG_LEVEL_ENV, "0"))
DESTINATION = _destination(os.environ.get(LOG_DEST_ENV, "stdout"))


def _setup(level: int, destination: str) -> None:
    _logger.handlers.clear()
    _logger.propagate = False
    if level == 0:
        _logger.addHandler(logging.NullHandler())
        _logger.setLevel(logging.CRITICAL + 1)
        return
    if destination == "stdout":
        handler = logging.StreamHandler(sys.stdout)
    elif destination == "stderr":
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logging.FileHandler(destination, mode="a")
    handler.setFormatter(logging.Formatter("%(message)s"))
    _logger.addHandler(handler)
    _logger.setLevel(logging.DEBUG)  # the verbosity is FLASHINFER_LOGLEVEL's
    if level >= 10:
        _logger.warning(
            "%s=%d: this build logs as level 5 and writes no tensor dumps (FlashInfer's flight recorder)",
            LOG_LEVEL_ENV,
            level,
        )


_setup(LEVEL, DESTINATION)


def _timestamp() -> str:
    return datetime.now().strftime("[%Y-%m-%d %H:%M:%S]")


def _capturing(tensor: torch.Tensor) -> bool:
    if not tensor.is_cuda:
        return False
    with contextlib.suppress(Exception):
        return torch.cuda.is_current_stream_capturing()
    return False


def _statistics(tensor: torch.Tensor, indent: str) -> list[str]:
    if _capturing(tensor):
        return [f"{indent}  [statistics skipped: CUDA graph capture in progress]"]
    if tensor.numel() == 0 or tensor.device.type == "meta":
        return []
    if tensor.dtype in _FLOATING:
        values = tensor.float()
        finite = values[values.isfinite()]
        lines = [
            f"{indent}  min={finite.min().item() if finite.numel() else float('nan'):.6f}",
            f"{indent}  max={finite.max().item() if finite.numel() else float('nan'):.6f}",
            f"{indent}  mean={finite.mean().item() if finite.numel() else float('nan'):.6f}",
            f"{indent}  nan_count={int(values.isnan().sum().item())}",
            f"{indent}  inf_count={int(values.isinf().sum().item())}",
        ]
        return lines
    if not tensor.dtype.is_floating_point and not tensor.dtype.is_complex and tensor.dtype != torch.bool:
        return [
            f"{indent}  min={tensor.min().item()}",
            f"{indent}  max={tensor.max().item()}",
            f"{indent}  mean={tensor.double().mean().item():.6f}",
        ]
    return []


def _format(value, level: int, indent: str = "") -> str:
    """One value as upstream formats it: tensors by their metadata (and statistics at level 5)."""
    if isinstance(value, torch.Tensor):
        lines = [
            f"{indent}Tensor(",
            f"{indent}  shape={tuple(value.shape)}",
            f"{indent}  stride={tuple(value.stride())}",
            f"{indent}  dtype={value.dtype}",
            f"{indent}  device={value.device}",
            f"{indent}  requires_grad={value.requires_grad}",
            f"{indent}  is_contiguous={value.is_contiguous()}",
        ]
        if level >= 5:
            try:
                lines += _statistics(value, indent)
            except Exception as error:  # statistics never make the call fail
                lines.append(f"{indent}  [statistics error: {error}]")
        return "\n".join(lines + [f"{indent})"])
    if isinstance(value, (list, tuple)) and value:
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
        items = [
            f"{indent}  [{i}]: {_format(item, level, indent + '  ').lstrip()}" for i, item in enumerate(value)
        ]
        return "\n".join([f"{indent}{opening}", *items, f"{indent}{closing}"])
    if isinstance(value, str):
        return f"{indent}{value!r}"
    return f"{indent}{value}" if isinstance(value, (int, float, bool, type(None))) else f"{indent}{value!r}"


def _call_record(fn, name: str, args: tuple, kwargs: dict, level: int) -> str:
    lines = ["=" * 80, f"{_timestamp()} FlashInfer API Call: {name}", "-" * 80]
    if args:
        lines.append("Positional input arguments:")
        for i, arg in enumerate(args):
            lines += [f"  arg[{i}]:", _format(arg, level, "    ")]
    if kwargs:
        lines.append("Keyword input arguments:")
        for key, value in kwargs.items():
            lines += [f"  {key}=", _format(value, level, "    ")]
    if not args and not kwargs:
        lines.append("(No explicit arguments)")
    defaults = []
    with contextlib.suppress(TypeError, ValueError):
        for i, (param, spec) in enumerate(inspect.signature(fn).parameters.items()):
            if spec.default is not inspect.Parameter.empty and i >= len(args) and param not in kwargs:
                defaults += [f"  {param}= [DEFAULT]", _format(spec.default, level, "    ")]
    if defaults:
        lines += ["Default parameters (not explicitly provided):", *defaults]
    return "\n".join(lines)


def flashinfer_api(fn):
    """Log calls of a public API function at ``FLASHINFER_LOGLEVEL`` (see the module docstring).

    At level 0 (the default) ``fn`` itself is returned: no wrapper, no cost. Otherwise the
    wrapper logs before the call (levels 1, 3, 5) and the value returned after it (3, 5); a
    logging failure is logged, never raised. Attributes of ``fn`` (FlashInfer's backend hooks,
    the signature) are kept on the wrapper.
    """
    if LEVEL == 0:
        return fn
    name = fn.__name__
    level = min(LEVEL, 5)

    @functools.wraps(fn)
    def logged(*args, **kwargs):
        if is_compiling():
            # Dynamo cannot trace the logging. A public op's hand-off replaces this wrapper while
            # Dynamo traces (flashinfer._core.compile) and its op logs through it when the graph
            # runs; what reaches here is a function without one (the metadata helper)
            return fn(*args, **kwargs)
        try:
            if level < 3:
                _logger.debug("%s FlashInfer API Call: %s", _timestamp(), name)
            else:
                _logger.debug(_call_record(fn, name, args, kwargs, level))
        except Exception as error:
            _logger.error("[LOGGING ERROR in %s (pre-execution)]: %s", name, error)
        result = fn(*args, **kwargs)
        if level >= 3:
            try:
                _logger.debug("\n".join(["Output value:", _format(result, level, "  "), "=" * 80, ""]))
            except Exception as error:
                _logger.error("[LOGGING ERROR in %s (outputs)]: %s", name, error)
        return result

    return logged
