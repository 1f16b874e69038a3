"""The one layer between the op packages and Triton's launch: repeat launches without Triton's
per-call dispatch.

``kernel[grid](*args, **kw)`` re-derives the kernel's specialization from every argument on
every call (each pointer's 16-byte alignment, each integer's divisibility), builds a cache key
from it, looks the compiled kernel up, and its C launcher asks the driver about each pointer
(``cuPointerGetAttribute``). For kernels with 30-40 arguments that host work takes longer than
the kernel at small sizes (RoPE of one token, decode at batch 1): an eager call through
:class:`FastLaunch` and an autotuned GEMM through :class:`TunedLaunch` take tens of microseconds
less than through Triton's launch and Autotuner (the figures: ``benchmarks/host_time.py --section
launch``; ``benchmarks/RESULTS.md``, "Eager launches"). Inside a CUDA
graph none of this host work is paid; eager calls (warm-up, prefill, engines without graphs)
pay it on every call, hence this layer.

Rules
-----
- The key holds every argument's type, each tensor's dtype and its pointer's remainder mod 16,
  each TMA tensor descriptor's (host ``TensorDescriptor``) dtype, block shape and layout (all
  Triton specializes a descriptor on; the descriptor object itself is passed to the compiled
  launcher, which encodes it; a bound launch passes Triton's own encoding of it, kept by pointer
  and layout: :func:`_tma_arg`), every integer, bool and ``None`` by value (floats by type
  only; ``varying`` integers by divisibility by 16, equality to 1 and width), the keyword
  arguments (constexprs and launch options) and the device. That is at least as fine as
  Triton's own specialization, so the compiled kernel found is always the one Triton would have
  chosen. At most ``MAX_ENTRIES`` kernels (and tuned configs) are kept per launcher.
- Runtime arguments are passed positionally, constexprs and launch options by keyword.
- The first call of a key, and every call while a launch hook is set (profilers such as
  proton), under ``TRITON_INTERPRET=1``, with ``FLASHINFER_FAST_LAUNCH=0`` or on a Triton
  without ``triton.knobs`` (before 3.4), goes through ``kernel[grid]`` itself. At a compiled
  kernel's first launch, :func:`flashinfer._core.triton_compat.direct_launch` finds how its
  launcher calls its C launch (the argument protocol differs between releases); later launches
  call that C launch directly. A launcher it does not recognise, or one that allocates scratch
  memory per launch, keeps launching through ``kernel[grid]`` (the former with one warning:
  slower, never an error). ``tests/core/test_triton_launch.py`` runs every decision with the
  launcher stubbed and against the installed release's own launcher.
- The launch runs on the first tensor argument's device (a device guard when that is not the
  current device). Callers have validated that every tensor lives on that CUDA device: pointers
  are passed as integers, which the launcher does not check again.
- Triton's JIT launch also checks that globals a kernel reads have not changed since it was
  compiled; kernels launched here read only ``tl.constexpr`` globals.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import torch
from triton.compiler import CompiledKernel
from triton.runtime.jit import JITFunction

from . import triton_compat

try:
    from triton import knobs
    from triton.runtime import driver
except ImportError:  # Triton < 3.4: no launch hooks to read, another JIT launch
    knobs = None

__all__ = ["AUTOTUNED_LAUNCH", "FAST_LAUNCH_ENV", "FastLaunch", "MAX_ENTRIES", "TunedLaunch"]

MAX_ENTRIES = 256
MAX_TMA_ARGS = 4096  # encoded TMA descriptors kept for bound launches (:func:`_tma_arg`)
FAST_LAUNCH_ENV = "FLASHINFER_FAST_LAUNCH"  # "0": every launch through kernel[grid]
_JIT = "jit"  # a compiled-kernel entry that launches through kernel[grid] (not recognised)


def fast_launch_allowed() -> bool:
    """Whether launches may skip Triton's dispatch: a Triton with ``triton.knobs`` (3.4+) and
    ``FLASHINFER_FAST_LAUNCH`` not ``0`` (read when a :class:`FastLaunch` is made: the kernel
    modules make theirs at import)."""
    return knobs is not None and os.environ.get(FAST_LAUNCH_ENV, "1") != "0"


def _current_device() -> int:
    """The current CUDA device's index (what Triton's own launch runs on)."""
    return driver.active.get_current_device()


def _current_stream(device: int) -> int:
    """The raw handle of ``device``'s current stream."""
    return driver.active.get_current_stream(device)


