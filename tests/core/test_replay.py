"""The replay cache's own rules (``flashinfer._core.replay``): what a signature holds, which
devices may be replayed, the bounds, the reset when the routing is replaced, the switch."""

from __future__ import annotations

import ast
import gc
import inspect
import textwrap
import weakref

import pytest
import torch

from flashinfer._core import dispatch, replay
from flashinfer._core.compile import PUBLIC


@pytest.fixture(params=["torch guard", "python guard"])
def guard(request, monkeypatch):
    """Each test under torch's C++ tensor guard and under the Python stand-in."""
    if request.param == "python guard":
        monkeypatch.setattr(replay, "TensorGuards", None)
    else:  # every torch the packages take (>= 2.11) has it, with the constructor _guard calls
        assert isinstance(replay._guard((torch.empty(2),)), replay.TensorGuards)
    return request.param


def test_a_signature_holds_layout_dtype_device_grad_and_alignment(guard):
    replays = replay.Replays()
    a, i = torch.randn(4, 8), torch.empty(3, dtype=torch.int32)
    replays.put("head", (a, i), "the replay")
    assert replays.find("head", (torch.randn(4, 8), torch.zeros(3, dtype=torch.int32))) == "the replay"
    assert replays.find("other head", (a, i)) is None
    others = {
        "shape": torch.randn(5, 8),
        "strides": torch.randn(8, 4).t(),
        "dtype": torch.randn(4, 8, dtype=torch.float64),
        "requires_grad": torch.randn(4, 8, requires_grad=True),
        "alignment": torch.empty(64, dtype=torch.float32)[1:33].view(4, 8),  # 4 bytes along
        "a non-tensor": [[0.0] * 8] * 4,
        "a nested tensor": torch.nested.nested_tensor([torch.randn(8), torch.randn(8)]),
    }
    for what, other in others.items():
        assert replays.find("head", (other, i)) is None, what
    assert replays.find("head", (a,)) is None  # another count of tensors


def test_a_replay_keeps_no_reference_to_the_first_calls_tensors(guard):
    replays = replay.Replays()
    a = torch.randn(4, 8)
    gone = weakref.ref(a)
    replays.put("head", (a,), "the replay")
    del a
    gc.collect()
    assert gone() is None


def test_only_devices_the_nvidia_implementation_serves_are_replayed(monkeypatch):
    replays = replay.Replays()
    cpu = torch.empty(1)
    assert not replays.serves(cpu)  # the reference serves the CPU: no signature computed
    monkeypatch.setattr(
        dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "cuda")._replace(force_reference=False)
    )
    assert replays.serves(cpu)  # a new routing is read again
    assert not replays.serves([1.0])  # a non-tensor: never replayed, the op's checks say why
    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "mate"))
    assert not replays.serves(cpu)


def test_replays_are_bounded_and_emptied_with_a_new_routing(guard, monkeypatch):
    monkeypatch.setattr(replay, "MAX_REPLAYS", 2)
    replays = replay.Replays()
    t = torch.randn(2)
    for i in range(3):
        replays.put(i, (t,), f"replay {i}")
    assert replays.find(0, (t,)) is None and replays.find(2, (t,)) == "replay 2"
    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "cuda"))
    assert replays.find(2, (t,)) is None


def test_a_head_keeps_its_newest_signatures(guard):
    replays = replay.Replays()
    sizes = range(1, replay.MAX_PER_HEAD + 2)
    for n in sizes:
        replays.put("head", (torch.randn(n),), f"replay {n}")
    assert replays.find("head", (torch.randn(1),)) is None  # the oldest went
    for n in sizes[1:]:
        assert replays.find("head", (torch.randn(n),)) == f"replay {n}"


def test_an_unhashable_head_is_neither_kept_nor_found(guard):
    replays = replay.Replays()
    t = torch.randn(2)
    replays.put([1], (t,), "the replay")
    assert replays.find([1], (t,)) is None


def test_the_signature_holds_the_kernel_tier_asked_for(guard, monkeypatch):
    replays = replay.Replays()
    t = torch.randn(2)
    monkeypatch.setenv("FLASHINFER_KERNEL_TIER", "tl")
    replays.put("head", (t,), "tl's replay")
    monkeypatch.setenv("FLASHINFER_KERNEL_TIER", "gluon")
    assert replays.find("head", (t,)) is None
    monkeypatch.setenv("FLASHINFER_KERNEL_TIER", "tl")
    assert replays.find("head", (t,)) == "tl's replay"


def test_the_switch_turns_replays_off(monkeypatch):
    monkeypatch.setattr(replay, "ENABLED", False)
    monkeypatch.setattr(
        dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "cuda")._replace(force_reference=False)
    )
    assert not replay.Replays().serves(torch.empty(1))


# ------------------------------------------------------------- every parameter reaches the key

# the fast path's names that hold the key or its parts
_KEY_PARTS = frozenset({"key", "tensors", "options", "optional", "given"})


def _parameters(fn) -> set[str]:
    code = inspect.unwrap(fn).__code__
    return set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])


def _keyed(fn) -> set[str]:
    """The names ``fn``'s fast path reads into its replay key: the values assigned to the key and
    its parts, and the conditions under which it looks a replay up (a call that gives what a
    condition excludes is never replayed). The fast path is the function's statements up to the
    one that calls ``_REPLAYS.find``."""
    body = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))).body[0].body
    names = set()
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id in _KEY_PARTS for target in node.targets
            ):
                names |= {name.id for name in ast.walk(node.value) if isinstance(name, ast.Name)}
            elif isinstance(node, ast.If):
                names |= {name.id for name in ast.walk(node.test) if isinstance(name, ast.Name)}
        if "_REPLAYS.find" in ast.unparse(statement):
            return names
    raise AssertionError(f"{fn.__name__} has no fast path calling _REPLAYS.find")


def _unkeyed(fn, replays) -> set[str]:
    return _parameters(fn) - _keyed(fn) - set(replays.unkeyed)


def test_every_replayed_op_is_known():
    import flashinfer.decode  # noqa: F401  (imports every op package)

    assert set(replay.OPS) == {
        "fp8_blockscale_gemm_sm90",
        "rope_quantize_fp8",
        "trtllm_batch_decode_with_kv_cache_mla",
    }


@pytest.mark.parametrize(
    "op", ["fp8_blockscale_gemm_sm90", "rope_quantize_fp8", "trtllm_batch_decode_with_kv_cache_mla"]
)
def test_every_parameter_reaches_the_replay_key_or_is_declared(op):
    """A stale replay is a silent wrong answer: each parameter of a replayed public function is
    read into its key (or the condition of its lookup) or declared ``unkeyed`` with a reason."""
    import flashinfer.decode  # noqa: F401

    fn, replays = PUBLIC[op], replay.OPS[op]
    assert _unkeyed(fn, replays) == set(), f"{op}: parameters neither keyed nor declared"
    assert set(replays.unkeyed) <= _parameters(fn), "a declaration names no parameter"
    assert all(reason for reason in replays.unkeyed.values())


def test_a_parameter_added_to_a_replayed_op_fails_the_check():
    """The check above on an op whose new parameter ``scale`` reaches its checks but not its key."""
    replays = replay.Replays()

    def op(x, out=None, scale=1.0, mode="a"):
        key = None
        if replays.serves(x) and out is not None:
            options = (mode,)
            key = (x.shape, options)
            _REPLAYS = replays
            _REPLAYS.find(key, (x, out))
        return scale

    assert _unkeyed(op, replays) == {"scale"}
    assert _unkeyed(op, replay.Replays(unkeyed={"scale": "read by no rule"})) == set()
