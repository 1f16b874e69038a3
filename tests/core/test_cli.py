"""The ``flashinfer`` command: FlashInfer's CLI conventions (``--version``, ``show-config``,
``list-modules``, ``module-status``), usage naming the program as invoked."""

from __future__ import annotations

import subprocess
import sys

import pytest

import flashinfer
from flashinfer.__main__ import main


def run(capsys, *argv, prog="flashinfer"):
    """(exit code, stdout, stderr) of one command in this process."""
    try:
        code = main(list(argv), prog=prog)
    except SystemExit as exit:
        code = exit.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_version(capsys):
    assert run(capsys, "--version") == (0, f"flashinfer {flashinfer.__version__}\n", "")


def test_no_command_prints_the_help(capsys):
    code, out, _ = run(capsys)
    assert code == 0
    assert out.startswith("usage: flashinfer [-h] [--version] COMMAND ...")
    for command in ("show-config", "list-modules", "module-status"):
        assert command in out


@pytest.mark.parametrize(
    "argv0,expected",
    [("/usr/local/bin/flashinfer", "flashinfer"), ("/x/flashinfer/__main__.py", "python -m flashinfer")],
)
def test_usage_names_the_program_as_invoked(capsys, monkeypatch, argv0, expected):
    monkeypatch.setattr(sys, "argv", [argv0, "no-such-command"])
    code, _, err = run(capsys, "no-such-command", prog=None)
    assert code == 2
    assert err.startswith(f"usage: {expected} [-h] [--version] COMMAND ...")
    assert f"{expected}: error: argument COMMAND: invalid choice: 'no-such-command'" in err


def test_python_dash_m(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "flashinfer", "--version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert result.stdout == f"python -m flashinfer {flashinfer.__version__}\n"


def test_show_config_lists_the_environment_variables(capsys, monkeypatch):
    monkeypatch.setenv("FLASHINFER_KERNEL_TIER", "tl")
    monkeypatch.delenv("FLASHINFER_LOGLEVEL", raising=False)
    code, out, _ = run(capsys, "show-config")
    assert code == 0
    assert "Environment variables:" in out
    assert "FLASHINFER_KERNEL_TIER     'tl'" in out
    assert "FLASHINFER_LOGLEVEL        not set" in out
    for name in ("FLASHINFER_LOGDEST", "FLASHINFER_FORCE_REFERENCE"):
        assert name in out


def test_list_modules_lists_every_op_with_its_backend_names(capsys):
    from flashinfer.gemm._dispatch import ROUTES as GEMM_ROUTES
    from flashinfer.mla._dispatch import ROUTES as MLA_ROUTES

    code, out, _ = run(capsys, "list-modules")
    assert code == 0
    assert out.startswith("flashinfer.gemm:\n") and "\n\nflashinfer.mla:\n" in out
    for op in (*GEMM_ROUTES, *MLA_ROUTES):
        assert f"  {op}" in out
    assert "  bmm_fp8  [backend: auto, cublas, cudnn, cutlass, mudnn]" in out


def test_list_modules_describes_one_op(capsys):
    from flashinfer.gemm._dispatch import ROUTES

    code, out, _ = run(capsys, "list-modules", "bmm_fp8")
    assert code == 0
    assert out.startswith("bmm_fp8 (flashinfer.gemm)\n  backend names: cudnn, cublas, cutlass, auto, mudnn\n")
    assert "`cutlass`: `A` float8_e4m3fn" in out
    for text in ROUTES["bmm_fp8"].values():
        assert text in out
    # an op with several forms lists each
    _, out, _ = run(capsys, "list-modules", "trtllm_batch_decode_with_kv_cache_mla")
    assert out.count("trtllm_batch_decode_with_kv_cache_mla (") == 4  # title + three forms


def test_list_modules_of_an_unknown_op_is_an_error(capsys):
    code, _, err = run(capsys, "list-modules", "no_such_op")
    assert code == 2
    assert "flashinfer: error: unknown op 'no_such_op'; `flashinfer list-modules` lists them" in err


def test_module_status_says_which_implementation_serves_each_op_here(capsys):
    from flashinfer.gemm._dispatch import ROUTES

    code, out, _ = run(capsys, "module-status")
    assert code == 0
    assert out.startswith("cpu -> reference\n  bmm_bf16\n")
    code, out, _ = run(capsys, "module-status", "--detailed")
    assert f"  bmm_fp8: {ROUTES['bmm_fp8']['reference']}\n" in out
    code, out, _ = run(capsys, "module-status", "--filter", "mate")
    assert "cpu ->" not in out
    code, _, err = run(capsys, "module-status", "--filter", "gpu")
    assert code == 2 and "invalid choice: 'gpu'" in err


def test_list_modules_describes_a_helper_with_its_op(capsys):
    code, out, _ = run(capsys, "list-modules", "get_batch_decode_metadata_mla")
    assert code == 0
    assert out.startswith("get_batch_decode_metadata_mla (flashinfer.decode): the decode's reusable metadata")
    assert "part of trtllm_batch_decode_with_kv_cache_mla:\ntrtllm_batch_decode_with_kv_cache_mla (" in out


def test_show_config_names_every_log_level(capsys):
    from flashinfer.api_logging import LEVELS

    _, out, _ = run(capsys, "show-config")
    line = next(line for line in out.splitlines() if "FLASHINFER_LOGLEVEL" in line)
    for level in LEVELS:
        assert str(level) in line.split("logging:")[1], line


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path):
    """``flashinfer show-config | head -1``: no BrokenPipeError traceback, exit code 0."""
    reader = subprocess.Popen(
        [sys.executable, "-m", "flashinfer", "list-modules"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    reader.stdout.read(1)  # one byte, then the pipe is closed under the writer
    reader.stdout.close()
    stderr = reader.stderr.read().decode()
    assert reader.wait(timeout=60) == 0, stderr
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr, stderr