def _bind_torch_device_queries() -> None:
    # Triton's CUDA driver answers both through torch, behind a lazy proxy and torch.cuda's
    # Python layer: the C functions themselves save about a microsecond a launch
    global _current_device, _current_stream
    get_device = getattr(torch._C, "_cuda_getDevice", None)
    get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get_device is not None and get_stream is not None:
        _current_device, _current_stream = get_device, get_stream


_is_descriptor = triton_compat.is_descriptor


def _descriptor_key(d) -> tuple:
    return d.base.dtype, tuple(d.block_shape), getattr(d, "layout", None), d.padding


def _make_prepare(types: tuple, varying: frozenset):
    """The function that turns an argument list of these ``types`` into ``(key, call arguments,
    first tensor or None)``: written out per type pattern, so that a launch does one Python call
    of straight-line code instead of a pass per kind of argument.

    Key (at least as fine as Triton's specialization): each tensor's dtype and pointer remainder
    mod 16; each descriptor's :func:`_descriptor_key`; each ``varying`` int's divisibility by 16,
    equality to 1 and width; every other int, bool and ``None`` by value; floats not at all (the
    pattern holds their type). Call arguments: tensors as their pointers, the rest as given.
    """
    names = [f"a{i}" for i in range(len(types))]
    lines, key, call = [], [], []
    for i, (name, t) in enumerate(zip(names, types)):
        if issubclass(t, torch.Tensor):
            lines.append(f"p{i} = {name}.data_ptr()")
            key += [f"{name}.dtype", f"p{i} & 15"]
            call.append(f"p{i}")
            continue
        call.append(name)
        if _is_descriptor(t):
            key.append(f"_descriptor_key({name})")
        elif i in varying and t is int:
            key.append(
                f"({name} & 15 == 0, {name} == 1, -2147483648 <= {name} < 2147483648, {name} < 1 << 63)"
            )
        elif t is not float:
            key.append(name)
    tensors = [n for n, t in zip(names, types) if issubclass(t, torch.Tensor)]
    body = "\n    ".join(
        [f"{', '.join(names)}{',' if len(names) == 1 else ''} = args" if names else "pass", *lines]
    )
    source = (
        f"def prepare(args):\n    {body}\n"
        f"    return ({''.join(k + ', ' for k in key)}), ({''.join(c + ', ' for c in call)}), "
        f"{tensors[0] if tensors else None}\n"
    )
    scope = {"_descriptor_key": _descriptor_key}
    exec(compile(source, f"<FastLaunch prepare {len(types)} arguments>", "exec"), scope)
    return scope["prepare"]


def _hooks_set() -> bool:
    # a profiler's launch hooks see every launch: such launches go through Triton's own. Triton
    # >= 3.5 keeps a chain of hooks (empty unless a profiler added one), 3.4 a hook or None; read
    # on every launch, so written out (helper calls cost a bound launch a tenth of its host time)
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(getattr(enter, "calls", enter) or getattr(leave, "calls", leave))


