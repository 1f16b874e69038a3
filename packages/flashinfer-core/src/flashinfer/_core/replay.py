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
  environment asks for. Whatever the op's validation or implementation reads must be in it.
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

__all__ = ["ENABLED", "MAX_REPLAYS", "REPLAY_ENV", "Replay", "Replays", "optional_tensor_key", "tensor_key"]

# what an implementation function returns for a call it can repeat: called with another record of
# the same call signature, it makes the same launches on that record's tensors
Replay = Callable[[tuple], None]

MAX_REPLAYS = 256
REPLAY_ENV = "FLASHINFER_EAGER_REPLAY"
ENABLED = os.environ.get(REPLAY_ENV, "1") not in ("0", "false", "False")


def tensor_key(t) -> tuple:
    """What a call signature holds of a tensor (AttributeError for a non-tensor)."""
    return t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15


def optional_tensor_key(t) -> tuple | None:
    """:func:`tensor_key`, or None for None."""
    return None if t is None else tensor_key(t)


class Replays:
    """One op's replays by call signature (bounded; emptied when the routing is replaced)."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self._routing, self._replays, self._serves = dispatch.ROUTING, {}, {}
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

    def key(self, *parts) -> tuple:
        """The signature: the op's ``parts`` and the kernel tier the environment asks for."""
        return (*parts, requested_tier())

    def get(self, key: tuple):
        """The replay recorded for ``key``, or None."""
        if self._routing is not dispatch.ROUTING:
            self._reset()
        return self._replays.get(key)

    def put(self, key: tuple, replay) -> None:
        """Record ``replay`` for ``key``."""
        if len(self._replays) >= MAX_REPLAYS:
            self._replays.clear()
        self._replays[key] = replay
