"""What differs between the Triton releases we run on (3.6 to 3.9), in one place.

Kernels and launchers import what they need from here instead of testing Triton's version.

Gluon names
-----------
Each is the release's own builtin, so a kernel compiles exactly as if it had written that
release's spelling:

- ``cta_barrier``: ``gl.thread_barrier`` in 3.6, ``gl.barrier`` from 3.7 (without
  ``cluster=True`` both are the CTA-wide barrier);
- ``tma_load``: ``tma.async_copy_global_to_shared`` up to 3.7, ``tma.async_load`` from 3.8
  (3.9 keeps the old name only to raise);
- ``tma_store``: ``tma.async_copy_shared_to_global`` up to 3.7, ``tma.async_store`` from 3.8;
- ``cp_async_load`` (Ampere's ``cp.async`` gather into shared memory):
  ``async_copy.async_copy_global_to_shared`` up to 3.7, ``async_copy.async_load`` from 3.8.

Every other Gluon name our kernels use is spelled alike in 3.6 to 3.9, and every kernel variant
compiles for sm_90 under each; CI holds them to the compile tests' standard under the releases
the Gluon tier runs on (``flashinfer._core.kernel_tier``, ``python -m nox -s triton``).

The compiled launcher's protocol
--------------------------------
``CompiledKernel.run`` (Triton's ``CudaLauncher``) is called by ``JITFunction.run`` the same way in
3.4 to 3.9; what it hands its C launch is not: 3.6 passes the kernel's arguments flat after the
options, 3.7 to 3.9 pass them as one tuple after the options, the arguments' annotations and
the kernel's signature. :func:`direct_launch` finds out which, once per compiled kernel, by
calling a copy of the launcher whose C launch records its arguments, and tells a launcher it
does not recognise (:class:`DirectLaunch` is then None: the caller launches through
``kernel[grid]``). :func:`unwrap_tensordesc` does the same one level further in, for the wrapper
that expands host TMA descriptors before the C launch.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import warnings
from collections.abc import Callable

import triton

__all__ = [
    "DirectLaunch",
    "TensordescExpansion",
    "cp_async_load",
    "cta_barrier",
    "direct_launch",
    "is_descriptor",
    "tma_load",
    "tma_store",
    "unwrap_tensordesc",
]

try:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import tma
except ImportError:  # a Triton without Gluon's NVIDIA modules: the Gluon tier is off (kernel_tier)
    cta_barrier = tma_load = tma_store = cp_async_load = None
else:
    cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
    tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
    cp_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@dataclasses.dataclass(frozen=True)
class DirectLaunch:
    """How to call a compiled kernel's C launch: ``launch(gx, gy, gz, stream, *options, *args)``
    where ``packed`` is False, ``launch(gx, gy, gz, stream, *options, args)`` (one tuple) where
    it is True; ``args`` are the kernel's parameters in signature order, constexprs included."""

    launch: Callable
    options: tuple
    packed: bool


