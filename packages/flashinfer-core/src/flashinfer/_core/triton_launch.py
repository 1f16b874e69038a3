"""The one layer between the op packages and Triton's launch: repeat launches without Triton's
per-call dispatch.

``kernel[grid](*args, **kw)`` re-derives the kernel's specialization from every argument on
every call (each pointer's 16-byte alignment, each integer's divisibility), builds a cache key
from it, looks the compiled kernel up, and its C launcher asks the driver about each pointer
(``cuPointerGetAttribute``). For kernels with 30-40 arguments that host work takes longer than
the kernel at small sizes (RoPE of one token, decode at batch 1): an eager call through
:class:`FastLaunch` and an autotuned GEMM through :class:`TunedLaunch` take tens of microseconds
less than through Triton's launch and Autotuner (the figures: ``benchmarks/launch_overhead.py``;
``benchmarks/RESULTS.md``, "Eager launches"). Inside a CUDA
graph none of this host work is paid; eager calls (warm-up, prefill, engines without graphs)
pay it on every call, hence this layer.

Rules
-----
- The key holds every argument's type, each tensor's dtype and its pointer's remainder mod 16,
  each TMA tensor descriptor's (host ``TensorDescriptor``) dtype, block shape and layout (all
  Triton specializes a descriptor on; the descriptor object itself is passed to the compiled
  launcher, which encodes it), every integer, bool and ``None`` by value (floats by type only; ``varying`` integers by
  divisibility by 16, equality to 1 and width), the keyword arguments (constexprs and launch
  options) and the device. That is at least as fine as Triton's own specialization, so the
  compiled kernel found is always the one Triton would have chosen. At most ``MAX_ENTRIES``
  kernels (and tuned configs) are kept per launcher.
- Runtime arguments are passed positionally, constexprs and launch options by keyword.
- The first call of a key, and every call while a launch hook is set (profilers such as
  proton), under ``TRITON_INTERPRET=1`` or on a Triton outside ``SUPPORTED_TRITON``, goes
  through ``kernel[grid]`` itself. The protocol used (``CompiledKernel.run`` taking the grid,
  stream, function handle, packed metadata, launch metadata and the two hooks, then every
  parameter in signature order) is the one ``JITFunction.run`` itself uses in Triton 3.4 to
  3.9; ``tests/core/test_triton_launch.py`` checks it against the installed Triton's source and
  runs every decision with the launcher stubbed; it has run on 3.6 (H200).
- The launch runs on the first tensor argument's device (a device guard when that is not the
  current device). Callers have validated that every tensor lives on that CUDA device: pointers
  are passed as integers, which the launcher does not check again.
- Triton's JIT launch also checks that globals a kernel reads have not changed since it was
  compiled; kernels launched here read only ``tl.constexpr`` globals.
"""

from __future__ import annotations

import operator
import re
import threading

import torch
import triton
from triton.compiler import CompiledKernel
from triton.runtime.jit import JITFunction

try:
    from triton import knobs
    from triton.runtime import driver
except ImportError:  # Triton < 3.4: its compiled kernels take another argument list
    knobs = None

__all__ = ["AUTOTUNED_LAUNCH", "FastLaunch", "MAX_ENTRIES", "SUPPORTED_TRITON", "TunedLaunch"]

MAX_ENTRIES = 256
# (major, minor) of the first and last Triton whose launch protocol FastLaunch follows.
SUPPORTED_TRITON = ((3, 4), (3, 9))


def triton_version() -> tuple[int, int]:
    """``(major, minor)`` of the installed Triton (compared as numbers, never as strings)."""
    major, minor = re.match(r"(\d+)\.(\d+)", triton.__version__).groups()
    return int(major), int(minor)


def protocol_supported() -> bool:
    """Whether this Triton's compiled-kernel launch is the one :class:`FastLaunch` makes."""
    return knobs is not None and SUPPORTED_TRITON[0] <= triton_version() <= SUPPORTED_TRITON[1]


_DATA_PTR = torch.Tensor.data_ptr
_DTYPE = operator.attrgetter("dtype")
_REMAINDER_16 = (15).__and__


def _gather(positions: tuple):
    # a C-level gather that always returns a tuple (itemgetter returns a bare item for one)
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    return (lambda args: (args[positions[0]],)) if positions else (lambda args: ())