class FastLaunch:
    """A cache of one JIT kernel's compiled variants, launched without the JIT dispatcher.

    Parameters
    ----------
    kernel : triton.runtime.JITFunction
        The ``@triton.jit`` function. Anything else (an interpreted function, an autotuner) is
        always launched through ``kernel[grid]``.
    varying : tuple of str, optional
        Integer parameters that take many values (a row count): keyed by what Triton
        specializes on (divisibility by 16, the value 1, the width) instead of by value.

    Examples
    --------
    ``FastLaunch(add_kernel).launch((blocks,), x, y, out, n, BLOCK=1024, num_warps=4)`` runs what
    ``add_kernel[(blocks,)](x, y, out, n, BLOCK=1024, num_warps=4)`` runs.
    """

    def __init__(self, kernel, varying: tuple = ()):
        self.kernel = kernel
        self.enabled = isinstance(kernel, JITFunction) and fast_launch_allowed()
        names = [p.name for p in getattr(kernel, "params", ())]
        self._varying = frozenset(names.index(name) for name in varying) if self.enabled else frozenset()
        self._compiled: dict = {}
        self._patterns: dict = {}

    def launch(self, grid: tuple, *args, **kwargs) -> None:
        """Launch on ``grid`` (1 to 3 ints) with ``args`` positional and constexprs by keyword.

        Runs on the device of the first tensor argument (Triton itself launches on the current
        device, whatever the tensors' device is).
        """
        if not self.enabled:
            self.kernel[grid](*args, **kwargs)
            return
        types = tuple(map(type, args))
        prepare = self._patterns.get(types)
        if prepare is None:
            prepare = self._patterns[types] = _make_prepare(types, self._varying)
        key_args, call_args, first = prepare(args)
        device = _current_device()
        if first is not None and first.get_device() != device:
            with torch.cuda.device(first.device):
                self._launch(first.get_device(), prepare, key_args, call_args, grid, args, kwargs)
        else:
            self._launch(device, prepare, key_args, call_args, grid, args, kwargs)

    def _launch(self, device, prepare, key_args, call_args, grid, args, kwargs) -> None:
        if _hooks_set():
            self.kernel[grid](*args, **kwargs)
            return
        # the prepare function stands for the argument types (one per types, hashed by identity)
        key = (device, prepare, tuple(kwargs.items()), key_args)
        entry = self._compiled.get(key)
        if entry is None:
            self._compile_and_launch(key, grid, args, kwargs)
            return
        if entry is _JIT:
            self.kernel[grid](*args, **kwargs)
            return
        launch, options, constexprs, packed = entry
        stream = _current_stream(device)
        if packed:
            launch(*grid, *(1,) * (3 - len(grid)), stream, *options, (*call_args, *constexprs))
        else:
            launch(*grid, *(1,) * (3 - len(grid)), stream, *options, *call_args, *constexprs)

    def bind(self, grid: tuple, *args, **kwargs) -> Callable[..., None]:
        """Launch as :meth:`launch` does and return the launch, bound: a function that repeats
        it for other tensors.

        Called with the per-call tensors of a new call (in the order they take among ``args``; a
        TMA descriptor's place takes its base tensor), the bound launch launches the same kernel
        on the same grid with the same other arguments: each tensor's pointer goes where the bound
        one went, each descriptor's base where the bound descriptor's went (its shape, strides,
        block shape, layout and padding kept), through the compiled launcher directly. The caller
        guarantees the rest of what picks the compiled kernel and what it reads: that the grid,
        every other argument, each tensor's dtype and pointer remainder mod 16 and each
        descriptor's geometry are what its new call would pass (an op's call signature decides
        them all: ``flashinfer._core.replay``; the tensors a replay makes itself are views of the
        call's tensors, new allocations or scratch buffers of the same dtypes, whose pointers the
        caching allocator aligns to 512 bytes). The bound launch checks the device (current, and the first tensor's) and that no
        launch hook is set; otherwise it takes :meth:`launch` with the arguments put back
        together, as does every call where nothing compiled was found to bind (the JIT path,
        interpreted kernels, stubs). It keeps no reference to ``args``' tensors.
        """
        self.launch(grid, *args, **kwargs)
        entry = device = None
        prepare = self._patterns.get(tuple(map(type, args))) if self.enabled and not _hooks_set() else None
        if prepare is not None:  # else the launch took Triton's path: nothing compiled to bind
            key_args, call_args, first = prepare(args)
            device = _current_device() if first is None else first.get_device()
            entry = self._compiled.get((device, prepare, tuple(kwargs.items()), key_args))
        fallback = _fallback_launch(self, grid, args, kwargs)
        if entry is None or entry is _JIT:
            return fallback
        return _bound_launch(self, grid, args, (*call_args, *entry[2]), entry, device, fallback)

    def _compile_and_launch(self, key, grid, args, kwargs) -> None:
        compiled = self.kernel[grid](*args, **kwargs)
        if not isinstance(compiled, CompiledKernel):
            return
        # The compiled launcher takes every parameter in signature order, constexprs included.
        params = self.kernel.params[len(args) :]
        constexprs = tuple(kwargs[p.name] if p.name in kwargs else p.default for p in params)
        try:
            run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
        except AttributeError:  # another compiled-kernel class
            run = None
        direct = (
            None
            if run is None
            else triton_compat.direct_launch(run, function, metadata, len(self.kernel.params))
        )
        if direct is None:  # not recognised (said once), or it allocates scratch per launch
            entry = _JIT
        else:
            entry = (direct.launch, direct.options, constexprs, direct.packed)
        if len(self._compiled) >= MAX_ENTRIES:
            self._compiled.clear()
        self._compiled[key] = entry


