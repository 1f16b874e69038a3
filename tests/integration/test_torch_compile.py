"""Every public op inside ``torch.compile(fn, fullgraph=True)``: one opaque ``flashinfer::`` node,
results bit-identical to the eager call, ``out=`` buffers written in place and returned as given.

The op tables (``tests/gemm_ops.py``, ``tests/mla_ops.py``) give the calls: one compile case per
op and CPU implementation (the reference, and the MATE adapter over the float64 stand-in of
``tests/standin``), plus rows that exercise the decode's flattened arguments (tensor scales,
sinks as a list, strided outputs). A compiled function makes one public call, as an engine's
layer does; Inductor compiles the graph, which must be one graph whose only computation is the
op (output allocations aside). Nothing here runs on a GPU: the CUDA tiers are for
``tests/gpu``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
import torch._guards
from compile_checks import assert_identical, check_sample, copied, run_both
from gemm_ops import OPS as GEMM_OPS
from mla_ops import OPS as MLA_OPS
from mla_ops import sparse_sample
from optable import build
from oracles import BF16, E4M3
from torch._inductor.compile_fx import compile_fx

import flashinfer
import flashinfer.decode
import flashinfer.gemm
import flashinfer.mla
import flashinfer.rope

OPS = [*GEMM_OPS, *MLA_OPS]
# rows beyond each op's first sample whose arguments take another path through the custom op
EXTRA_ROWS = {
    "bmm_fp8": ("strided-out",),
    "gemm_fp8_nt_groupwise": ("fp8-output",),
    "trtllm_batch_decode_with_kv_cache_mla": (
        "fp8_tensor_scales",
        "dense_sinks_lse3d",
        "fp8_heads3_strided_out",
    ),
    "trtllm_batch_decode_with_kv_cache_mla[packed]": ("packed_mtp_q2_2d_lengths_sinks",),
}
# public callables that are not tensor ops (nothing to make opaque): host helpers and classes
NOT_OPS = {
    "is_cuda_tile_available",
    "get_batch_decode_metadata_mla",
    "DecodeMetadata",
    "MLAHeadDimensions",
    "MLALayerDimensions",
    "deepseek_mla_dimensions",
    "nope_mla_dimensions",
    "smaller_mla_dimensions",
    "supported_mla_layer_dimensions",
}


def _rows(op) -> list[str]:
    names = [entry.name for entry in op.samples()]
    extra = [next(n for n in names if n.startswith(prefix)) for prefix in EXTRA_ROWS.get(op.name, ())]
    return [names[0], *extra]


CASES = [
    pytest.param(impl, op, name, id=f"{impl}-{op.name}-{name}")
    for op in OPS
    for i, name in enumerate(_rows(op))
    for impl in (("reference", "mate") if i == 0 else ("reference",))
]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("implementation, op, name", CASES, indirect=["implementation"])
def test_op_is_one_node_and_bit_identical(implementation, op, name, seed):
    sample = build(op, name)
    if implementation == "mate":
        import mate

        mate.reset()
    check_sample(op, sample)
    if implementation == "mate":  # the op ran the MATE adapter: as many MATE calls as eagerly
        called = [function for function, _ in mate.CALLS]
        half = len(called) // 2
        assert called and called[:half] == called[half:], called


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_op_compiled_itself_is_one_node(op, seed):
    """``torch.compile(op, fullgraph=True)``, the public function itself rather than code that
    calls it: the same one node and the same bits."""
    check_sample(op, build(op, _rows(op)[0]), itself=True)


def test_every_public_op_has_a_compile_case():
    """Each tensor op of the public modules (the root re-exports are the same objects) is in a
    table, so it has a case above; a new public op must join a table (or NOT_OPS)."""
    tabled = {op.fn for op in OPS}
    for module in (flashinfer.gemm, flashinfer.rope, flashinfer.decode, flashinfer.mla):
        for name in module.__all__:
            if name not in NOT_OPS:
                assert getattr(module, name) in tabled, f"{module.__name__}.{name}"
    assert flashinfer.bmm_fp8 is flashinfer.gemm.bmm_fp8 and flashinfer.bmm_bf16 is flashinfer.gemm.bmm_bf16


# ---------------------------------------------------------------------------------- dynamic=True


def _bmm_fp8_call(batch: int):
    A = torch.randn(batch, 3, 64).to(E4M3)
    B = torch.randn(batch, 16, 64).to(E4M3).transpose(-2, -1)
    return (A, B, torch.tensor(0.5), torch.ones(1), BF16), {}


def _rope_call(nnz: int):
    q = torch.randn(nnz, 4, 576).to(BF16)
    k = torch.randn(nnz, 576).to(BF16)
    q_fp8, k_fp8 = torch.empty(nnz, 4, 576, dtype=E4M3), torch.empty(nnz, 576, dtype=E4M3)
    angles = torch.arange(32).float()[:, None] * torch.rand(32)
    kwargs = dict(
        q_rope=q[..., 512:], k_rope=k[:, 512:], q_nope=q[..., :512], k_nope=k[:, :512],
        cos_sin_cache=torch.cat((angles.cos(), angles.sin()), dim=-1), pos_ids=torch.randint(0, 32, (nnz,)),
        is_neox=False, quant_scale_q=0.75, quant_scale_kv=1.5,
        q_rope_out=q_fp8[..., 512:], k_rope_out=k_fp8[:, 512:], q_nope_out=q_fp8[..., :512], k_nope_out=k_fp8[:, :512],
    )  # fmt: skip
    return (), kwargs


def _decode_call(batch: int):
    sample = sparse_sample("dynamic", batch=batch, lse="return").build()
    return (), sample.kwargs


DYNAMIC = [
    pytest.param(flashinfer.bmm_fp8, _bmm_fp8_call, id="bmm_fp8"),
    pytest.param(flashinfer.rope.mla_rope_quantize_fp8, _rope_call, id="mla_rope_quantize_fp8"),
    pytest.param(flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla, _decode_call, id="sparse_decode"),
]


class Compilations:
    """A backend (Inductor) that counts compilations: Dynamo's (frame, compile) ids, so the
    restart of one compilation (dynamic float scalars, specialized on a second pass) counts once."""

    def __init__(self):
        self.ids = set()

    def __call__(self, gm, example_inputs):
        compile_id = torch._guards.CompileContext.current_compile_id()
        self.ids.add((compile_id.frame_id, compile_id.frame_compile_id))
        return compile_fx(gm, example_inputs)


@pytest.mark.parametrize("fn, make", DYNAMIC)
def test_dynamic_batch_recompiles_at_most_once(fn, make, seed):
    compilations = Compilations()
    compiled_fn = torch.compile(
        lambda *a, **k: fn(*a, **k), fullgraph=True, dynamic=True, backend=compilations
    )
    for batch in (2, 3, 5, 8, 13):
        args, kwargs = make(batch)
        eager_args, eager_kwargs = copied(args, kwargs)
        assert_identical(compiled_fn(*args, **kwargs), fn(*eager_args, **eager_kwargs))
    assert len(compilations.ids) <= 2, f"{len(compilations.ids)} compilations over 5 batch sizes"


# --------------------------------------------------------------------------------- aliasing, state


def test_rope_writes_the_slices_of_merged_buffers():
    """sglang's call: the four outputs are the NoPE and RoPE slices of two merged 576-wide buffers."""
    args, kwargs = _rope_call(5)
    outputs = ("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out")
    compiled, eager, compiled_kwargs, _ = run_both(
        flashinfer.rope.mla_rope_quantize_fp8, args, kwargs, outputs
    )
    assert_identical(compiled, eager)
    q_rope_out, q_nope_out = compiled_kwargs["q_rope_out"], compiled_kwargs["q_nope_out"]
    assert q_rope_out.untyped_storage().data_ptr() == q_nope_out.untyped_storage().data_ptr()
    for output in compiled:  # every poisoned element written
        assert not torch.isnan(output.float()).any()
    assert compiled[0] is compiled_kwargs["q_rope_out"] and compiled[2] is compiled_kwargs["q_nope_out"]


