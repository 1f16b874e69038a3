"""Stream-ordered scratch memory: the temporaries of a replayed call, kept per stream.

Some calls write temporaries that only their own launches read: ``fp8_blockscale_gemm_sm90``'s
quantized BF16 input and its scales, the decode-size GEMM's partial sums of a split K and its
arrival counters. Launches in one stream run one after another, so the next call in that stream
may reuse the memory; a CUDA allocation costs the host a few microseconds, more than a bound
launch's own argument work (issue 32). Calls in concurrent streams (two-batch overlap) each take
their stream's own.

Rules
-----
- A buffer is kept per ``(device, stream, purpose, dtype)``: one purpose per temporary of a launch
  sequence, so that two temporaries of one call never share memory.
- A buffer, once handed out, stays allocated for the life of the process: a CUDA graph captured
  around a call keeps its address. When a call needs more, a larger buffer (twice the size, within
  :data:`MAX_BYTES`) takes its place and the smaller one is kept, not freed.
- Only temporaries up to :data:`MAX_BYTES` live here; a larger one is allocated for the call
  (PyTorch's caching allocator, stream-ordered as well).
- A buffer is flat, of the dtype asked and at least as long as asked: the launches that take it
  read only its pointer (a bound launch's rule, :meth:`.triton_launch.FastLaunch.bind`).
- ``zeroed`` buffers start zero and the kernels that use them leave them zero (counters). One
  first taken while its stream is being captured into a CUDA graph is zeroed inside that graph:
  warm up a stream's calls before capturing on it, as engines do.
- On a device without streams (the CPU) every call shares the device's one.
"""

from __future__ import annotations

import torch

__all__ = ["MAX_BYTES", "take"]

MAX_BYTES = 8 << 20

_BUFFERS: dict = {}
_RETIRED: list = []  # outgrown buffers, kept allocated (a captured graph may hold their address)


def _current_stream(device: torch.device) -> int:
    return torch._C._cuda_getCurrentRawStream(device.index) if device.type == "cuda" else 0


def take(
    device: torch.device, purpose: str, numel: int, dtype: torch.dtype, zeroed: bool = False
) -> torch.Tensor:
    """The current stream's scratch buffer for ``purpose``: a flat ``dtype`` tensor on ``device``
    of at least ``numel`` elements (zeros where ``zeroed``, which its kernels keep zero), or a
    new one of ``numel`` elements above :data:`MAX_BYTES`."""
    key = (device, _current_stream(device), purpose, dtype)
    buffer = _BUFFERS.get(key)
    if buffer is not None and buffer.numel() >= numel:
        return buffer
    allocate = torch.zeros if zeroed else torch.empty
    if numel * dtype.itemsize > MAX_BYTES:
        return allocate(numel, dtype=dtype, device=device)
    if buffer is not None:
        _RETIRED.append(buffer)
        numel = max(numel, min(2 * buffer.numel(), MAX_BYTES // dtype.itemsize))
    buffer = _BUFFERS[key] = allocate(numel, dtype=dtype, device=device)
    return buffer
