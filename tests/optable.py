"""The op table's schema (PyTorch's OpInfo idea) and the generic checks every entry goes through.

Two tables use it: ``tests/gemm_ops.py`` (the GEMM APIs) and ``tests/mla_ops.py`` (RoPE + FP8
quantize, MLA decode on every cache form). Per public function an :class:`OpInfo` lists sample
inputs (small, degenerate, real-model-like; fresh random data drawn when a test builds them),
error inputs with the expected exception type and a message pattern naming the argument, the
backend names, and how to compare a result with its float64 oracle (``tests/oracles.py``, which
also states the tolerance rules). The generic tests run every entry against every
implementation:

- ``reference``: the float32 PyTorch implementation (CPU tensors; ``tests/{gemm,mla}``);
- ``mate``: the MATE adapter over the float64 MATE stand-in (``tests/standin``; CPU tensors
  routed to ``_mate``; ``tests/{gemm,mla}``);
- ``cuda``: the CUDA implementation on a CUDA device (``tests/gpu/test_optable_cuda.py``):
  the sample's tensors are copied to the GPU with their strides and aliasing kept, the oracle
  stays float64 (on the CPU; the real-size rows compute theirs on the GPU), and the tolerance
  adds the tensor cores' slack (:data:`CUDA_SLACK`). An op whose CUDA path has a Gluon kernel
  lists the kernel tiers that differ (:attr:`OpInfo.tiers`): its samples run once per tier
  (``cuda-gluon``, ``cuda-tl``; :func:`use_tier` sets ``FLASHINFER_KERNEL_TIER`` for the test).
  The op's :attr:`OpInfo.cuda_samples` are rows at real model sizes that only the GPU runs
  (the reference, the MATE stand-in and the interpreter would take minutes); the longest are
  marked ``slow``. Every error input also runs on ``cuda``, its tensors copied to the GPU.
  Without a GPU, the same implementation on CPU tensors with its Triton kernels interpreted
  (``tests/{gemm,mla}/triton/test_*_table_interpreted.py``, routed by
  ``tests/triton_interpreter.py``), for every op that has Triton kernels, same rules, small
  rows only.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import pytest
import torch
from oracles import poison

# The CUDA implementation's extra slack, in units of the result's rms (``oracles.assert_matches``):
# Hopper's tensor cores accumulate FP8 products with fewer bits than float32 (per-tensor FP8: the
# whole k, as cuBLAS's fast accumulation; block-scaled FP8: within each 128-wide K block), and
# cuBLAS may reduce 16-bit split-K partial sums in 16 bits. The same numbers as the hand-written
# GPU suites (``tests/gpu``). RoPE and decode compare by their own tensor-core rule
# (``oracles.assert_fp8_close`` / ``assert_decode_close`` with ``tensor_cores=True``).
CUDA_SLACK = {
    "bmm_bf16": 4e-3,
    "bmm_fp8": 2e-2,
    "gemm_fp8_nt_groupwise": 2e-3,
    "group_deepgemm_fp8_nt_groupwise": 2e-3,
    "batch_deepgemm_fp8_nt_groupwise": 2e-3,
    "gemm_fp8_nt_blockscaled": 2e-3,
    "group_gemm_fp8_nt_groupwise": 2e-3,
    "fp8_blockscale_gemm_sm90": 2e-3,
}

# Where the table runs on a CPU-only machine (``tests/{gemm,mla}``); ``cuda`` needs a GPU.
CPU_IMPLEMENTATIONS = ("reference", "mate")


@dataclass
class Sample:
    """One call: positional args and kwargs, the float64 expectation, the caller-given outputs."""

    name: str
    args: tuple
    kwargs: dict
    expected: Callable  # () -> what the op's compare takes (computed on first use, on the CPU)
    outputs: tuple = ()  # kwargs holding caller buffers: poisoned first, returned as given
    extra: dict = field(default_factory=dict)  # what an op's compare needs besides (valid rows, ...)
    _oracle: object = None

    def oracle(self):
        if self._oracle is None:
            self._oracle = self.expected()
        return self._oracle


@dataclass
class Entry:
    """A table row whose (random) data is drawn only when a test builds it."""

    name: str
    build: Callable[[], Sample]
    slow: bool = False  # a real-size row of the long tail: the ``gpu-slow`` session runs it


@dataclass
class ErrorInput:
    """A bad call: the exception type and a regex its message must match (``re.search``)."""

    name: str
    build: Callable[[], tuple]  # () -> (args, kwargs)
    exc: type | tuple
    match: str


@dataclass
class OpInfo:
    name: str
    fn: Callable
    samples: Callable[[], list]  # -> [Entry]
    errors: Callable[[], list]  # -> [ErrorInput]
    compare: Callable  # (result, call: Sample, slack: float, tensor_cores: bool) -> None
    backends: tuple = ()
    # (call: Sample, calls) -> None: what the MATE adapter must have called (the stand-in's
    # record); by default exactly one MATE call
    mate_call: Callable | None = None
    # the CUDA implementation runs Triton kernels for it (else library calls only, e.g. cuBLAS),
    # so it also runs under the interpreter on a CPU
    interpreted: bool = True
    # the kernel tiers (``FLASHINFER_KERNEL_TIER``) whose CUDA kernels differ for this op: its
    # CUDA path reaches a Gluon kernel (``use_gluon`` in ``flashinfer/*/_cuda.py``); () = one run
    tiers: tuple = ()
    # -> [Entry]: rows at real model sizes, run by the ``cuda`` implementation only
    cuda_samples: Callable[[], list] = list
    # the tensor arguments that have no None form, and the exception a None there raises: each
    # gets an error row (:func:`none_inputs`) whose message must name it
    required: tuple = ()
    none_exc: type = TypeError
    # the CUDA implementation repeats a serving call's launches when its call signature repeats
    # (``flashinfer._core.replay``): the interpreted tables run each sample twice
    replayed: bool = False

    def error_inputs(self) -> list:
        """The table's error inputs, then one ``none-<arg>`` row per :attr:`required` argument."""
        return [*self.errors(), *none_inputs(self)]