def test_bmm_fp8_backend_in_the_out_slot():
    """vLLM's ``bmm_fp8(a, b, sa, sb, dtype, "auto")``: the name in ``out``'s place."""
    args, _ = _bmm_fp8_call(1)
    compiled, eager, _, graphs = run_both(flashinfer.bmm_fp8, (*args, "cublas"), {})
    assert_identical(compiled, eager)
    assert len(graphs.graphs) == 1


def test_decode_metadata_passes_through_and_guards():
    """``metadata=`` reaches the op by key; another metadata object compiles again (it may hold
    another schedule), the same one reuses the compiled code."""
    sample = sparse_sample("metadata", batch=2, lse="return").build()
    kwargs = sample.kwargs
    metadata = flashinfer.decode.get_batch_decode_metadata_mla(
        kwargs["query"], kwargs["seq_lens"], kwargs["sparse_mla_top_k"]
    )
    decode = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled_fn = torch.compile(lambda **k: decode(**k), fullgraph=True, backend=counter)
    eager = decode(**kwargs, metadata=metadata)
    assert_identical(compiled_fn(**kwargs, metadata=metadata), eager)
    assert_identical(compiled_fn(**kwargs, metadata=metadata), eager)
    assert counter.frame_count == 1
    other = flashinfer.decode.get_batch_decode_metadata_mla(
        kwargs["query"], kwargs["seq_lens"], kwargs["sparse_mla_top_k"]
    )
    assert_identical(compiled_fn(**kwargs, metadata=other), eager)
    assert counter.frame_count == 2


