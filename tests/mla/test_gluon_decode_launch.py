"""The Gluon decode launcher binds every parameter of the kernels it launches (CPU, no GPU).

The Gluon kernel runs only on an H200, where CI never goes, so a launcher that forgets a
constexpr the kernel (or the shared combine kernel) gained would first fail there. Here the two
launches are recorded instead of run and bound to the kernels' Python signatures.

Triton is imported inside the test, not at collection: the interpreter is switched on by
``tests/mla/triton/conftest.py`` and must be on before Triton's own helpers are decorated.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from flashinfer.mla._args import Decode

E4M3 = torch.float8_e4m3fn


class Recorder:
    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def launch(self, grid, *args, **kwargs):
        self.calls.append((grid, args, kwargs))

    def bind(self, grid, *args, **kwargs):  # FastLaunch.bind: launch, return the repeat
        self.launch(grid, *args, **kwargs)
        return lambda *tensors: None


def unbound_parameters(kernel, args, kwargs) -> list[str]:
    """Parameters without a default that the launch leaves out (launch options are not parameters)."""
    options = {"num_warps", "num_stages", "maxnreg"}
    signature = inspect.signature(kernel.fn)
    bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k not in options})
    return [
        name
        for name, param in signature.parameters.items()
        if name not in bound.arguments and param.default is inspect.Parameter.empty
    ]


@pytest.mark.parametrize("form", ["e4m3", "bf16", "packed"])
@pytest.mark.parametrize("splits", [1, 8])
@pytest.mark.parametrize("page_size", [0, 64])
def test_both_launches_bind_every_kernel_parameter(monkeypatch, form, splits, page_size):
    pytest.importorskip(
        "triton.experimental.gluon", reason="the Gluon kernels need Triton's Gluon (Triton >= 3.5)"
    )
    from flashinfer.mla.kernels import mla_decode_gluon as glu
    from flashinfer.mla.kernels.mla_decode_shared import Lengths, key_rows

    if form == "packed" and page_size:
        pytest.skip("the packed form is sparse only")
    decode, combine = Recorder(glu.mla_decode_gluon_kernel), Recorder(glu.mla_combine_kernel)
    monkeypatch.setattr(glu, "_DECODE", decode)
    monkeypatch.setattr(glu, "_COMBINE", combine)
    batch, q_len, heads = 2, 2, 128
    pages = 10 if page_size else 640
    dtype = E4M3 if form == "e4m3" else torch.bfloat16
    if form == "packed":
        kv_cache = torch.randint(0, 255, (10, 64, 656), dtype=torch.uint8)
        seq_lens = torch.full((batch * q_len,), 64, dtype=torch.int32)
    else:
        kv_cache = torch.randn(pages, 1, max(page_size, 1), 576).to(dtype)
        seq_lens = torch.full((batch,), 64, dtype=torch.int32)
    call = Decode(
        query=torch.randn(batch, q_len, heads, 576).to(dtype),
        kv_cache=kv_cache,
        table=torch.randint(0, pages, (batch, 10) if page_size else (batch, q_len, 64), dtype=torch.int32),
        seq_lens=seq_lens,
        bmm1_scale=torch.tensor(0.1),
        bmm2_scale=1.0,
        sinks=torch.randn(heads),
        out=torch.empty(batch, q_len, heads, 512, dtype=torch.bfloat16),
        lse=torch.empty(batch * q_len, heads),
        plan=dataclasses.replace(glu.plan_decode_gluon(batch, q_len, heads, 2048, 132), num_splits=splits),
        workspace=torch.empty(1 << 24, dtype=torch.uint8),
    )
    if form == "packed":
        glu.mla_decode(call, key_rows(call, paged=False), packed=True, lengths=Lengths.PER_TOKEN)
    else:
        glu.mla_decode(call, key_rows(call, paged=page_size > 0))
    assert len(decode.calls) == 1 and len(combine.calls) == (splits > 1)
    for recorder in (decode, combine):
        for _grid, args, kwargs in recorder.calls:
            missing = unbound_parameters(recorder.kernel, args, kwargs)
            assert not missing, f"{recorder.kernel.fn.__name__} launched without {missing}"
    # the packed form's LSE takes the sinks in, in the decode and in the combine
    kwargs = decode.calls[0][2]
    assert (kwargs["PACKED"], kwargs["SINK_IN_LSE"]) == (form == "packed",) * 2
    assert kwargs["LENGTH_MODE"] == (Lengths.PER_TOKEN if form == "packed" else Lengths.CAUSAL)
    assert all(kw["SINK_IN_LSE"] == (form == "packed") for _grid, _args, kw in combine.calls)
