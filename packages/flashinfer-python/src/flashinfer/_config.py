"""The report printed by ``python -m flashinfer show-config``.

Everything in it is read from this process: installed distributions, the optional runtimes
(found without importing MATE), the devices PyTorch sees, and for each op and device the
implementation a call would take, resolved by the same code the ops use.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import platform

import torch

from ._core import dispatch
from ._core import mate as mate_loader

DISTRIBUTIONS = ("flashinfer-python", "flashinfer-core", "flashinfer-gemm", "flashinfer-mla")
OP_PACKAGES = ("flashinfer.gemm._dispatch", "flashinfer.mla._dispatch")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _runtimes() -> list[tuple[str, str]]:
    rows = [("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})")]
    if importlib.util.find_spec("torch_musa") is None:
        rows.append(("torch_musa", "not installed"))
    else:
        rows.append(("torch_musa", _version("torch_musa")))
    if importlib.util.find_spec("mate") is None:
        rows.append(("MATE", "not installed"))
    elif mate_loader.mate_version() is None:
        rows.append(("MATE", "not installed (an unrelated package named `mate` is present)"))
    else:
        rows.append(("MATE", mate_loader.mate_version()))
    rows.append(("triton", _version("triton") if dispatch.triton_available() else "not installed"))
    return rows


def _devices() -> list[torch.device]:
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    musa = getattr(torch, "musa", None)
    if musa is not None and musa.is_available():
        devices += [torch.device("musa", i) for i in range(musa.device_count())]
    return devices


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"
    if device.type == "musa":
        return torch.musa.get_device_name(device)
    return f"{platform.processor() or platform.machine()} CPU"


def _implementation_note(kind: str) -> str:
    if kind == "mate" and mate_loader.mate_version() is None:
        return " -- MATE is missing: calls raise LibraryError"
    return ""


def show_config() -> str:
    """The full report as text."""
    lines = ["flashinfer (FlashInfer v0.6.17 API for MUSA and every PyTorch device)", "", "Distributions:"]
    lines += [f"  {d:<20} {_version(d)}" for d in DISTRIBUTIONS]
    lines += ["", "Runtimes:"]
    lines += [f"  {name:<20} {value}" for name, value in _runtimes()]
    forced = dispatch.force_reference()
    lines += [
        "",
        f"{dispatch.FORCE_REFERENCE_ENV}: {'set (every device runs the reference)' if forced else 'not set'}",
    ]
    devices = _devices()
    lines += ["", "Devices:"]
    lines += [f"  {str(d):<20} {_device_name(d)}" for d in devices]
    for package in OP_PACKAGES:
        try:
            table = importlib.import_module(package).DESCRIPTION
        except ImportError:
            continue
        lines += ["", f"Implementations ({package.rsplit('.', 1)[0]}):"]
        for device in devices:
            kind = dispatch.implementation_kind(device)
            lines.append(f"  on {device} -> {kind}{_implementation_note(kind)}")
            width = max(map(len, table)) + 2
            for op, by_kind in table.items():
                lines.append(f"    {op:<{width}}{by_kind[kind]}")
    return "\n".join(lines)
