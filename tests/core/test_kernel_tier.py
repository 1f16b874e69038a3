"""Kernel tier selection (``flashinfer._core.kernel_tier``): Gluon on Hopper, portable Triton elsewhere.

The device and Triton are stubbed: these tests decide nothing about real hardware, only that the
rules in the module docstring hold.
"""

from __future__ import annotations

import pytest
import torch

from flashinfer._core import kernel_tier
from flashinfer.utils import BackendSupportedError

CUDA0 = torch.device("cuda", 0)


@pytest.fixture
def device(monkeypatch):
    """Set the stubbed device's capability and whether Triton has the Gluon API the kernels use."""

    def set_device(capability, triton_ok=True):
        kernel_tier.gluon_supported.cache_clear()
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
        monkeypatch.setattr(kernel_tier, "_triton_has_gluon", lambda: triton_ok)

    yield set_device
    kernel_tier.gluon_supported.cache_clear()


@pytest.mark.parametrize(
    ("capability", "triton_ok", "expected"),
    [((9, 0), True, True), ((9, 0), False, False), ((8, 9), True, False), ((10, 0), True, False)],
)
def test_auto_takes_gluon_only_on_hopper_with_a_known_triton(
    monkeypatch, device, capability, triton_ok, expected
):
    device(capability, triton_ok)
    monkeypatch.delenv(kernel_tier.KERNEL_TIER_ENV, raising=False)
    assert kernel_tier.use_gluon(CUDA0) is expected
    monkeypatch.setenv(kernel_tier.KERNEL_TIER_ENV, "auto")
    assert kernel_tier.use_gluon(CUDA0) is expected


def test_requested_tier_is_the_variable_as_set_read_on_every_call(monkeypatch):
    monkeypatch.delenv(kernel_tier.KERNEL_TIER_ENV, raising=False)
    assert kernel_tier.requested_tier() == "auto"
    for tier in ("gluon", "tl", "triton"):  # unvalidated: use_gluon rejects 'triton'
        monkeypatch.setenv(kernel_tier.KERNEL_TIER_ENV, tier)
        assert kernel_tier.requested_tier() == tier


def test_kernels_not_yet_measured_run_only_when_forced(monkeypatch, device):
    device((9, 0))
    monkeypatch.delenv(kernel_tier.KERNEL_TIER_ENV, raising=False)
    assert kernel_tier.use_gluon(CUDA0, auto_ok=False) is False
    monkeypatch.setenv(kernel_tier.KERNEL_TIER_ENV, "gluon")
    assert kernel_tier.use_gluon(CUDA0, auto_ok=False) is True


def test_tl_forces_the_portable_kernels(monkeypatch, device):
    device((9, 0))
    monkeypatch.setenv(kernel_tier.KERNEL_TIER_ENV, "tl")
    assert kernel_tier.use_gluon(CUDA0) is False


def test_gluon_forced_where_it_cannot_run_raises(monkeypatch, device):
    monkeypatch.setenv(kernel_tier.KERNEL_TIER_ENV, "gluon")
    device((9, 0))
    assert kernel_tier.use_gluon(CUDA0) is True
    device((8, 0))
    with pytest.raises(BackendSupportedError, match=r"FLASHINFER_KERNEL_TIER=gluon.*compute capability 9\.0"):
        kernel_tier.use_gluon(CUDA0)


def test_unknown_tier_is_rejected(monkeypatch, device):
    device((9, 0))
    monkeypatch.setenv(kernel_tier.KERNEL_TIER_ENV, "triton")
    with pytest.raises(ValueError, match=r"must be 'auto', 'gluon' or 'tl', got 'triton'"):
        kernel_tier.use_gluon(CUDA0)


@pytest.mark.parametrize(
    ("version", "expected"),
    [("3.6.0", True), ("3.6.1", True), ("3.5.1", False), ("3.10.0", False), ("4.0.0", False)]
    + [(f"{major}.{minor}.0", True) for major, minor in kernel_tier.GLUON_TRITON_VERSIONS],
)
def test_gluon_needs_a_triton_it_was_run_with(monkeypatch, version, expected):
    import triton

    kernel_tier._triton_has_gluon.cache_clear()
    monkeypatch.setattr(triton, "__version__", version)
    try:
        # the Gluon modules exist in every Triton that CI installs; the version decides
        assert kernel_tier._triton_has_gluon() is expected
    finally:
        kernel_tier._triton_has_gluon.cache_clear()
