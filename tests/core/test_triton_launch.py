"""FastLaunch's keying and argument handling, with Triton's JIT launch and driver stubbed.

The real launches (results equal to ``kernel[grid]``, alignments, CUDA graphs) are tested on a
GPU in ``tests/gpu``; here a recording kernel stands in for the JIT path and a recording
function for the compiled launcher, so every decision of the fast path is visible on CPU.
"""

from __future__ import annotations

import types

import pytest
import torch
import triton
import triton.language as tl
from triton.compiler import CompiledKernel
from triton.runtime.jit import JITFunction

from flashinfer._core import triton_launch

STREAM = 777


def scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, EVEN: tl.constexpr = True):
    pass


class FakeLauncher:
    """A compiled kernel's launcher as Triton's ``CudaLauncher`` is one: called with the grid, the
    stream, the function, the packed metadata, the launch metadata, the two hooks and every
    parameter, it calls its C launch (``launch``) in one of the releases' two protocols: ``flat``
    (3.6: the options, then the parameters) or ``packed`` (3.7-3.9: the options, the arguments'
    annotations and the kernel's signature, then the parameters as one tuple). ``calls`` holds each
    C launch brought back to the form the launcher is called in (the C launch's own options
    checked and dropped)."""

    launch_cooperative_grid, launch_pdl = "coop", "pdl"

    def __init__(self, protocol="flat", scratch=0):
        self.protocol = protocol
        self.global_scratch_size = self.profile_scratch_size = scratch
        self.calls = []
        self.launch = self.c_launch

    def c_launch(self, *a):
        if self.protocol == "flat":
            assert a[5:9] == ("coop", "pdl", None, None)
            self.calls.append((*a[:5], *a[9:]))
        else:
            assert a[5:7] == ("coop", "pdl") and a[11:15] == (None, None, "annotations", "signature")
            assert len(a) == 16 and isinstance(a[15], tuple)
            self.calls.append((*a[:5], *a[7:11], *a[15]))

    def __call__(self, gx, gy, gz, stream, function, *args):
        if self.protocol == "flat":
            self.launch(gx, gy, gz, stream, function, "coop", "pdl", None, None, *args)
        else:
            metadata, kernel_args = args[:4], args[4:]
            self.launch(gx, gy, gz, stream, function, "coop", "pdl", *metadata, None, None,
                        "annotations", "signature", kernel_args)  # fmt: skip


class FakeCompiled(CompiledKernel):
    run = None  # shadows the property: the test sets a launcher

    def __init__(self, launcher):
        self.run, self.function, self.packed_metadata = launcher, "function-handle", "packed"
        self.module = None  # nothing loaded: CompiledKernel.__del__ unloads nothing


class RecordingKernel(JITFunction):
    """A JIT function whose ``[grid]`` launch records its call and returns a fake compiled kernel;
    ``fast_calls`` are the launches that reached its launcher's C launch directly."""

    def __init__(self, fn, protocol="flat"):
        super().__init__(fn)
        self.jit_calls = []
        self.compiled = FakeCompiled(FakeLauncher(protocol))

    @property
    def fast_calls(self):
        return self.compiled.run.calls

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.jit_calls.append((grid, args, kwargs))
            return self.compiled

        return launch


@pytest.fixture(params=["flat", "packed"])
def kernel(monkeypatch, request):
    # the current device is the CPU tensors' own (-1), as a CUDA launch's is its tensors' device
    monkeypatch.setattr(triton_launch, "_current_device", lambda: -1)
    monkeypatch.setattr(triton_launch, "_current_stream", lambda device: STREAM)
    for hook in ("launch_enter_hook", "launch_exit_hook"):  # this Triton's "no hook" (None or an empty chain)
        monkeypatch.setattr(triton_launch.knobs.runtime, hook, getattr(triton_launch.knobs.runtime, hook))
    return RecordingKernel(scale_kernel, request.param)


