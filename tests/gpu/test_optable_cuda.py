"""The op tables (``tests/gemm_ops.py``, ``tests/mla_ops.py``) on the CUDA implementation.

Every sample of every op, the real-size rows only the GPU runs included, goes through the
generic check of ``tests/optable.py`` with its tensors copied to the GPU (strides, offsets and
fused-buffer aliasing kept), caller outputs poisoned, against the same float64 oracle, with the
tensor cores' slack of ``optable.CUDA_SLACK`` (RoPE and decode: the tensor-core rules of
``tests/oracles.py``). An op whose CUDA path has a Gluon kernel runs once per kernel tier
(``cuda-gluon``, ``cuda-tl``: the test sets ``FLASHINFER_KERNEL_TIER``; the Gluon tier skips
where it cannot run). Every error input runs on the GPU too: the same exception and message,
no caller tensor written first. The long tail of real sizes is marked ``slow`` (``nox -s
gpu-slow``). What the table cannot state (graph capture, allocation, threads, routing per tier,
sanitizer cases) stays in the other files here.
"""

from __future__ import annotations

from dataclasses import replace

import gemm_ops
import mla_ops
import pytest
import torch
from compile_checks import assert_identical, check_sample
from optable import (
    CUDA_SLACK,
    build,
    cuda_implementations,
    cuda_sample_params,
    error_named,
    error_params,
    raises_before_any_write,
    run_sample,
    run_sample_twice,
    to_device,
    use_tier,
)

from flashinfer.decode import get_batch_decode_metadata_mla

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

OPS = gemm_ops.OPS + mla_ops.OPS
DECODE = next(op for op in mla_ops.OPS if op.name == "trtllm_batch_decode_with_kv_cache_mla")
FIRST_PER_TIER = [
    pytest.param(impl, op, id=f"{impl}-{op.name}") for op in OPS for impl in cuda_implementations(op)
]


@pytest.mark.parametrize("implementation, op, name", cuda_sample_params(OPS))
def test_matches_oracle_with_poisoned_outputs(implementation, op, name, seed, monkeypatch):
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")
    use_tier(implementation, monkeypatch)
    run_sample(op, build(op, name), "cuda", CUDA_SLACK.get(op.name, 0.0))


@pytest.mark.parametrize("implementation, op, name", cuda_sample_params([op for op in OPS if op.replayed]))
def test_a_repeated_call_signature_is_replayed_and_matches_oracle(
    implementation, op, name, seed, monkeypatch
):
    """The sample twice, each on new GPU memory: the second call takes the replay the first left
    where the call is a serving call (``flashinfer._core.replay``: the checks skipped, the launches
    repeated through bound launches, which call the compiled launchers directly) and matches the
    oracle with poisoned outputs."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")
    use_tier(implementation, monkeypatch)
    run_sample_twice(op, name, "cuda", CUDA_SLACK.get(op.name, 0.0))


@pytest.mark.parametrize("implementation, op, name", error_params(OPS, ("cuda",)))
def test_error_inputs(implementation, op, name, seed):
    """Upstream's exception type, a message naming the argument, nothing written before: on the
    GPU, where the checks of device placement, alignment and strides see device tensors."""
    raises_before_any_write(op, error_named(op, name), "cuda")


@pytest.mark.parametrize("implementation, op", FIRST_PER_TIER)
def test_compiled_call_is_one_node_and_bit_identical(implementation, op, seed, monkeypatch):
    """``torch.compile(fullgraph=True)`` over one call: one ``flashinfer::`` node, the eager result
    bit for bit, caller buffers returned as given (``tests/compile_checks.py``), per kernel tier."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")
    use_tier(implementation, monkeypatch)
    torch._dynamo.reset()
    check_sample(op, to_device(build(op, op.samples()[0].name), "cuda"))


@pytest.mark.parametrize("implementation", cuda_implementations(DECODE))
def test_compiled_decode_with_metadata_is_the_eager_call(implementation, seed, monkeypatch):
    """``metadata=`` (a schedule of the CUDA implementation) through ``torch.compile(fullgraph=True)``:
    one node, the eager result bit for bit, and another metadata object compiles again."""
    use_tier(implementation, monkeypatch)
    torch._dynamo.reset()
    sample = to_device(mla_ops.sparse_sample("metadata", batch=2, lse="return").build(), "cuda")
    kwargs = sample.kwargs
    metadata = get_batch_decode_metadata_mla(kwargs["query"], kwargs["seq_lens"], kwargs["sparse_mla_top_k"])
    assert metadata.kind == "cuda" and metadata.plan is not None
    graphs = check_sample(DECODE, replace(sample, kwargs={**kwargs, "metadata": metadata}))
    other = get_batch_decode_metadata_mla(kwargs["query"], kwargs["seq_lens"], kwargs["sparse_mla_top_k"])
    check_sample(DECODE, replace(sample, kwargs={**kwargs, "metadata": other}))
    assert len(graphs.graphs) == 1


@pytest.mark.parametrize("implementation, op", FIRST_PER_TIER)
def test_reduce_overhead_replays_the_eager_result(implementation, op, seed, monkeypatch):
    """``mode="reduce-overhead"`` (Inductor's CUDA graphs): the op is captured and replayed, and
    every replay gives the eager result bit for bit. Outputs the op allocates come from the graph
    pool (the call's caller buffers are dropped: a graph that mutates its inputs is not captured)."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")
    use_tier(implementation, monkeypatch)
    torch._dynamo.reset()
    sample = to_device(build(op, op.samples()[0].name), "cuda")
    kwargs = {k: v for k, v in sample.kwargs.items() if k not in sample.outputs}
    valid = sample.extra.get("valid")  # rows the op never writes hold whatever the pool held

    def written(result):
        results = result if isinstance(result, tuple) else (result,)
        if valid is None:
            return tuple(r.clone() for r in results)
        return tuple(torch.where(valid.to(r.device), r, torch.zeros_like(r)) for r in results)

    eager = written(op.fn(*sample.args, **kwargs))
    compiled_fn = torch.compile(lambda *a, **k: op.fn(*a, **k), fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # warm-up, capture, replay
        result = written(compiled_fn(*sample.args, **kwargs))
        torch.cuda.synchronize()
        assert_identical(result, eager)
