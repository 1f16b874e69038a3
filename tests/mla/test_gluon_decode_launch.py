"""The Gluon decode launcher binds every parameter of the kernels it launches (CPU, no GPU).

The Gluon kernel runs only on an H200, where CI never goes, so a launcher that forgets a
constexpr the kernel (or the shared combine kernel) gained would first fail there. Here the two
launches are recorded instead of run and bound to the kernels' signatures.
"""

from __future__ import annotations

import inspect

import pytest
import torch

pytest.importorskip(
    "triton.experimental.gluon", reason="the Gluon kernels need Triton's Gluon (Triton >= 3.5)"
)

from flashinfer.mla.kernels import mla_decode_gluon as glu  # noqa: E402

E4M3 = torch.float8_e4m3fn


class Recorder:
    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def launch(self, grid, *args, **kwargs):
        self.calls.append((grid, args, kwargs))


def bind(kernel, args, kwargs):
    # launch options are not parameters; everything else must bind, with no parameter left out
    options = {"num_warps", "num_stages", "maxnreg"}
    params = {key: value for key, value in kwargs.items() if key not in options}
    signature = inspect.Signature(
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in kernel.params]
    )
    return signature.bind(*args, **params)


@pytest.mark.parametrize("dtype", [E4M3, torch.bfloat16])
@pytest.mark.parametrize("splits", [1, 8])
@pytest.mark.parametrize("page_size", [0, 64])
def test_both_launches_bind_every_kernel_parameter(monkeypatch, dtype, splits, page_size):
    decode, combine = Recorder(glu.mla_decode_gluon_kernel), Recorder(glu.mla_combine_kernel)
    monkeypatch.setattr(glu, "_DECODE", decode)
    monkeypatch.setattr(glu, "_COMBINE", combine)
    batch, q_len, heads = 2, 2, 128
    query = torch.zeros(batch, q_len, heads, 576, dtype=dtype)
    kv = torch.zeros(640, 576, dtype=dtype)
    key_list = torch.zeros((batch, 10) if page_size else (batch, q_len, 64), dtype=torch.int32)
    seq_lens = torch.ones(batch, dtype=torch.int32)
    out = torch.zeros(batch, q_len, heads, 512, dtype=torch.bfloat16)
    lse = torch.zeros(batch, q_len, heads)
    plan = glu.plan_decode_gluon(batch, q_len, heads, 2048, 132)
    plan = type(plan)(**{**plan.__dict__, "num_splits": splits})
    glu.mla_decode(
        query, kv, key_list, seq_lens, torch.tensor(0.1), 1.0, torch.zeros(heads), out, lse,
        torch.zeros(1 << 24, dtype=torch.uint8), plan, page_size, 10 if page_size else 640, 576 * max(page_size, 1),
        576 if page_size else 0,
    )  # fmt: skip
    assert len(decode.calls) == 1 and len(combine.calls) == (splits > 1)
    for recorder in (decode, combine):
        for _grid, args, kwargs in recorder.calls:
            bound = bind(recorder.kernel, args, kwargs)
            missing = [
                p.name
                for p in recorder.kernel.params
                if p.name not in bound.arguments and p.default is p.empty
            ]
            assert not missing, f"{recorder.kernel.fn.__name__} launched without {missing}"
