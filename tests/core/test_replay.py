"""The replay cache's own rules (``flashinfer._core.replay``): what a signature holds, which
devices may be replayed, the bounds, the reset when the routing is replaced, the switch."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from flashinfer._core import dispatch, replay


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
