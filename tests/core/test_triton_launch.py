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


class FakeCompiled(CompiledKernel):
    run = None  # shadows the property: the test sets a recorder

    def __init__(self, recorder):
        self.run, self.function, self.packed_metadata = recorder, "function-handle", "packed"
        self.module = None  # nothing loaded: CompiledKernel.__del__ unloads nothing


class RecordingKernel(JITFunction):
    """A JIT function whose ``[grid]`` launch records its call and returns a fake compiled kernel."""

    def __init__(self, fn):
        super().__init__(fn)
        self.jit_calls = []
        self.fast_calls = []
        self.compiled = FakeCompiled(lambda *a: self.fast_calls.append(a))

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.jit_calls.append((grid, args, kwargs))
            return self.compiled

        return launch


@pytest.fixture
def kernel(monkeypatch):
    # the current device is the CPU tensors' own (-1), as a CUDA launch's is its tensors' device
    monkeypatch.setattr(triton_launch, "_current_device", lambda: -1)
    monkeypatch.setattr(triton_launch, "_current_stream", lambda device: STREAM)
    for hook in ("launch_enter_hook", "launch_exit_hook"):  # this Triton's "no hook" (None or an empty chain)
        monkeypatch.setattr(triton_launch.knobs.runtime, hook, getattr(triton_launch.knobs.runtime, hook))
    return RecordingKernel(scale_kernel)


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


class DirectLauncher:
    """What Triton's ``CudaLauncher`` exposes: its C launch and the options it puts in front."""

    launch_cooperative_grid, launch_pdl = "coop", "pdl"

    def __init__(self, scratch=0):
        self.global_scratch_size = self.profile_scratch_size = scratch
        self.calls = []
        self.launch = lambda *a: self.calls.append(("launch", a))

    def __call__(self, *a):
        self.calls.append(("run", a))


@pytest.mark.parametrize("scratch", [0, 256])
def test_a_launcher_without_scratch_is_called_at_its_c_launch(kernel, scratch):
    launcher = DirectLauncher(scratch)
    kernel.compiled.run = launcher
    fast = triton_launch.FastLaunch(kernel)
    x, out = torch.randn(8), torch.empty(8)
    for _ in range(2):
        fast.launch((2,), x, out, 8, 1.0, BLOCK=8)
    ((how, call),) = launcher.calls
    ptrs = (x.data_ptr(), out.data_ptr(), 8, 1.0, 8, True)
    if scratch:  # Triton's own call allocates the scratch
        assert (how, call) == ("run", (2, 1, 1, STREAM, "function-handle", "packed", None, None, None, *ptrs))
    else:
        assert (how, call) == (
            "launch",
            (
                2,
                1,
                1,
                STREAM,
                "function-handle",
                "coop",
                "pdl",
                None,
                None,
                "packed",
                None,
                None,
                None,
                *ptrs,
            ),
        )


def test_the_direct_launch_is_the_installed_tritons_own():
    """Without scratch, ``CudaLauncher.__call__`` hands its arguments to the C launch after the
    function with the cooperative-grid and PDL flags and the two (None) scratch buffers."""
    import inspect
    import re

    from triton.backends.nvidia.driver import CudaLauncher

    source = re.sub(r"\s+", " ", inspect.getsource(CudaLauncher.__call__))
    assert (
        "self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl, "
        "global_scratch, profile_scratch, *args)" in source
    )
    assert "return None" in source  # no scratch allocated for a size of 0


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


def test_the_launch_protocol_is_the_installed_tritons_own():
    """FastLaunch calls ``CompiledKernel.run`` as ``JITFunction.run`` does in Triton 3.4-3.9: the
    grid, the stream, the function handle, the packed metadata, the launch metadata, the two
    hooks, then every parameter. A Triton that launches otherwise must leave the pinned range."""
    import inspect
    import re

    assert triton_launch.protocol_supported(), f"Triton {triton.__version__} is outside SUPPORTED_TRITON"
    source = re.sub(r"\s+", " ", inspect.getsource(JITFunction.run))
    assert (
        "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, "
        "launch_metadata, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, "
        "*bound_args.values())" in source
    )


@pytest.mark.parametrize(
    ("version", "enabled"),
    [("3.3.1", False), ("3.4.0", True), ("3.9.0", True), ("3.10.0", False), ("4.0.0", False)],
)
def test_fast_launch_is_off_outside_the_pinned_triton_versions(kernel, monkeypatch, version, enabled):
    monkeypatch.setattr(triton_launch.triton, "__version__", version)
    fast = triton_launch.FastLaunch(kernel)
    assert fast.enabled is enabled
    x, out = torch.randn(8), torch.empty(8)
    for _ in range(2):
        fast.launch((1,), x, out, 8, 1.0, BLOCK=8)
    assert len(kernel.jit_calls) == (1 if enabled else 2)


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
    """A descriptor's place in a bound launch takes its base tensor. Under Triton's wrapper that
    expands host TMA descriptors (``wrap_handle_tensordesc``) the bound launch calls the C launch
    itself with the arguments the wrapper would pass for the bound descriptor over that base: its
    tensor map (``make_tensordesc_arg``), shape and strides. The map is encoded once per base
    pointer (the geometry is the bound one's)."""
    import triton.runtime
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

    utils = types.SimpleNamespace(fill_tma_descriptor=fill_tma_descriptor)
    monkeypatch.setattr(triton.runtime.driver, "_active", types.SimpleNamespace(utils=utils))
    monkeypatch.setattr(triton_launch, "_TMA_ARGS", {})
    c_launches, triton_launches = [], []
    signature = {"x_ptr": "tensordesc<fp32[16, 64]>", "out_ptr": "*fp32", "n": "i32", "scale": "fp32",
                 "BLOCK": "constexpr", "EVEN": "constexpr"}  # fmt: skip
    meta = [{"swizzle": 3, "elem_size": 4, "elem_type": 7, "block_size": [16, 64], "fp4_padded": False}]
    kernel.compiled.run = DirectLauncher()
    kernel.compiled.run.launch = wrap_handle_tensordesc(lambda *a: c_launches.append(a), signature, meta)
    reference = wrap_handle_tensordesc(lambda *a: triton_launches.append(a), signature, meta)

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
    base_args = (1, 1, 1, STREAM, "function-handle", "coop", "pdl", None, None, "packed", None, None, None)
    over_second = TensorDescriptor(second, list(first.shape), list(first.strides), [16, 64])
    reference(*base_args, over_second, out.data_ptr(), 8, 1.0, 8, True)
    assert c_launches == triton_launches * 3
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


def test_the_descriptor_wrapper_is_the_installed_tritons_own():
    """The wrapper a bound launch unwraps: its C launch, descriptor indices and metadata by name,
    each descriptor expanded by ``make_tensordesc_arg``, which reads only what ``_tma_arg`` keys."""
    import inspect
    import re

    from triton.backends.nvidia import driver

    wrapper = driver.wrap_handle_tensordesc(lambda *a: None, {"d": "tensordesc<fp16[8, 8]>"}, [None])
    assert {"launcher", "tensordesc_indices", "tensordesc_meta"} <= set(wrapper.__code__.co_freevars)
    source = inspect.getsource(driver.make_tensordesc_arg)
    read = set(re.findall(r"\barg\.(\w+(?:\.\w+\(\))?)", source))
    assert read == {"base", "shape", "strides", "padding", "base.data_ptr()"}