def test_first_call_compiles_then_launches_with_raw_pointers(kernel):
    fast = triton_launch.FastLaunch(kernel)
    assert fast.enabled
    x, out = torch.randn(64), torch.empty(64)
    fast.launch((4,), x, out, 64, 0.5, BLOCK=16, num_warps=4)
    assert len(kernel.jit_calls) == 1 and kernel.fast_calls == []
    assert kernel.jit_calls[0][1][0] is x  # the JIT path gets the tensors themselves

    x2, out2 = torch.randn(64), torch.empty(64)
    fast.launch((4, 2), x2, out2, 64, 2.0, BLOCK=16, num_warps=4)
    assert len(kernel.jit_calls) == 1
    (call,) = kernel.fast_calls
    # grid padded to 3, the stream, the compiled handles, no launch metadata or hooks, then every
    # parameter in signature order: raw pointers, integers, floats, constexprs (EVEN's default)
    assert call == (4, 2, 1, STREAM, "function-handle", "packed", None, None, None,
                    x2.data_ptr(), out2.data_ptr(), 64, 2.0, 16, True)  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda a: {**a, "x": a["x"].view(torch.uint8)[1:].view(torch.uint8)}, id="misaligned"),
        pytest.param(lambda a: {**a, "x": a["x"].double()}, id="dtype"),
        pytest.param(lambda a: {**a, "n": 48}, id="int-value"),
        pytest.param(lambda a: {**a, "scale": 2}, id="int-for-float"),
        pytest.param(lambda a: {**a, "BLOCK": 32}, id="constexpr"),
        pytest.param(lambda a: {**a, "num_warps": 8}, id="option"),
    ],
)
def test_any_specialization_change_goes_back_to_the_jit_path(kernel, change):
    fast = triton_launch.FastLaunch(kernel)
    base = {"x": torch.randn(64), "n": 64, "scale": 0.5, "BLOCK": 16, "num_warps": 4}

    def call(a):
        fast.launch(
            (1,), a["x"], torch.empty(64), a["n"], a["scale"], BLOCK=a["BLOCK"], num_warps=a["num_warps"]
        )

    call(base)
    call(change(base))
    assert len(kernel.jit_calls) == 2 and kernel.fast_calls == []
    call(change(base))
    assert len(kernel.fast_calls) == 1


def test_tensors_on_another_device_launch_there_under_a_guard(kernel, monkeypatch):
    entered = []

    class Guard:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(self.device)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(triton_launch.torch.cuda, "device", Guard)
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    assert entered == []  # on the current device: no guard
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 1)
    fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    assert entered == [x.device]
    # keyed by the tensors' device (-1 here): the second call took the cached kernel
    assert len(kernel.jit_calls) == 1 and len(kernel.fast_calls) == 1


def test_no_hook_by_default():
    assert not triton_launch._hooks_set()


@pytest.mark.parametrize("hook", ["launch_enter_hook", "launch_exit_hook"])
@pytest.mark.parametrize("form", ["function", "chain"])
def test_a_launch_hook_keeps_every_call_on_the_jit_path(kernel, monkeypatch, hook, form):
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == 1 and len(kernel.fast_calls) == 1
    profiler_hook = lambda metadata: None  # noqa: E731
    # Triton 3.4 holds a function or None; 3.5+ a chain of hooks that profilers add to
    value = profiler_hook if form == "function" else types.SimpleNamespace(calls=[profiler_hook])
    monkeypatch.setattr(triton_launch.knobs.runtime, hook, value)
    for _ in range(3):
        fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == 4 and len(kernel.fast_calls) == 1


def test_the_cache_is_bounded(kernel, monkeypatch):
    monkeypatch.setattr(triton_launch, "MAX_ENTRIES", 2)
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    for n in (8, 16, 24):
        fast.launch((1,), x, out, n, 1.0, BLOCK=8)
    assert len(fast._compiled) == 1  # cleared when full, then the third key stored


def test_a_launch_that_returns_no_compiled_kernel_is_not_cached(kernel):
    kernel.compiled = None  # e.g. another Triton's return value
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    for _ in range(2):
        fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == 2 and fast._compiled == {}


def test_interpreted_and_autotuned_kernels_always_take_their_own_launch():
    from triton.runtime.interpreter import InterpretedFunction

    interpreted = InterpretedFunction(scale_kernel)
    assert not triton_launch.FastLaunch(interpreted).enabled
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 8})], key=["n"])(JITFunction(scale_kernel))
    assert not triton_launch.FastLaunch(tuned).enabled