def _is_descriptor(t: type) -> bool:
    # Triton's and Gluon's host-side TMA descriptors (dataclasses with a block shape)
    return "block_shape" in getattr(t, "__dataclass_fields__", ())


def _descriptor_key(d) -> tuple:
    return d.base.dtype, tuple(d.block_shape), getattr(d, "layout", None), d.padding


def _int_class(x: int) -> tuple:
    # what Triton specializes an integer on (divisibility by 16, the value 1, its width)
    return x & 15 == 0, x == 1, -(2**31) <= x < 2**31, x < 2**63


class _ArgPattern:
    """Where the tensors, the value-keyed scalars (ints, bools, None) and the class-keyed
    integers (``varying``) sit in an argument list."""

    def __init__(self, types: tuple, varying: frozenset):
        def where(test):
            return tuple(i for i, t in enumerate(types) if test(i, t))

        self.tensor_positions = where(lambda i, t: issubclass(t, torch.Tensor))
        self.tensors = _gather(self.tensor_positions)
        self.descriptors = _gather(where(lambda i, t: _is_descriptor(t)))
        self.varying = _gather(where(lambda i, t: i in varying and t is int))
        self.scalars = _gather(
            where(
                lambda i, t: (
                    not issubclass(t, torch.Tensor)
                    and not _is_descriptor(t)
                    and t is not float
                    and not (i in varying and t is int)
                )
            )
        )


def _hooked(hook) -> bool:
    # Triton >= 3.5 keeps a chain of hooks (empty unless a profiler added one); 3.4 a hook or None
    return hook is not None and getattr(hook, "calls", True) != []


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
        self.enabled = isinstance(kernel, JITFunction) and protocol_supported()
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
        # The argument types pick the positions of tensors and of keyed scalars; the gathers
        # and maps below run in C, so the key costs a few microseconds for 30+ arguments.
        types = tuple(map(type, args))
        pattern = self._patterns.get(types)
        if pattern is None:
            pattern = self._patterns[types] = _ArgPattern(types, self._varying)
        tensors = pattern.tensors(args)
        device = driver.active.get_current_device()
        if tensors and tensors[0].get_device() != device:
            with torch.cuda.device(tensors[0].device):
                self._launch(tensors[0].get_device(), pattern, tensors, grid, args, kwargs)
        else:
            self._launch(device, pattern, tensors, grid, args, kwargs)

    def _launch(self, device, pattern, tensors, grid, args, kwargs) -> None:
        runtime = knobs.runtime
        if _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook):
            self.kernel[grid](*args, **kwargs)
            return
        ptrs = list(map(_DATA_PTR, tensors))
        # the pattern stands for the argument types (one pattern per types, hashed by identity)
        key = (
            device,
            pattern,
            tuple(kwargs.items()),
            tuple(map(_DTYPE, tensors)),
            tuple(map(_REMAINDER_16, ptrs)),
            pattern.scalars(args),
            tuple(map(_int_class, pattern.varying(args))),
            tuple(map(_descriptor_key, pattern.descriptors(args))),
        )
        entry = self._compiled.get(key)
        if entry is None:
            self._compile_and_launch(key, grid, args, kwargs)
            return
        run, function, packed_metadata, constexprs = entry
        call_args = list(args)
        for position, ptr in zip(pattern.tensor_positions, ptrs):
            call_args[position] = ptr
        stream = driver.active.get_current_stream(device)
        run(
            *grid,
            *(1,) * (3 - len(grid)),
            stream,
            function,
            packed_metadata,
            None,
            None,
            None,
            *call_args,
            *constexprs,
        )

    def _compile_and_launch(self, key, grid, args, kwargs) -> None:
        compiled = self.kernel[grid](*args, **kwargs)
        if not isinstance(compiled, CompiledKernel):
            return
        # The compiled launcher takes every parameter in signature order, constexprs included.
        params = self.kernel.params[len(args) :]
        constexprs = tuple(kwargs[p.name] if p.name in kwargs else p.default for p in params)
        if len(self._compiled) >= MAX_ENTRIES:
            self._compiled.clear()
        self._compiled[key] = (compiled.run, compiled.function, compiled.packed_metadata, constexprs)


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
