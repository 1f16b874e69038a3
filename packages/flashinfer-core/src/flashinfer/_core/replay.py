"""Repeating an eager call's launches when its call signature repeats: the host's fast path.

An engine outside a CUDA graph makes the same call in every layer of every step: the same
shapes, strides, dtypes and options, new tensors. Validation, the implementation's choices (tier,
tile, split) and the launch arguments are functions of what this module calls the *call
signature*; only the pointers change. So the first call of a signature runs the whole path and
its implementation returns a *replay* (a callable that repeats its launches, through
:meth:`~flashinfer._core.triton_launch.FastLaunch.bind`, for a record of the same signature); later
calls of the signature run the checks that read pointers (outputs overlapping inputs) and the
replay, nothing else.

Rules
-----
- A signature holds, for every tensor argument, its shape, strides, dtype, device and pointer
  remainder mod 16 (alignment picks kernels); every other argument by value; the kernel tier the
  environment asks for. Whatever the op's validation or implementation reads must be in it: so
  every parameter of the public function is, by name, unless the op's :class:`Replays` declares
  it ``unkeyed`` with the reason. ``tests/core/test_replay.py`` reads each op's fast path and fails
  when a parameter reaches neither its key nor that declaration (a parameter added later
  included).
- An op passes the signature in two parts: a *head* (the other arguments, which optional
  tensors are None: anything hashable) and its tensors. The tensors are checked by a guard built
  from the first call's (torch's own C++ tensor guard, the one ``torch.compile`` checks its
  inputs with: Python type, dispatch keys, dtype, device, ``requires_grad``, sizes and strides,
  in one call), their pointers' remainders mod 16 read beside it. Without that guard (another
  torch), a Python tuple of the same properties stands in.
- Only the implementation that returns a replay is replayed (the NVIDIA one, for the routes that
  have one); the reference and MATE return None and always run the whole path, and a call on a
  device they serve computes no signature (:meth:`Replays.serves`: no host time added there).
- Each op keeps its own :class:`Replays`, at most :data:`MAX_REPLAYS` signatures; it is emptied
  when the dispatch routing is replaced (``flashinfer._core.dispatch.ROUTING``: tests route CPU
  tensors to other implementations).
- A replay keeps no reference to the first call's tensors.
- ``FLASHINFER_EAGER_REPLAY=0`` (read once, at import) turns replays off: every call takes the
  whole path (A/B timing, or a way around a replay that misbehaves).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from . import dispatch
from .kernel_tier import requested_tier

__all__ = ["ENABLED", "MAX_REPLAYS", "OPS", "REPLAY_ENV", "Replay", "Replays"]

# what an implementation function returns for a call it can repeat: called with another record of
# the same call signature, it makes the same launches on that record's tensors
Replay = Callable[[tuple], None]

MAX_REPLAYS = 256
REPLAY_ENV = "FLASHINFER_EAGER_REPLAY"
ENABLED = os.environ.get(REPLAY_ENV, "1") not in ("0", "false", "False")


# signatures kept per head (calls that differ only in their tensors' layouts), newest first; ops
# put their leading tensor's shape in the head, so that batch sizes do not share a list
MAX_PER_HEAD = 4

try:
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # a torch without Dynamo's guards
    TensorGuards = None


class _PythonGuard:
    """What :func:`_guard` checks, in Python: each tensor's type, shape, strides, dtype, device and
    ``requires_grad`` (the stand-in where torch's guard is missing)."""

    def __init__(self, tensors: tuple):
        self._key = self._of(tensors)

    @staticmethod
    def _of(tensors: tuple) -> tuple:
        return tuple((type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad) for t in tensors)

    def check(self, *tensors) -> bool:
        try:
            return self._of(tensors) == self._key
        except (AttributeError, TypeError):
            return False


def _guard(tensors: tuple):
    """A guard of ``tensors``' properties: ``guard.check(*others)`` is True when ``others`` match
    them one by one (False for anything else, a non-tensor included)."""
    if TensorGuards is not None:
        try:
            return TensorGuards(
                *tensors,
                dynamic_dims_sizes=[list(t.shape) for t in tensors],
                dynamic_dims_strides=[list(t.stride()) for t in tensors],
            )
        except (TypeError, RuntimeError):  # another signature of the private class
            pass
    return _PythonGuard(tensors)


def _alignment(tensors: tuple):
    """The tensors' pointer remainders mod 16 (0 when all are aligned), or None where a guard
    must not look: a non-tensor, a nested tensor (torch's guard aborts the process on one)."""
    bits = 0
    try:
        for t in tensors:
            if t.is_nested:
                return None
            bits |= t.data_ptr()
    except (AttributeError, RuntimeError):
        return None
    return 0 if bits & 15 == 0 else tuple(t.data_ptr() & 15 for t in tensors)


# every op's Replays, by the public function's name
OPS: dict[str, Replays] = {}


class Replays:
    """One op's replays by call signature (bounded; emptied when the routing is replaced).

    Parameters
    ----------
    op : str, optional
        The public function whose calls are replayed (its name); None for a cache that is no
        op's (tests).
    unkeyed : mapping of str to str, optional
        Parameters of that function left out of the key, each with the reason it may be: none
        today.
    """

    def __init__(self, op: str | None = None, unkeyed: dict[str, str] | None = None):
        self.op, self.unkeyed = op, dict(unkeyed or {})
        if op is not None:
            OPS[op] = self
        self._reset()

    def _reset(self) -> None:
        self._routing, self._replays, self._serves, self._count = dispatch.ROUTING, {}, {}, 0
        self._serves_cpu = self._decide(torch.device("cpu"))

    @staticmethod
    def _decide(device) -> bool:
        return ENABLED and dispatch.implementation_kind(device) == "cuda"

    def serves(self, tensor) -> bool:
        """Whether calls on ``tensor``'s device may be replayed: the NVIDIA implementation serves
        it (the only one that returns replays). Decided once per device; a CPU tensor, whose
        reference path should pay nothing for replays elsewhere, is told without reading its
        device. False for a non-tensor (the op's checks say what is wrong with it)."""
        if self._routing is not dispatch.ROUTING:
            self._reset()
        try:
            if tensor.is_cpu:
                return self._serves_cpu
        except AttributeError:
            return False
        device = tensor.device
        try:
            return self._serves[device]
        except KeyError:
            serves = self._serves[device] = self._decide(device)
            return serves

    def find(self, head, tensors: tuple):
        """The replay recorded for this call signature, or None.

        ``head``: the signature's other arguments (hashable); ``tensors``: its tensors, in the
        op's fixed order (None for an unhashable head, a non-tensor or a nested tensor: the op's
        checks then say what is wrong)."""
        if self._routing is not dispatch.ROUTING:
            self._reset()
        try:
            entries = self._replays.get((head, requested_tier()))
        except TypeError:  # an unhashable argument
            return None
        if entries is None:
            return None
        alignment = _alignment(tensors)
        if alignment is None:
            return None
        try:
            for guard, aligned, replay in entries:
                if aligned == alignment and guard.check(*tensors):
                    return replay
        except TypeError:  # another count of tensors than the head's signatures hold
            pass
        return None

    def put(self, head, tensors: tuple, replay) -> None:
        """Record ``replay`` for the signature of ``head`` and ``tensors`` (the call that made it)."""
        alignment = _alignment(tensors)
        if alignment is None:
            return
        if self._count >= MAX_REPLAYS:
            self._replays.clear()
            self._count = 0
        try:
            entries = self._replays.setdefault((head, requested_tier()), [])
        except TypeError:  # an unhashable argument: nothing to find it by
            return
        if len(entries) >= MAX_PER_HEAD:
            entries.pop()
            self._count -= 1
        entries.insert(0, (_guard(tensors), alignment, replay))  # the newest is checked first
        self._count += 1