def none_inputs(op: OpInfo) -> list:
    """``op``'s first sample with one :attr:`OpInfo.required` argument given as None (by keyword),
    per argument: the op must name it (``expected a torch.Tensor for `arg`, got None``), not fail
    reading it with an ``AttributeError``."""

    def call(arg):
        sample = op.samples()[0].build()
        bound = inspect.signature(op.fn).bind(*sample.args, **sample.kwargs).arguments
        return (), {**bound, arg: None}

    return [
        ErrorInput(f"none-{arg}", partial(call, arg), op.none_exc, f"for `{arg}`, got None")
        for arg in op.required
    ]


def sample_params(ops, implementations=CPU_IMPLEMENTATIONS) -> list:
    """``pytest.param(implementation, op, entry name)`` for every (small) sample of every op."""
    return [
        pytest.param(impl, op, entry.name, id=f"{impl}-{op.name}-{entry.name}")
        for impl in implementations
        for op in ops
        for entry in op.samples()
    ]


def cuda_implementations(op: OpInfo) -> list:
    """``cuda-<tier>`` for each kernel tier of ``op``, or plain ``cuda``."""
    return [f"cuda-{tier}" for tier in op.tiers] or ["cuda"]


def cuda_sample_params(ops) -> list:
    """The ``cuda`` implementation's params: every sample, the real-size rows included (the
    long tail marked ``slow``), once per kernel tier of the op."""
    return [
        pytest.param(
            impl,
            op,
            entry.name,
            id=f"{impl}-{op.name}-{entry.name}",
            marks=[pytest.mark.slow] if entry.slow else [],
        )  # fmt: skip
        for op in ops
        for entry in [*op.samples(), *op.cuda_samples()]
        for impl in cuda_implementations(op)
    ]


def use_tier(implementation: str, monkeypatch) -> None:
    """Select the kernel tier named by ``implementation`` (``cuda-gluon``, ``cuda-tl``; plain
    ``cuda``: the default, ``auto``) for the rest of the test; skip the Gluon tier where its
    kernels cannot run (``kernel_tier.gluon_supported``)."""
    from flashinfer._core.kernel_tier import KERNEL_TIER_ENV, gluon_supported

    tier = implementation.partition("-")[2]
    if not tier:
        monkeypatch.delenv(KERNEL_TIER_ENV, raising=False)
        return
    if tier == "gluon" and not gluon_supported(torch.cuda.current_device()):
        pytest.skip("the Gluon tier runs on compute capability 9.0 with the Triton versions of kernel_tier")
    monkeypatch.setenv(KERNEL_TIER_ENV, tier)


def error_params(ops, implementations=CPU_IMPLEMENTATIONS) -> list:
    return [
        pytest.param(impl, op, error.name, id=f"{impl}-{op.name}-{error.name}")
        for impl in implementations
        for op in ops
        for error in op.error_inputs()
    ]


def build(op: OpInfo, name: str) -> Sample:
    """The sample ``name`` of ``op`` (a real-size row too), its random data drawn now."""
    entry = next((e for e in op.samples() if e.name == name), None)
    if entry is None:
        entry = next(e for e in op.cuda_samples() if e.name == name)
    return entry.build()


def error_named(op: OpInfo, name: str) -> ErrorInput:
    return next(e for e in op.error_inputs() if e.name == name)


# ----------------------------------------------------------------------------- running a sample


def to_device(sample: Sample, device) -> Sample:
    """The sample with every tensor copied to ``device``: strides, storage offsets and aliasing
    (outputs that are slices of one fused buffer) kept; the oracle keeps the CPU inputs."""
    if torch.device(device).type == "cpu":
        return sample
    args, kwargs = moved_to(device, sample.args, sample.kwargs)
    return replace(sample, args=args, kwargs=kwargs)


