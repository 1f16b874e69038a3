"""The replay cache's own rules (``flashinfer._core.replay``): what a signature holds, which
devices may be replayed, the bound, the reset when the routing is replaced, the switch."""

from __future__ import annotations

import torch

from flashinfer._core import dispatch, replay


def test_a_tensor_key_holds_layout_dtype_device_and_alignment():
    base = torch.empty(64, dtype=torch.uint8)
    a, b = base[:32].view(4, 8), base[1:33].view(4, 8)
    assert replay.tensor_key(a) == ((4, 8), (8, 1), torch.uint8, a.device, a.data_ptr() & 15)
    assert replay.tensor_key(a) != replay.tensor_key(b)  # one byte along: another remainder
    assert replay.tensor_key(a) != replay.tensor_key(a.t())
    assert replay.optional_tensor_key(None) is None


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


def test_replays_are_bounded_and_emptied_with_a_new_routing(monkeypatch):
    monkeypatch.setattr(replay, "MAX_REPLAYS", 2)
    replays = replay.Replays()
    for i in range(3):
        replays.put(replays.key(i), f"replay {i}")
    assert replays.get(replays.key(0)) is None and replays.get(replays.key(2)) == "replay 2"
    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "cuda"))
    assert replays.get(replays.key(2)) is None


def test_the_key_holds_the_kernel_tier_asked_for(monkeypatch):
    replays = replay.Replays()
    monkeypatch.setenv("FLASHINFER_KERNEL_TIER", "tl")
    tl = replays.key(1)
    monkeypatch.setenv("FLASHINFER_KERNEL_TIER", "gluon")
    assert replays.key(1) != tl


def test_the_switch_turns_replays_off(monkeypatch):
    monkeypatch.setattr(replay, "ENABLED", False)
    monkeypatch.setattr(
        dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "cuda")._replace(force_reference=False)
    )
    assert not replay.Replays().serves(torch.empty(1))
