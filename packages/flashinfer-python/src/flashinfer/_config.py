"""What ``python -m flashinfer show-config`` prints, and the README's routing tables.

Everything in the report is read from this process: installed distributions, the optional
runtimes (found without importing MATE), the devices PyTorch sees, and for each op and device
the implementation a call would take, resolved by the same code the ops use. The routing prose
comes from one place, ``ROUTES`` and the backend tables in each op package's ``_dispatch.py``;
:func:`routes_markdown` renders the same data as the README's tables.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import platform

import torch

from ._core import dispatch
from ._core import mate as mate_loader

DISTRIBUTIONS = ("flashinfer-python", "flashinfer-core", "flashinfer-gemm", "flashinfer-mla")
# op package -> its dispatch module (ROUTES, BACKEND_TABLES)
OP_PACKAGES = {"flashinfer.gemm": "flashinfer.gemm._dispatch", "flashinfer.mla": "flashinfer.mla._dispatch"}
DEVICE_COLUMNS = (("reference", "CPU and other devices"), ("cuda", "CUDA"), ("mate", "MUSA"))


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _op_packages():
    """``(package, dispatch module)`` of every op package installed here."""
    for package, module in OP_PACKAGES.items():
        try:
            yield importlib.import_module(package), importlib.import_module(module)
        except ImportError:
            continue


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
    for package, routing in _op_packages():
        lines += ["", f"Implementations ({package.__name__}):"]
        width = max(map(len, routing.ROUTES)) + 2
        for device in devices:
            kind = dispatch.implementation_kind(device)
            lines.append(f"  on {device} -> {kind}{_implementation_note(kind)}")
            lines += [f"    {op:<{width}}{by_kind[kind]}" for op, by_kind in routing.ROUTES.items()]
    return "\n".join(lines)


def _backend_default(package, function: str):
    fn = getattr(package, function, None)
    parameter = inspect.signature(fn).parameters.get("backend") if fn is not None else None
    return None if parameter is None else parameter.default


def _code(op: str) -> str:
    # `name` (qualifier): only the function name is code
    name, _, qualifier = op.partition(" ")
    return f"`{name}`" + (f" {qualifier}" if qualifier else "")


def routes_markdown() -> str:
    """The README's two tables: what runs per op and device, and the backend names per function."""
    header = "| op | " + " | ".join(title for _, title in DEVICE_COLUMNS) + " |"
    lines = [header, "|---" * (len(DEVICE_COLUMNS) + 1) + "|"]
    packages = list(_op_packages())
    for _, routing in packages:
        for op, by_kind in routing.ROUTES.items():
            names = ", ".join(_code(name.strip()) for name in op.split(","))
            lines.append(f"| {names} | " + " | ".join(by_kind[kind] for kind, _ in DEVICE_COLUMNS) + " |")
    lines += ["", "| function | backend names | rules kept |", "|---|---|---|"]
    for package, routing in packages:
        for table in routing.BACKEND_TABLES:
            if not table.names:
                continue
            default = _backend_default(package, table.function)
            names = ", ".join(f"`{n}`" + (" (default)" if n == default else "") for n in table.names)
            rules = "; ".join(f"`{name}`: {rule}" for name, rule in table.notes.items()) or "none"
            lines.append(f"| `{table.function}` | {names} | {rules} |")
    return "\n".join(lines)