def _with_base(descriptor, base):
    """A copy of the host TMA descriptor ``descriptor`` over the tensor ``base``."""
    copy = object.__new__(type(descriptor))
    copy.__dict__.update(descriptor.__dict__, base=base)
    return copy


def _without_base(descriptor):
    # a bound descriptor keeps its geometry, not its tensor
    return _with_base(descriptor, None)


def _fallback_launch(fast: FastLaunch, grid: tuple, args: tuple, kwargs: dict):
    """The bound launch through :meth:`FastLaunch.launch`: the per-call tensors put back in their
    places among ``args`` (a descriptor's over its base) for a call whose kernel would differ, or
    where nothing compiled was found to bind."""
    positions = [i for i, a in enumerate(args) if _per_call(a)]
    held = tuple(_without_base(a) if _is_descriptor(type(a)) else None if _per_call(a) else a for a in args)

    def fallback(*tensors) -> None:
        call = list(held)
        for position, tensor in zip(positions, tensors):
            call[position] = tensor if call[position] is None else _with_base(call[position], tensor)
        fast.launch(grid, *call, **kwargs)

    return fallback


def _bound_launch(fast: FastLaunch, grid: tuple, args: tuple, call_args: tuple, entry, device, fallback):
    """The bound launch as one written function of the per-call tensors, its constants bound by
    name, calling the compiled launcher directly (:meth:`FastLaunch.bind`); ``call_args`` are
    what the bound call passed its launcher (pointers for tensors, constexprs last)."""
    launch, options, constexprs, packed = entry
    unwrapped = None
    if any(map(_is_descriptor, map(type, args))):  # descriptors expanded here, encoded once per base
        head = (*grid, *(1,) * (3 - len(grid)), 0, *options)  # the stream: any value (nothing launches)
        unwrapped = triton_compat.unwrap_tensordesc(launch, head, call_args, packed)
    if unwrapped is not None:
        launch = unwrapped.launch
        descriptor_index = {
            i: n for n, i in enumerate(i for i, a in enumerate(args) if _is_descriptor(type(a)))
        }
    scope = {
        "_launch": launch,
        "_fallback": fallback,
        "_hooks_set": _hooks_set,
        "_device": device,
        "_tma_arg": _tma_arg,
        "_with_base": _with_base,
        "_module": sys.modules[__name__],  # its device queries, looked up at each call (tests stub them)
    }
    names, call = [], []
    for i, arg in enumerate(args):
        if not _per_call(arg):
            scope[f"a{i}"] = arg
            call.append(f"a{i}")
            continue
        t = f"t{len(names)}"
        names.append(t)
        if isinstance(arg, torch.Tensor):
            call.append(f"{t}.data_ptr()")
            continue
        # a TMA descriptor's place: its base tensor, the geometry bound
        descriptor = scope[f"d{i}"] = _without_base(arg)
        if unwrapped is None:  # the descriptor object (the launcher encodes it)
            call.append(f"_with_base(d{i}, {t})")
            continue
        n = descriptor_index[i]
        meta = unwrapped.metadata[n]
        # every field but the base (shape, strides, padding, the release's others) and the metadata
        geometry = _frozen((*((k, v) for k, v in vars(descriptor).items() if k != "base"), *meta.items()))
        scope[f"m{i}"] = descriptor, unwrapped, n, geometry
        call.append(f"*_tma_arg({t}, m{i})")
    for j, value in enumerate((*grid, *(1,) * (3 - len(grid)))):
        scope[f"g{j}"] = value
    head = ["g0", "g1", "g2", "_module._current_stream(_device)"]
    for j, value in enumerate(options):
        scope[f"o{j}"] = value
        head.append(f"o{j}")
    for j, value in enumerate(constexprs):
        scope[f"c{j}"] = value
        call.append(f"c{j}")
    device_guard = "_module._current_device() != _device" + (
        " or t0.get_device() != _device" if names else ""
    )
    params = ", ".join(names)
    arguments = [*head, f"({', '.join(call)},)"] if packed else [*head, *call]
    source = "\n    ".join(
        [
            f"def bound({params}):",
            f"if {device_guard} or _hooks_set():",
            f"    return _fallback({params})",
            f"_launch({', '.join(arguments)})",
        ]
    )
    name = getattr(fast.kernel, "__name__", "a kernel")
    exec(compile(source, f"<bound launch of {name}>", "exec"), scope)
    return scope["bound"]


