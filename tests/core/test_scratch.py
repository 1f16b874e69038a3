"""The stream scratch's rules (``flashinfer._core.scratch``): one buffer per purpose and dtype,
reused while it is long enough, grown by doubling, large temporaries and those of a call being
captured into a CUDA graph not kept."""

from __future__ import annotations

import pytest
import torch

from flashinfer._core import scratch


@pytest.fixture(autouse=True)
def empty_scratch(monkeypatch):
    monkeypatch.setattr(scratch, "_BUFFERS", {})


def test_a_purpose_reuses_its_buffer_while_it_is_long_enough():
    cpu = torch.device("cpu")
    first = scratch.take(cpu, "partial sums", 100, torch.float32)
    assert first.shape == (100,) and first.dtype == torch.float32
    assert scratch.take(cpu, "partial sums", 60, torch.float32) is first
    # another purpose or dtype: other memory
    other = scratch.take(cpu, "quantized input", 100, torch.float32)
    assert other.data_ptr() != first.data_ptr()
    assert scratch.take(cpu, "partial sums", 100, torch.int32).dtype == torch.int32


def test_an_outgrown_buffer_is_replaced_by_one_twice_its_size():
    cpu = torch.device("cpu")
    small = scratch.take(cpu, "partial sums", 100, torch.float32)
    larger = scratch.take(cpu, "partial sums", 150, torch.float32)
    assert larger.numel() == 200  # twice the old size: growing stays rare
    assert scratch._BUFFERS[(cpu, 0, "partial sums", torch.float32)] is larger and larger is not small
    assert scratch.take(cpu, "partial sums", 120, torch.float32) is larger


def test_large_temporaries_are_allocated_per_call(monkeypatch):
    monkeypatch.setattr(scratch, "MAX_BYTES", 1024)
    cpu = torch.device("cpu")
    big = scratch.take(cpu, "partial sums", 257, torch.float32)
    assert big.numel() == 257 and not scratch._BUFFERS
    assert scratch.take(cpu, "partial sums", 257, torch.float32) is not big
    # growth stops at the cap
    scratch.take(cpu, "counters", 200, torch.int32)
    assert scratch.take(cpu, "counters", 201, torch.int32).numel() == 256


def test_zeroed_buffers_start_zero():
    counters = scratch.take(torch.device("cpu"), "counters", 1000, torch.int32, zeroed=True)
    assert counters.numel() == 1000 and not counters.any()


def test_a_call_being_captured_gets_its_own_memory(monkeypatch):
    """A CUDA graph never holds a scratch buffer's address (eager calls between its replays would
    write under it; torch.compile's graph trees reject allocations that outlive the call)."""
    cpu = torch.device("cpu")
    kept = scratch.take(cpu, "partial sums", 100, torch.float32)
    monkeypatch.setattr(scratch, "_capturing", lambda device: True)
    during = scratch.take(cpu, "partial sums", 100, torch.float32)
    counters = scratch.take(cpu, "counters", 100, torch.int32, zeroed=True)
    assert during is not kept and during.numel() == 100 and not counters.any()
    assert set(scratch._BUFFERS) == {(cpu, 0, "partial sums", torch.float32)}
