"""The stream scratch's rules (``flashinfer._core.scratch``): one buffer per purpose and dtype,
reused while it is long enough, outgrown buffers kept allocated, large temporaries not kept."""

from __future__ import annotations

import pytest
import torch

from flashinfer._core import scratch


@pytest.fixture(autouse=True)
def empty_scratch(monkeypatch):
    monkeypatch.setattr(scratch, "_BUFFERS", {})
    monkeypatch.setattr(scratch, "_RETIRED", [])


def test_a_purpose_reuses_its_buffer_while_it_is_long_enough():
    cpu = torch.device("cpu")
    first = scratch.take(cpu, "partial sums", 100, torch.float32)
    assert first.shape == (100,) and first.dtype == torch.float32
    assert scratch.take(cpu, "partial sums", 60, torch.float32) is first
    # another purpose or dtype: other memory
    other = scratch.take(cpu, "quantized input", 100, torch.float32)
    assert other.data_ptr() != first.data_ptr()
    assert scratch.take(cpu, "partial sums", 100, torch.int32).dtype == torch.int32


def test_an_outgrown_buffer_stays_allocated():
    cpu = torch.device("cpu")
    small = scratch.take(cpu, "partial sums", 100, torch.float32)
    larger = scratch.take(cpu, "partial sums", 150, torch.float32)
    assert larger.numel() == 200  # twice the old size: growing stays rare
    assert scratch._RETIRED == [small]  # a captured graph may still hold its address
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