def moved_to(device, args, kwargs, copy: bool = False) -> tuple:
    """``(args, kwargs)`` with every tensor (in lists and tuples too) copied to ``device`` as
    :func:`to_device` does (``copy``: into new memory even on the same device); ``meta`` tensors
    (the "other device" of error inputs) stay."""
    storages = {}

    def move(value):
        if isinstance(value, (list, tuple)):
            return type(value)(move(v) for v in value)
        if not isinstance(value, torch.Tensor) or value.device.type == "meta":
            return value
        key = value.untyped_storage().data_ptr()
        if key not in storages:
            raw = torch.empty(0, dtype=torch.uint8).set_(value.untyped_storage())
            storages[key] = (raw.clone() if copy else raw.to(device)).untyped_storage()
        moved = torch.empty(0, dtype=value.dtype, device=device)
        return moved.set_(storages[key], value.storage_offset(), value.shape, value.stride())

    return move(tuple(args)), {k: move(v) for k, v in kwargs.items()}


def run_sample(op: OpInfo, sample: Sample, device="cpu", slack=0.0, tensor_cores=None, **changes):
    """Call the op on the sample (``changes`` replace kwargs; outputs poisoned first), check that
    caller buffers come back as given, and compare with the oracle (``tensor_cores``: by the
    CUDA implementation's rules; by default where ``device`` is not the CPU)."""
    call = to_device(sample, device)
    for name in call.outputs:
        poison(call.kwargs[name])
    result = op.fn(*call.args, **{**call.kwargs, **changes})
    returned = result if isinstance(result, tuple) else (result,)
    for name in call.outputs:
        if name not in changes:
            assert any(r is call.kwargs[name] for r in returned), (
                f"`{name}` is not returned as the given buffer"
            )
    if tensor_cores is None:
        tensor_cores = torch.device(device).type != "cpu"
    op.compare(result, call, slack, tensor_cores)
    return result


# ----------------------------------------------------------------------------- running an error


def _tensors(values) -> list:
    found = []
    for value in values:
        if isinstance(value, (list, tuple)):
            found += _tensors(value)
        elif isinstance(value, torch.Tensor) and value.device.type != "meta":
            found.append(value)
    return found


def _same(now: torch.Tensor, saved: torch.Tensor) -> bool:
    if now.dtype.is_floating_point:  # buffers may hold NaN (torch.empty): compare with NaN == NaN
        return torch.equal(now.float().nan_to_num(123.0), saved.float().nan_to_num(123.0))
    return torch.equal(now, saved)


def raises_before_any_write(op: OpInfo, error: ErrorInput, device="cpu") -> None:
    """The call raises the expected exception with a message matching the pattern, and no caller
    tensor was written before (``device``: the error input's tensors copied there first, as
    :func:`to_device` copies a sample's)."""
    args, kwargs = error.build()
    if torch.device(device).type != "cpu":
        args, kwargs = moved_to(device, args, kwargs)
    tensors = _tensors([*args, *kwargs.values()])
    before = [t.clone() for t in tensors]
    with pytest.raises(error.exc) as raised:
        op.fn(*args, **kwargs)
    message = str(raised.value)
    assert re.search(error.match, message), (error.match, message)
    # one style for shapes in every message: (2, 3), as upstream's Python checks print them
    assert "torch.Size(" not in message, message
    for now, saved in zip(tensors, before):
        assert _same(now, saved), f"{op.name}: a caller tensor was written before `{error.name}` was rejected"


def run_sample_twice(op: OpInfo, name: str, device="cpu", slack=0.0, tensor_cores=None) -> bool:
    """Run the sample, then the same call again on new memory (every tensor copied, strides,
    offsets and aliasing kept; the outputs poisoned again): a replay the first call left
    (``flashinfer._core.replay``) must serve the second, which must match the oracle too (a replay
    that launched on the first call's memory leaves the new outputs poisoned). Returns whether a
    replay served it."""
    from flashinfer._core.replay import Replays

    recorded, served, lookup = [], [], Replays.find
    put = Replays.put

    def find(self, head, tensors):
        found = lookup(self, head, tensors)
        served.append(found is not None)
        return found

    def kept(self, head, tensors, replay):
        recorded.append(head)
        put(self, head, tensors, replay)

    Replays.find, Replays.put = find, kept
    try:
        sample = build(op, name)
        run_sample(op, sample, device, slack, tensor_cores)
        if torch.device(device).type == "cpu":  # (run_sample copies the sample to another device)
            args, kwargs = moved_to("cpu", sample.args, sample.kwargs, copy=True)
            sample = replace(sample, args=args, kwargs=kwargs)
        served.clear()
        run_sample(op, sample, device, slack, tensor_cores)
    finally:
        Replays.find, Replays.put = lookup, put
    assert not recorded or any(served), "a replay was recorded and the repeated call did not take it"
    return any(served)