class _Marker:
    """A value the probe passes and looks for; nothing reads it."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<{self.name}>"


_GRID = (1_000_003, 1_000_033, 1_000_037)  # distinct from any option a launcher adds


def direct_launch(run, function, packed_metadata, count: int) -> DirectLaunch | None:
    """The direct call of ``run``'s C launch for a kernel of ``count`` parameters, or None.

    ``run`` is a compiled kernel's launcher (``CompiledKernel.run``), called by Triton as
    ``run(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook,
    exit_hook, *args)``. A copy of it whose ``launch`` records is called that way twice (no launch
    metadata, no hooks) with marker values; the C launch's protocol is recognised when the
    recording holds the grid, the stream and the function first, the packed metadata once among
    the options, the same option objects both times, and the markers of the arguments either
    last, in order (flat), or as the last value, one tuple in order (packed). None for anything
    else, and for a launcher that allocates scratch memory per launch (it must run itself); a
    launcher not recognised is said once per process, as a warning.
    """
    if getattr(run, "global_scratch_size", 0) or getattr(run, "profile_scratch_size", 0):
        return None
    found = _probe(run, function, packed_metadata, count)
    if found is None:
        _warn_unrecognised(run)
    return found


def _probe(run, function, packed_metadata, count: int) -> DirectLaunch | None:
    launch = getattr(run, "launch", None)
    if not callable(launch):
        return None
    stream, marked_function, metadata = _Marker("stream"), _Marker("function"), _Marker("metadata")
    args = tuple(_Marker(f"arg{i}") for i in range(count))
    recorded = []
    try:
        probe = copy.copy(run)
        probe.launch = lambda *a: recorded.append(a)
        for _ in range(2):
            probe(*_GRID, stream, marked_function, metadata, None, None, None, *args)
    except Exception:  # a launcher that cannot be called this way: not recognised
        return None
    if len(recorded) != 2:
        return None
    found = [_read_call(call, stream, marked_function, metadata, args) for call in recorded]
    if found[0] is None or found[1] is None or found[0][1] != found[1][1]:
        return None
    (options, packed), (again, _) = found
    if len(options) != len(again) or any(a is not b for a, b in zip(options, again)):
        return None  # an option made anew per call (an allocation) cannot be bound
    options = tuple(packed_metadata if o is metadata else o for o in options)
    return DirectLaunch(launch, (function, *options), packed)


_warned_unrecognised = False


def _warn_unrecognised(run) -> None:
    global _warned_unrecognised
    if _warned_unrecognised:
        return
    _warned_unrecognised = True
    warnings.warn(
        f"flashinfer: Triton {triton.__version__}'s compiled-kernel launcher ({type(run).__name__}) "
        "calls its C launch in a way this build does not recognise; kernels launch through "
        "kernel[grid] instead (correct, with more host time per launch)",
        RuntimeWarning,
        stacklevel=5,
    )


def _read_call(call: tuple, stream, function, metadata, args: tuple):
    # (options after the function, packed) of one recorded C launch, or None
    if len(call) < 5 or call[:3] != _GRID or call[3] is not stream or call[4] is not function:
        return None
    rest = call[5:]
    if rest and isinstance(rest[-1], tuple) and _same(rest[-1], args):
        options, packed = rest[:-1], True
    elif len(rest) >= len(args) and _same(rest[len(rest) - len(args) :], args):
        options, packed = rest[: len(rest) - len(args)], False
    else:
        return None
    markers = [o for o in options if isinstance(o, _Marker)]
    if len(markers) != 1 or markers[0] is not metadata:
        return None
    return options, packed


def _same(values: tuple, markers: tuple) -> bool:
    return len(values) == len(markers) and all(v is m for v, m in zip(values, markers))


@dataclasses.dataclass(frozen=True)
class TensordescExpansion:
    """Triton's wrapper that expands host TMA descriptors before the C launch, seen through.

    ``launch`` is the C launch under the wrapper (the same protocol as the wrapper, with each
    descriptor replaced by its expansion); ``expand(i, descriptor)`` is what the wrapper puts in
    the place of the ``i``-th descriptor parameter (its tensor map, then shape and strides)."""

    launch: Callable
    metadata: tuple
    encode: Callable

    def expand(self, i: int, descriptor) -> tuple:
        return tuple(self.encode(descriptor, self.metadata[i]))


def unwrap_tensordesc(wrapper, head: tuple, call: tuple, packed: bool):
    """The :class:`TensordescExpansion` of ``wrapper`` (a :class:`DirectLaunch`'s launch), or None.

    ``head`` is what a launch passes before the kernel's arguments (the grid, the stream and the
    launch's options), ``call`` its kernel arguments (signature order, its host descriptors in
    their places) and ``packed`` its protocol. Recognised when the wrapper holds its C launch and
    the descriptors' metadata (one each, none missing) and, called with that C launch recording,
    it passes exactly what expanding each descriptor here gives (the tensor maps compared by type:
    each encoding is a new object). The check runs the wrapper once, so it encodes each descriptor
    once.
    """
    try:
        cells = dict(zip(wrapper.__code__.co_freevars, (c.cell_contents for c in wrapper.__closure__)))
        c_launch, metadata = cells["launcher"], tuple(cells["tensordesc_meta"])
    except (AttributeError, TypeError, KeyError, ValueError):
        return None
    encode = _encoder(cells.get("make_tensordesc_arg"))
    positions = {i: n for n, i in enumerate(i for i, a in enumerate(call) if is_descriptor(type(a)))}
    if encode is None or not callable(c_launch) or len(metadata) != len(positions):
        return None
    if any(m is None for m in metadata):  # a descriptor Triton decomposes rather than encodes
        return None
    recorded = []
    closure = tuple(
        types.CellType(lambda *a: recorded.append(a)) if name == "launcher" else cell
        for name, cell in zip(wrapper.__code__.co_freevars, wrapper.__closure__)
    )
    probe = types.FunctionType(wrapper.__code__, wrapper.__globals__, wrapper.__name__, None, closure)
    expansion = TensordescExpansion(c_launch, metadata, encode)
    expected = []
    try:
        probe(*head, call) if packed else probe(*head, *call)
        for i, arg in enumerate(call):
            expected.extend(expansion.expand(positions[i], arg) if i in positions else (arg,))
    except Exception:
        return None
    if len(recorded) != 1:
        return None
    passed = recorded[0][-1] if packed else recorded[0][len(head) :]
    if len(passed) != len(expected) or not all(map(_alike, passed, expected)):
        return None
    return expansion


def _encoder(cell_value):
    # the release's make_tensordesc_arg: (descriptor, metadata) up to 3.7, a third, unused
    # argument (the launch's head) from 3.8, where the wrapper holds it in its closure
    encode = cell_value
    if encode is None:
        try:
            from triton.backends.nvidia.driver import make_tensordesc_arg as encode
        except ImportError:
            return None
    try:
        count = len(inspect.signature(encode).parameters)
    except (TypeError, ValueError):
        return None
    if count == 2:
        return encode
    if count == 3:
        return lambda descriptor, metadata: encode(descriptor, metadata, None)
    return None


def _alike(passed, expected) -> bool:
    if type(passed) is not type(expected):
        return False
    if isinstance(expected, (int, float, bool, str, type(None), tuple, list)):
        return passed == expected
    return True  # an encoded tensor map: a new object each time


def is_descriptor(t: type) -> bool:
    # Triton's and Gluon's host-side TMA descriptors (dataclasses with a block shape)
    return "block_shape" in getattr(t, "__dataclass_fields__", ())
