"""What the ``flashinfer`` command prints (``show-config``, ``list-modules``, ``module-status``),
and the README's routing tables.

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
import os
import platform

import torch

from . import api_logging
from ._core import dispatch, kernel_tier
from ._core import mate as mate_loader

DISTRIBUTIONS = ("flashinfer-python", "flashinfer-core", "flashinfer-gemm", "flashinfer-mla")
# op package -> its dispatch module (ROUTES, BACKEND_TABLES)
OP_PACKAGES = {"flashinfer.gemm": "flashinfer.gemm._dispatch", "flashinfer.mla": "flashinfer.mla._dispatch"}
DEVICE_COLUMNS = (("reference", "CPU and other devices"), ("cuda", "CUDA"), ("mate", "MUSA"))
# the environment variables this package reads, and what they do
ENVIRONMENT = (
    (api_logging.LOG_LEVEL_ENV, "API-call logging: 0 (off), 1, 3, 5, 10 (FlashInfer's levels; 10 logs as 5)"),
    (api_logging.LOG_DEST_ENV, "where API calls are logged: stdout, stderr or a file (%i: process id)"),
    (dispatch.FORCE_REFERENCE_ENV, "1: every device runs the PyTorch reference"),
    (kernel_tier.KERNEL_TIER_ENV, "CUDA kernel tier: auto, gluon (Hopper) or tl (portable Triton)"),
)


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
    lines += ["", "Environment variables:"]
    for name, meaning in ENVIRONMENT:
        value = os.environ.get(name)
        lines.append(f"  {name:<26} {'not set' if value is None else repr(value):<12} {meaning}")
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


def _ops():
    """``(package name, op, {kind: what runs}, its function names)`` of every op here."""
    for package, routing in _op_packages():
        for op, by_kind in routing.ROUTES.items():
            functions = [name.strip().split(" ")[0] for name in op.split(",")]
            yield package.__name__, op, by_kind, functions


def list_ops() -> str:
    """``list-modules``: the ops by package, with the backend names each function accepts."""
    tables = {t.function: t for _, routing in _op_packages() for t in routing.BACKEND_TABLES}
    lines, current = [], None
    for package, op, _, functions in _ops():
        if package != current:
            lines += [""] * bool(lines) + [f"{package}:"]
            current = package
        names = sorted({n for f in functions if f in tables for n in tables[f].names})
        lines.append(f"  {op}" + (f"  [backend: {', '.join(names)}]" if names else ""))
    return "\n".join(lines)


# public functions that are part of an op rather than ops of their own: name -> (module, op, what)
HELPERS = {
    "get_batch_decode_metadata_mla": (
        "flashinfer.decode",
        "trtllm_batch_decode_with_kv_cache_mla",
        "the decode's reusable metadata (its schedule), made by the implementation that serves the "
        "decode on the query's device",
    ),
}


def describe_op(name: str) -> str | None:
    """``list-modules OP``: what each implementation runs for ``name`` (None: no such op)."""
    if name in HELPERS:
        module, op, what = HELPERS[name]
        return f"{name} ({module}): {what}; part of {op}:\n" + describe_op(op)
    rows = [(package, op, by_kind) for package, op, by_kind, functions in _ops() if name in functions]
    if not rows:
        return None
    lines = [f"{name} ({rows[0][0]})"]
    for _, routing in _op_packages():
        for table in routing.BACKEND_TABLES:
            if table.function == name and table.names:
                lines.append(f"  backend names: {', '.join(table.names)}")
                lines += [f"  `{n}`: {rule}" for n, rule in table.notes.items()]
    for _, op, by_kind in rows:
        lines.append(f"  {op}:")
        lines += [f"    {title}: {by_kind[kind]}" for kind, title in DEVICE_COLUMNS]
    return "\n".join(lines)


def _tier(device: torch.device) -> str:
    if device.type != "cuda":
        return ""
    try:
        gluon = kernel_tier.use_gluon(device)
    except Exception as error:  # FLASHINFER_KERNEL_TIER asks for a tier this device cannot run
        return f" (kernel tier: {error})"
    return " (kernel tier: Gluon on Hopper where an op has a Gluon kernel)" if gluon else " (kernel tier: tl)"


def op_status(detailed: bool = False, kind: str | None = None) -> str:
    """``module-status``: which implementation serves each op on each device present."""
    lines = []
    for device in _devices():
        served = dispatch.implementation_kind(device)
        if kind is not None and served != kind:
            continue
        lines += [""] * bool(lines) + [f"{device} -> {served}{_tier(device)}{_implementation_note(served)}"]
        for _, op, by_kind, _ in _ops():
            lines.append(f"  {op}" + (f": {by_kind[served]}" if detailed else ""))
    return "\n".join(lines) if lines else f"no device here is served by {kind}"