def test_a_tensor_where_a_float_was_compiles_anew_and_passes_its_pointer(kernel):
    fast = triton_launch.FastLaunch(kernel)
    x, out, scale = torch.randn(8), torch.empty(8), torch.ones(())
    for _ in range(2):
        fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    for _ in range(2):
        fast.launch((1,), x, out, 8, scale, BLOCK=8)
    assert len(kernel.jit_calls) == 2 and len(kernel.fast_calls) == 2
    assert kernel.fast_calls[1][9:13] == (x.data_ptr(), out.data_ptr(), 8, scale.data_ptr())


@pytest.mark.parametrize("count", [0, 1, 3])
def test_prepare_splits_any_argument_count(count):
    # the written-out function unpacks 0, 1 or several arguments (one-element tuples need a comma)
    x = torch.randn(4)
    args = (x, 7, 0.5)[:count]
    prepare = triton_launch._make_prepare(tuple(map(type, args)), frozenset())
    key, call, first = prepare(args)
    assert call == (x.data_ptr(), 7, 0.5)[:count]
    assert key == (x.dtype, x.data_ptr() & 15, 7)[: {0: 0, 1: 2, 3: 3}[count]]
    assert first is (x if count else None)


def test_each_protocol_reaches_the_c_launch_with_the_options_found(kernel):
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    for _ in range(2):
        fast.launch((2,), x, out, 8, 1.0, BLOCK=8)
    # the probe launched nothing; FakeLauncher.c_launch checks the C launch's own options
    assert len(kernel.jit_calls) == 1
    assert kernel.fast_calls == [
        (2, 1, 1, STREAM, "function-handle", "packed", None, None, None, x.data_ptr(), out.data_ptr(), 8, 1.0, 8, True)
    ]  # fmt: skip


