"""Stream-ordered scratch memory: the temporaries of a replayed call, kept per stream.

Some calls write temporaries that only their own launches read: ``fp8_blockscale_gemm_sm90``'s
quantized BF16 input and its scales, the decode-size GEMM's partial sums of a split K and its
arrival counters. Launches in one stream run one after another, so the next call in that stream
may reuse the memory; a CUDA allocation costs the host a few microseconds, more than a bound
launch's own argument work (RESULTS.md, "Eager calls"). Calls in concurrent streams (two-batch overlap) each take
their stream's own.

Rules
-----
- A buffer is kept per ``(device, stream, purpose, dtype)``: one purpose per temporary of a launch
  sequence, so that two temporaries of one call never share memory.
- While the current stream is being captured into a CUDA graph, a call's temporaries are
  allocated for it instead (the graph's own memory, PyTorch's caching allocator): a graph never
  holds a scratch buffer's address, so eager calls between its replays cannot write under it, and
  ``torch.compile``'s CUDA graph trees find no allocation that outlives the call.
- When a call needs more, a larger buffer (twice the size, within :data:`MAX_BYTES`) takes the
  old one's place; the old one goes back to PyTorch's caching allocator, which hands it out again
  only after the stream's queued work (the allocator is stream-ordered as well).
- Only temporaries up to :data:`MAX_BYTES` live here; a larger one is allocated for the call
  (PyTorch's caching allocator, stream-ordered as well).
- A buffer is flat, of the dtype asked and at least as long as asked: the launches that take it
  read only its pointer (a bound launch's rule, :meth:`.triton_launch.FastLaunch.bind`).
- ``zeroed`` buffers start zero and the kernels that use them leave them zero (counters).
- On a device without streams (the CPU) every call shares the device's one.
"""

from __future__ import annotations

import torch

__all__ = ["MAX_BYTES", "take"]

MAX_BYTES = 8 << 20

_BUFFERS: dict = {}


def _current_stream(device: torch.device) -> int:
    return torch._C._cuda_getCurrentRawStream(device.index) if device.type == "cuda" else 0


def _capturing(device: torch.device) -> bool:
    # the current stream of the current device: callers launch on the device they take for
    return device.type == "cuda" and torch._C._cuda_isCurrentStreamCapturing()


def take(
    device: torch.device, purpose: str, numel: int, dtype: torch.dtype, zeroed: bool = False
) -> torch.Tensor:
    """The current stream's scratch buffer for ``purpose``: a flat ``dtype`` tensor on ``device``
    of at least ``numel`` elements (zeros where ``zeroed``, which its kernels keep zero), or a
    new one of ``numel`` elements above :data:`MAX_BYTES` or while the stream is being captured."""
    allocate = torch.zeros if zeroed else torch.empty
    if _capturing(device):
        return allocate(numel, dtype=dtype, device=device)
    key = (device, _current_stream(device), purpose, dtype)
    buffer = _BUFFERS.get(key)
    if buffer is not None and buffer.numel() >= numel:
        return buffer
    if numel * dtype.itemsize > MAX_BYTES:
        return allocate(numel, dtype=dtype, device=device)
    if buffer is not None:
        numel = max(numel, min(2 * buffer.numel(), MAX_BYTES // dtype.itemsize))
    buffer = _BUFFERS[key] = allocate(numel, dtype=dtype, device=device)
    return buffer