_TMA_ARGS: dict = {}


def _tma_arg(base, slot: tuple) -> tuple:
    """Triton's expansion of a bound host TMA descriptor over ``base`` for its C launch (the
    release's ``make_tensordesc_arg``, through :class:`~.triton_compat.TensordescExpansion`),
    kept by all it reads: the base pointer and the bound ``slot``'s geometry and descriptor
    metadata (``slot``: the descriptor, the expansion, the descriptor's number among the
    kernel's, and the geometry as a key). Encoding a tensor map costs microseconds of host time;
    a decode step reads the same weights every step, and its activations come back at the same
    addresses."""
    key = (base.data_ptr(), slot[3])
    expanded = _TMA_ARGS.get(key)
    if expanded is None:
        if len(_TMA_ARGS) >= MAX_TMA_ARGS:
            _TMA_ARGS.clear()
        expanded = _TMA_ARGS[key] = slot[1].expand(slot[2], _with_base(slot[0], base))
    return expanded


def _frozen(value):
    # a hashable copy: lists and tuples as tuples, the rest as they are
    return tuple(map(_frozen, value)) if isinstance(value, (list, tuple)) else value


def _per_call(arg) -> bool:
    # what a bound launch takes anew on every call: tensors and TMA descriptors
    return isinstance(arg, torch.Tensor) or _is_descriptor(type(arg))


_bind_torch_device_queries()


# Triton's Autotuner keeps per-call state on the shared object (it sets ``nargs`` at the start of
# every call and clears it at the end), so calls from several threads at once corrupt each
# other ("'NoneType' object is not a mapping", found on the H200). Launches through the
# Autotuner hold this lock; an uncontended acquire costs well under a microsecond.
AUTOTUNED_LAUNCH = threading.Lock()


class TunedLaunch:
    """An autotuned kernel whose tuned config is then launched through :class:`FastLaunch`.

    The first call of a key runs Triton's Autotuner (which times the configs, under
    ``AUTOTUNED_LAUNCH``) and records the config it chose; later calls of the key launch that
    config through :class:`FastLaunch`, skipping the Autotuner's and the JIT's per-call
    dispatch. At most ``MAX_ENTRIES`` chosen configs are kept (a cleared key is tuned again,
    from the Autotuner's own cache).

    Parameters
    ----------
    tuned : triton.runtime.Autotuner
        The ``triton.autotune``-decorated kernel.
    varying : tuple of str, optional
        Integer parameters that take many values (see :class:`FastLaunch`).
    """

    def __init__(self, tuned, varying: tuple = ()):
        self.tuned = tuned
        self.fast = FastLaunch(tuned.fn, varying)
        self._chosen: dict = {}

    def launch(self, grid, key: tuple, *args, **constants) -> None:
        """Launch with the config tuned for ``key``.

        ``grid`` is a tuple or a function of the meta-parameters (as for ``kernel[grid]``).
        ``key`` must determine the Autotuner's choice and which configs are valid: its key
        arguments, the tensor dtypes and every constexpr in ``constants``.
        """
        chosen = self._chosen.get(key)
        if chosen is None:
            with AUTOTUNED_LAUNCH:
                self.tuned[grid](*args, **constants)
                chosen = self.tuned.best_config.all_kwargs()
            if len(self._chosen) >= MAX_ENTRIES:
                self._chosen.clear()
            self._chosen[key] = chosen
            return
        meta = {**constants, **chosen}
        self.fast.launch(grid(meta) if callable(grid) else grid, *args, **meta)
