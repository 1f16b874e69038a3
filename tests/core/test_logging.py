"""Logging: FlashInfer's ``FLASHINFER_LOGLEVEL`` / ``FLASHINFER_LOGDEST`` API-call logging, and the
one warning per op and reason when a GPU tensor runs the reference.

The variables are read once, at import, as upstream reads them: each level runs in a fresh
process.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

CALL = textwrap.dedent(
    """
    import inspect, torch
    import flashinfer.gemm as G
    A = torch.arange(2 * 4 * 8, dtype=torch.float32).view(2, 4, 8).to(torch.bfloat16)
    B = torch.ones(2, 8, 3, dtype=torch.bfloat16)
    out = G.bmm_bf16(A, B)
    print("wrapped" if hasattr(G.bmm_bf16, "__wrapped__") else "plain")
    print("hooks", G.bmm_bf16.is_backend_supported("tgv"), "skip_check" in str(inspect.signature(G.bmm_bf16)))
    print("result", tuple(out.shape), out.dtype)
    """
)


def run_logged(level: str | None, dest: str | None = None, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_LOG")}
    if level is not None:
        env["FLASHINFER_LOGLEVEL"] = level
    if dest is not None:
        env["FLASHINFER_LOGDEST"] = dest
    return subprocess.run(
        [sys.executable, "-c", CALL],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=True,
        timeout=120,
    )


def test_level_0_is_the_default_and_leaves_the_functions_unwrapped():
    for level in (None, "0"):
        result = run_logged(level)
        assert result.stdout.splitlines() == ["plain", "hooks True False", "result (2, 4, 3) torch.bfloat16"]
        assert result.stderr == ""


def test_level_1_logs_the_function_name_before_the_call():
    result = run_logged("1")
    calls = [line for line in result.stdout.splitlines() if "FlashInfer API Call" in line]
    assert len(calls) == 1
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] FlashInfer API Call: bmm_bf16", calls[0])
    assert "Tensor(" not in result.stdout
    # the wrapper keeps FlashInfer's hooks and the public signature
    assert "wrapped" in result.stdout and "hooks True False" in result.stdout


def test_level_3_logs_arguments_defaults_and_the_output_without_statistics():
    log = run_logged("3").stdout
    assert "FlashInfer API Call: bmm_bf16" in log
    assert (
        "Positional input arguments:\n  arg[0]:\n    Tensor(\n      shape=(2, 4, 8)\n      stride=(32, 8, 1)"
        in log
    )
    assert "dtype=torch.bfloat16" in log and "device=cpu" in log and "is_contiguous=True" in log
    assert "Default parameters (not explicitly provided):" in log
    assert "  backend= [DEFAULT]\n    'auto'" in log and "  out_dtype= [DEFAULT]\n    torch.bfloat16" in log
    assert "Output value:\n  Tensor(\n    shape=(2, 4, 3)" in log
    assert "min=" not in log


def test_level_5_adds_tensor_statistics():
    log = run_logged("5").stdout
    first = log.split("arg[0]:", 1)[1].split("arg[1]:", 1)[0]
    assert "min=0.000000" in first and "max=63.000000" in first and "mean=31.500000" in first
    assert "nan_count=0" in first and "inf_count=0" in first


def test_level_10_logs_as_level_5_and_says_it_writes_no_dumps():
    log = run_logged("10").stdout
    assert "writes no tensor dumps" in log and "nan_count=0" in log


def test_destinations_stderr_and_a_file_per_process(tmp_path):
    result = run_logged("1", "stderr")
    assert "FlashInfer API Call: bmm_bf16" in result.stderr and "FlashInfer API Call" not in result.stdout
    result = run_logged("1", str(tmp_path / "api_%i.log"))
    assert "FlashInfer API Call" not in result.stdout + result.stderr
    (log,) = tmp_path.glob("api_*.log")
    assert re.fullmatch(r"api_\d+\.log", log.name)
    assert "FlashInfer API Call: bmm_bf16" in log.read_text()


def test_a_level_that_is_not_a_number_leaves_logging_off_and_says_so():
    result = run_logged("verbose")
    assert "FlashInfer API Call" not in result.stdout
    assert "FLASHINFER_LOGLEVEL='verbose' is not an integer" in result.stderr
    assert "plain" in result.stdout


# ---------------------------------------------------------------------------------------------
# a GPU tensor running the reference: one warning per op and reason


@pytest.fixture
def warnings_seen(monkeypatch, caplog):
    """The fallback warnings of this test (CPU counts as a GPU here; the record starts empty)."""
    from flashinfer._core import fallback

    monkeypatch.setattr(fallback, "_QUIET_DEVICES", frozenset())
    monkeypatch.setattr(fallback, "_warned", set())
    caplog.set_level(logging.WARNING, logger="flashinfer")

    def seen():
        return [r.getMessage() for r in caplog.records if r.name == "flashinfer"]

    return seen


def test_fp8_below_sm89_warns_once_per_op(monkeypatch, warnings_seen):
    import flashinfer.gemm as G
    from flashinfer._core import dispatch
    from flashinfer.gemm import _cuda

    # the CUDA module takes the reference before any kernel below sm_89: no Triton needed
    monkeypatch.setattr(dispatch, "_triton_present", lambda: True)
    monkeypatch.setattr(
        dispatch, "ROUTING", dispatch.ROUTING.routed("cpu", "cuda")._replace(force_reference=False)
    )
    monkeypatch.setattr(_cuda, "get_compute_capability", lambda device=None: (8, 0))
    A = torch.randn(2, 16, 32).to(torch.float8_e4m3fn)
    B = torch.randn(2, 32, 16).to(torch.float8_e4m3fn)
    one = torch.ones(())
    for _ in range(3):
        out = G.bmm_fp8(A, B, one, one, torch.bfloat16)
    torch.testing.assert_close(out.float(), (A.float() @ B.float()).bfloat16().float())
    (message,) = warnings_seen()
    assert "bmm_fp8 runs the PyTorch reference implementation on cpu" in message
    assert "compute capability 8.9+, this GPU has 8.0" in message


def test_mate_without_the_op_warns_once(mate_standin, warnings_seen):
    """MATE has no dense MLA decode: MUSA runs the reference, and says so once."""
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla as decode

    query = torch.randn(1, 1, 4, 576).to(torch.float8_e4m3fn)
    args = dict(
        query=query, kv_cache=torch.randn(2, 16, 576).to(torch.float8_e4m3fn),
        workspace_buffer=torch.zeros(1024, dtype=torch.uint8), qk_nope_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, block_tables=torch.tensor([[0, 1]], dtype=torch.int32),
        seq_lens=torch.tensor([20], dtype=torch.int32), max_seq_len=32, bmm1_scale=0.1,
    )  # fmt: skip
    decode(**args)
    decode(**args)
    (message,) = warnings_seen()
    assert (
        "trtllm_batch_decode_with_kv_cache_mla (dense)" in message
        and "MATE has no dense MLA decode" in message
    )


def test_forced_reference_on_a_gpu_device_is_said_once_per_package(monkeypatch, warnings_seen):
    from flashinfer._core import dispatch
    from flashinfer.gemm._dispatch import DISPATCH

    monkeypatch.setattr(dispatch, "ROUTING", dispatch.ROUTING._replace(force_reference=True))
    cuda = torch.device("cuda", 0)
    assert DISPATCH.module(cuda).__name__ == "flashinfer.gemm._reference"
    DISPATCH.module(cuda)
    (message,) = warnings_seen()
    assert "every flashinfer.gemm op runs the PyTorch reference implementation on cuda:0" in message
    assert "FLASHINFER_FORCE_REFERENCE=1 is set" in message


def test_cpu_tensors_never_warn(caplog):
    import flashinfer.gemm as G

    caplog.set_level(logging.WARNING, logger="flashinfer")
    G.bmm_bf16(torch.randn(1, 4, 4).bfloat16(), torch.randn(1, 4, 4).bfloat16())
    assert not [r for r in caplog.records if r.name == "flashinfer"]