@pytest.mark.parametrize("scratch", ["global", "profile"])
def test_a_launcher_with_scratch_memory_keeps_tritons_own_launch(kernel, scratch, recwarn):
    setattr(kernel.compiled.run, f"{scratch}_scratch_size", 256)  # Triton allocates it per launch
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    for _ in range(3):
        fast.launch((2,), x, out, 8, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == 3 and kernel.fast_calls == []
    assert not [w for w in recwarn if "flashinfer" in str(w.message)]  # not an unrecognised launcher


class ReorderingLauncher(FakeLauncher):
    """A launcher of some future release: its C launch takes the arguments in another order."""

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.launch(stream, function, gx, gy, gz, *args)


@pytest.mark.parametrize(
    "launcher", [ReorderingLauncher(), object(), lambda *a: None], ids=["reordering", "no-launch", "function"]
)
def test_an_unrecognised_launcher_launches_through_the_jit_path_with_one_warning(
    kernel, monkeypatch, launcher
):
    monkeypatch.setattr(triton_launch.triton_compat, "_warned_unrecognised", False)
    kernel.compiled.run = launcher
    x, out = torch.randn(8), torch.empty(8)
    with pytest.warns(RuntimeWarning, match="does not recognise") as caught:
        for fast in (triton_launch.FastLaunch(kernel), triton_launch.FastLaunch(kernel)):
            for _ in range(2):
                fast.launch((2,), x, out, 8, 1.0, BLOCK=8)
            bound = fast.bind((2,), x, out, 8, 1.0, BLOCK=8)
            bound(x, out)
    assert len([w for w in caught if "flashinfer" in str(w.message)]) == 1
    # every launch, the bound one's too, is kernel[grid] with the caller's own arguments
    assert kernel.jit_calls == [((2,), (x, out, 8, 1.0), {"BLOCK": 8})] * 8
    assert getattr(launcher, "calls", []) == []


def test_fast_launch_env_zero_turns_the_direct_call_off(kernel, monkeypatch):
    monkeypatch.setenv(triton_launch.FAST_LAUNCH_ENV, "0")
    fast = triton_launch.FastLaunch(kernel)
    assert not fast.enabled
    x, out = torch.randn(8), torch.empty(8)
    for _ in range(2):
        fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == 2 and kernel.fast_calls == []
    monkeypatch.setenv(triton_launch.FAST_LAUNCH_ENV, "1")
    assert triton_launch.FastLaunch(kernel).enabled


def stub_driver(monkeypatch, **utils):
    """Triton's active driver (none on a machine without a GPU) as a stand-in with ``utils``."""
    import triton.runtime

    monkeypatch.setattr(
        triton.runtime.driver, "_active", types.SimpleNamespace(utils=types.SimpleNamespace(**utils))
    )


def as_triton_calls(launcher, grid, *args):
    """Call ``launcher`` as ``JITFunction.run`` calls a compiled kernel's (no launch metadata or hooks)."""
    launcher(*grid, STREAM, "function-handle", "packed", None, None, None, *args)


def installed_launcher(c_launch):
    """The installed release's own ``CudaLauncher`` without its compiled module (no GPU here):
    the attributes its ``__init__`` sets for a kernel without scratch memory, ``c_launch`` as its
    C launch. Its ``__call__`` is the release's own code."""
    from triton.backends.nvidia.driver import CudaLauncher

    launcher = object.__new__(CudaLauncher)
    launcher.__dict__.update(
        launch=c_launch, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
        profile_scratch_align=1, launch_cooperative_grid=False, launch_pdl=False, num_ctas=1,
        arg_annotations=("annotations",), kernel_signature=b"signature", gsan_enabled=False,
    )  # fmt: skip
    return launcher


def test_the_installed_tritons_launcher_is_recognised_and_called_as_it_calls_its_c_launch(
    kernel, monkeypatch
):
    """The protocol found for this release's ``CudaLauncher``: the direct call passes its C launch
    exactly what the launcher's own call does. 3.6 passes the parameters flat, 3.7-3.9 as a tuple."""
    stub_driver(monkeypatch)
    c_calls = []
    launcher = installed_launcher(lambda *a: c_calls.append(a))
    kernel.compiled.run = launcher
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    fast.launch((2, 3), x, out, 8, 1.0, BLOCK=8)  # the JIT path: finds the protocol
    assert c_calls == []  # the probe launched nothing
    fast.launch((2, 3), x, out, 8, 1.0, BLOCK=8)
    bound = fast.bind((2, 3), x, out, 8, 1.0, BLOCK=8)
    bound(x, out)
    as_triton_calls(launcher, (2, 3, 1), x.data_ptr(), out.data_ptr(), 8, 1.0, 8, True)
    assert len(c_calls) == 4 and c_calls[0] == c_calls[1] == c_calls[2] == c_calls[3]
    packed = isinstance(c_calls[0][-1], tuple)
    assert packed == (tuple(map(int, triton.__version__.split(".")[:2])) >= (3, 7))


def test_the_probe_calls_the_launcher_as_the_jit_launch_does():
    """``direct_launch`` calls a launcher as ``JITFunction.run`` calls ``CompiledKernel.run`` in
    Triton 3.4-3.9: the grid, the stream, the function handle, the packed metadata, the launch
    metadata, the two hooks, then every parameter."""
    import inspect
    import re

    source = re.sub(r"\s+", " ", inspect.getsource(JITFunction.run))
    assert (
        "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, "
        "launch_metadata, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, "
        "*bound_args.values())" in source
    )


def test_varying_integers_are_keyed_by_their_specialization(kernel):
    fast = triton_launch.FastLaunch(kernel, varying=("n",))
    x, out = torch.randn(64), torch.empty(64)
    for n in (64, 48, 32):  # all divisible by 16: one compiled variant
        fast.launch((1,), x, out, n, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == 1 and len(kernel.fast_calls) == 2
    assert kernel.fast_calls[-1][11] == 32  # the value itself is passed
    for n in (50, 1, 2**31):  # not divisible by 16; the value 1; 64-bit
        fast.launch((1,), x, out, n, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == 4


def test_tuned_configs_are_bounded(monkeypatch):
    monkeypatch.setattr(triton_launch, "MAX_ENTRIES", 2)
    config = triton.Config({"BLOCK": 8})

    class Autotuner:
        fn = None
        best_config = config
        calls = 0

        def __getitem__(self, grid):
            def run(*args, **kwargs):
                Autotuner.calls += 1

            return run

    tuned = triton_launch.TunedLaunch(Autotuner())
    for key in ((1,), (2,), (3,)):
        tuned.launch((1,), key)
    assert Autotuner.calls == 3 and len(tuned._chosen) == 1


def test_tma_descriptors_are_keyed_by_their_type_and_passed_as_objects(kernel):
    """A host TMA descriptor: Triton specializes on its dtype, block shape and layout only, and
    the compiled launcher encodes the descriptor object itself (its base, shape and strides)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    fast = triton_launch.FastLaunch(kernel)
    out = torch.empty(8)

    def descriptor(rows, block_rows, dtype=torch.float32):
        base = torch.empty(rows, 64, dtype=dtype)
        return TensorDescriptor(base, list(base.shape), list(base.stride()), [block_rows, 64])

    first, second = descriptor(32, 16), descriptor(48, 16)
    fast.launch((1,), first, out, 8, 1.0, BLOCK=8)
    fast.launch((1,), second, out, 8, 1.0, BLOCK=8)  # another tensor and shape: the same kernel
    assert len(kernel.jit_calls) == 1 and len(kernel.fast_calls) == 1
    assert kernel.fast_calls[0][9] is second
    fast.launch((1,), descriptor(48, 8), out, 8, 1.0, BLOCK=8)  # another block shape
    fast.launch((1,), descriptor(48, 16, torch.float16), out, 8, 1.0, BLOCK=8)  # another dtype
    assert len(kernel.jit_calls) == 3


def test_a_bound_launch_repeats_the_launch_for_new_tensors(kernel):
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(64), torch.empty(64)
    bound = fast.bind((4, 2), x, out, 64, 0.5, BLOCK=16, num_warps=4)
    assert len(kernel.jit_calls) == 1  # bind launched (compiling)
    x2, out2 = torch.randn(64), torch.empty(64)
    bound(x2, out2)
    assert len(kernel.jit_calls) == 1
    assert kernel.fast_calls == [
        (4, 2, 1, STREAM, "function-handle", "packed", None, None, None, x2.data_ptr(), out2.data_ptr(), 64, 0.5, 16, True)
    ]  # fmt: skip


def test_a_bound_launch_on_another_device_or_with_a_hook_takes_fast_launch(kernel, monkeypatch):
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    bound = fast.bind((1,), x, out, 8, 1.0, BLOCK=8)
    calls = []
    monkeypatch.setattr(fast, "launch", lambda grid, *a, **kw: calls.append((grid, a, kw)))
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 3)
    bound(x, out)
    monkeypatch.setattr(triton_launch, "_current_device", lambda: -1)
    monkeypatch.setattr(triton_launch.knobs.runtime, "launch_enter_hook", lambda metadata: None)
    bound(x, out)
    assert calls == [((1,), (x, out, 8, 1.0), {"BLOCK": 8})] * 2 and kernel.fast_calls == []


def test_a_launch_bound_without_a_compiled_kernel_always_takes_fast_launch(kernel, monkeypatch):
    monkeypatch.setattr(triton_launch.knobs.runtime, "launch_enter_hook", lambda metadata: None)
    fast = triton_launch.FastLaunch(kernel)
    bound = fast.bind((1,), torch.randn(8), torch.empty(8), 8, 1.0, BLOCK=8)
    monkeypatch.undo()
    monkeypatch.setattr(triton_launch, "_current_device", lambda: -1)
    monkeypatch.setattr(triton_launch, "_current_stream", lambda device: STREAM)
    x, out = torch.randn(8), torch.empty(8)
    bound(x, out)
    bound(x, out)
    # the hook kept bind's launch on the JIT path (nothing cached to bind); FastLaunch then runs
    assert len(kernel.jit_calls) == 2 and len(kernel.fast_calls) == 1


def test_a_bound_launch_keeps_no_reference_to_the_bound_tensors(kernel):
    import gc
    import weakref

    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(64), torch.empty(64)
    bound = fast.bind((1,), x, out, 64, 0.5, BLOCK=16)
    kernel.jit_calls.clear()  # the JIT path's record holds the first call's tensors
    refs = [weakref.ref(x), weakref.ref(out)]
    del x, out
    gc.collect()
    assert all(ref() is None for ref in refs)
    bound(torch.randn(64), torch.empty(64))
    assert len(kernel.fast_calls) == 1


def test_a_bound_launch_passes_tritons_own_descriptor_expansion_encoded_once(kernel, monkeypatch):
    """A descriptor's place in a bound launch takes its base tensor. Under this release's wrapper
    that expands host TMA descriptors (``wrap_handle_tensordesc``) the bound launch calls the C
    launch itself with the arguments the wrapper would pass for the bound descriptor over that
    base: its tensor map (``make_tensordesc_arg``), shape and strides. The map is encoded once per
    base pointer (the geometry is the bound one's)."""
    from triton.backends.nvidia.driver import wrap_handle_tensordesc
    from triton.tools.tensor_descriptor import TensorDescriptor

    encoded = []

    def fill_tma_descriptor(ptr, swizzle, elem_size, elem_type, block, shape, strides, padding):
        encoded.append(ptr)
        return (
            "tensor map",
            ptr,
            swizzle,
            elem_size,
            elem_type,
            tuple(block),
            tuple(shape),
            tuple(strides),
            padding,
        )

    # 3.6 names the encoder fill_tma_descriptor, 3.7+ fill_tma_descriptor_tiled
    stub_driver(
        monkeypatch, fill_tma_descriptor=fill_tma_descriptor, fill_tma_descriptor_tiled=fill_tma_descriptor
    )
    monkeypatch.setattr(triton_launch, "_TMA_ARGS", {})
    c_launches, triton_launches = [], []
    signature = {"x_ptr": "tensordesc<fp32[16, 64]>", "out_ptr": "*fp32", "n": "i32", "scale": "fp32",
                 "BLOCK": "constexpr", "EVEN": "constexpr"}  # fmt: skip
    meta = [{"swizzle": 3, "elem_size": 4, "elem_type": 7, "block_size": [16, 64], "fp4_padded": False}]
    kernel.compiled.run = installed_launcher(
        wrap_handle_tensordesc(lambda *a: c_launches.append(a), signature, meta)
    )
    reference = installed_launcher(
        wrap_handle_tensordesc(lambda *a: triton_launches.append(a), signature, meta)
    )

    def descriptor(rows):
        base = torch.empty(rows, 64)
        return TensorDescriptor(base, list(base.shape), list(base.stride()), [16, 64])

    fast = triton_launch.FastLaunch(kernel)
    first, out = descriptor(32), torch.empty(8)
    fast.launch((1,), first, out, 8, 1.0, BLOCK=8)  # compiles
    bound = fast.bind((1,), first, out, 8, 1.0, BLOCK=8)
    c_launches.clear(), encoded.clear()
    second = torch.empty(32, 64)
    for _ in range(3):
        bound(second, out)
    over_second = TensorDescriptor(second, list(first.shape), list(first.strides), [16, 64])
    as_triton_calls(reference, (1, 1, 1), over_second, out.data_ptr(), 8, 1.0, 8, True)
    # 3.7+ pass the parameters as one sequence (a tuple here, a list from Triton's wrapper)
    as_tuples = lambda calls: [(*c[:-1], tuple(c[-1])) if isinstance(c[-1], list) else c for c in calls]  # noqa: E731
    assert as_tuples(c_launches) == as_tuples(triton_launches) * 3
    assert encoded == [second.data_ptr(), second.data_ptr()]  # ours once, then the reference's
    bound(torch.empty(32, 64), out)  # another base pointer: encoded again
    assert len(encoded) == 3


def test_a_bound_descriptor_without_tma_metadata_is_passed_over_the_new_base(kernel, monkeypatch):
    """Where the launcher is not Triton's descriptor wrapper, the bound launch passes the bound
    descriptor over the call's base tensor, and its fallback does the same."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    fast = triton_launch.FastLaunch(kernel)
    base, out = torch.empty(32, 64), torch.empty(8)
    bound_descriptor = TensorDescriptor(base, [32, 64], [64, 1], [16, 64])
    fast.launch((1,), bound_descriptor, out, 8, 1.0, BLOCK=8)
    bound = fast.bind((1,), bound_descriptor, out, 8, 1.0, BLOCK=8)
    kernel.fast_calls.clear()
    new_base = torch.empty(32, 64)
    bound(new_base, out)
    passed = kernel.fast_calls[0][9]
    assert passed.base is new_base and (passed.shape, passed.strides, passed.block_shape) == (
        [32, 64],
        [64, 1],
        [16, 64],
    )
    assert bound_descriptor.base is base  # the bound descriptor itself is not changed
    calls = []
    monkeypatch.setattr(fast, "launch", lambda grid, *a, **kw: calls.append(a))
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 3)  # the fallback rebuilds it too
    bound(new_base, out)
    ((fallback_descriptor, *rest),) = calls
    assert fallback_descriptor.base is new_base and fallback_descriptor.block_shape == [16, 64]
    assert rest == [out, 8, 1.0]