def test_metadata_prepared_inside_a_compiled_function_is_refused_at_compile_time():
    """Traced code cannot make a metadata object the compiled decode could be handed later."""
    sample = sparse_sample("metadata", batch=2).build()
    kwargs = sample.kwargs

    def layer(**k):
        metadata = flashinfer.decode.get_batch_decode_metadata_mla(k["query"], k["seq_lens"], 64)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**k, metadata=metadata)

    with pytest.raises(Exception, match="prepare the metadata outside the compiled function"):
        torch.compile(layer, fullgraph=True, backend="aot_eager")(**kwargs)


def test_errors_keep_their_type_and_message():
    """Validation runs inside the op when the compiled graph runs: the eager exception."""
    args, _ = _bmm_fp8_call(2)
    compiled_fn = torch.compile(lambda *a: flashinfer.bmm_fp8(*a), fullgraph=True, backend="aot_eager")
    with pytest.raises(ValueError, match="dtype"):
        compiled_fn(*args[:4], torch.float32)


def test_eager_calls_register_nothing():
    """The eager path imports neither the ``_compile`` modules nor Dynamo: no custom op is
    registered, and the public functions are the plain functions (the mark is attributes only)."""
    code = textwrap.dedent(
        """
        import sys, types, torch
        import flashinfer, flashinfer.decode
        from flashinfer._core.compile import PUBLIC
        assert len(PUBLIC) == 9 and all(type(fn) is types.FunctionType for fn in PUBLIC.values()), PUBLIC
        assert PUBLIC["bmm_fp8"] is flashinfer.bmm_fp8
        A = torch.randn(1, 2, 64).to(torch.float8_e4m3fn)
        B = torch.randn(1, 64, 8).to(torch.float8_e4m3fn)
        flashinfer.bmm_fp8(A, B, torch.ones(()), torch.ones(()), torch.bfloat16)
        names = ("flashinfer.gemm._compile", "flashinfer.mla._compile", "flashinfer._core.custom_ops", "torch._dynamo")
        loaded = [m for m in names if m in sys.modules]
        assert loaded == [], loaded
        assert not hasattr(torch.ops.flashinfer, "bmm_fp8")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "FLASHINFER_LOGLEVEL": "0"})


def test_api_logging_logs_compiled_calls_when_they_run(tmp_path):
    """``FLASHINFER_LOGLEVEL`` on: tracing skips the logging wrapper (Dynamo cannot trace it), the
    op logs each call when the compiled graph runs."""
    log = tmp_path / "api.log"
    code = textwrap.dedent(
        """
        import torch
        import flashinfer
        A = torch.randn(1, 2, 64).to(torch.float8_e4m3fn)
        B = torch.randn(1, 64, 8).to(torch.float8_e4m3fn)
        one = torch.ones(())
        fn = torch.compile(lambda *a: flashinfer.bmm_fp8(*a), fullgraph=True, backend="aot_eager")
        for _ in range(2):
            fn(A, B, one, one, torch.bfloat16)
        """
    )
    env = {**os.environ, "FLASHINFER_LOGLEVEL": "1", "FLASHINFER_LOGDEST": str(log)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert log.read_text().count("FlashInfer API Call: bmm_fp8") == 2
