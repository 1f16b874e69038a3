"""The NVIDIA path sends its kernels exactly what the version that ran on the H200 sent them.

``launch_protocol.py`` records, on CPU with a stubbed device, every launch (Triton kernels through
``FastLaunch``/``TunedLaunch``, ``torch._scaled_mm``, ``torch.bmm``) of 273 public calls: FP8 and
BF16 decode, sparse and paged, split and not, sinks, LSE, float and tensor scales, strided outputs,
the packed cache, RoPE, every GEMM API, on a stubbed H200 (auto, tl and gluon tiers, few
multiprocessors), L40 and A100. ``launch_protocol_main.jsonl`` is that record taken from main at
09113a1, whose Gluon MLA decode and Gluon GEMM kernels ran on an H200, re-recorded for the 26
block-scaled GEMM calls whose launches the Gluon GEMM work changed on purpose (the Gluon kernel's
``HALVES`` and 128 x 256 tile, the grouped GEMMs on the Gluon tier under ``auto``), with the
kernels of that commit run on an H200 (``benchmarks/notes_gluon_gemm.md``), and for the 4 packed
656-byte calls of the stubbed H200's ``auto`` tier, which the Gluon kernel's packed mode took over
(its launches recorded at the commit whose kernels passed the packed GPU tests and memcheck on an
H100, ``benchmarks/results/packed_mla_h100.json``); every other launch is the 09113a1 record's. Grid, every positional
argument (tensors by which caller tensor they are, byte offset, shape, strides and dtype; TMA
descriptors by every field) and every keyword argument must be equal, but for the deliberate
changes listed in :data:`CHANGES` (each says why).

This guards the launch protocol of kernels CI cannot run: a refactoring of the host code that
changes what a kernel receives fails here. Record a new reference only for a deliberate change,
with the change written into :data:`CHANGES` or the reference re-recorded from a GPU-validated
commit (``python tests/core/launch_protocol.py --out tests/core/launch_protocol_main.jsonl``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_protocol import loads

HERE = Path(__file__).parent
GLUON_DECODE_COMBINE = "flashinfer.mla.kernels.mla_decode_gluon._COMBINE"


def _combine_takes_sink_in_lse(launch: dict) -> dict:
    """main's Gluon decode launched the shared combine kernel without its ``SINK_IN_LSE`` constexpr
    (added with the packed cache, which only the portable kernel serves): Triton raises for the
    missing argument, so every split Gluon decode failed. The 576-wide form keeps the LSE
    without sinks: ``SINK_IN_LSE=False``."""
    if launch["launcher"] != GLUON_DECODE_COMBINE:
        return launch
    return {**launch, "kwargs": {**launch["kwargs"], "SINK_IN_LSE": False}}


DECODE_LAUNCHERS = (
    "flashinfer.mla.kernels.mla_decode._DECODE",
    "flashinfer.mla.kernels.mla_decode_gluon._DECODE",
)


def _decode_takes_slot_page(launch: dict) -> dict:
    """The decode kernels read caches whose pages are padded apart (FlashMLA's) with a
    ``SLOT_PAGE`` constexpr: slots per page, 0 for the flat pools of every recorded call."""
    if launch["launcher"] not in DECODE_LAUNCHERS:
        return launch
    return {**launch, "kwargs": {**launch["kwargs"], "SLOT_PAGE": 0}}


def _decode_cache_by_pointer(launch: dict) -> dict:
    """The decode kernels take the caller's cache tensor itself, no longer a flat view of it: the
    kernel reads only its pointer and dtype (strides are passed apart), a view costs host time on
    every call, and a padded page stride has no flat view. Its shape and strides are therefore
    not part of the protocol (applied to the record and the reference alike)."""
    if launch["launcher"] not in DECODE_LAUNCHERS:
        return launch
    args = list(launch["args"])
    args[1] = {key: value for key, value in args[1].items() if key not in ("shape", "stride")}
    return {**launch, "args": args}


def _decode_qk_precision(launch: dict) -> dict:
    """Hopper keeps an FP8 wgmma chain's running sum at reduced precision, which cost the LSE its
    3e-4 rule over 576 columns (found in the packed-cache decode's work): the Gluon decode sums
    FP8 Q K^T from four 128-column chains in float32 (``QK_CHAINS=4``; one chain for BF16, exact
    already), the portable kernel promotes every 64 columns (``QK_IMPRECISE_ACC=64``, ``benchmarks/decode_qk_precision.py``)."""
    kwargs = launch["kwargs"]
    if launch["launcher"] == DECODE_LAUNCHERS[0]:
        return {**launch, "kwargs": {**kwargs, "QK_IMPRECISE_ACC": 64}}
    if launch["launcher"] == DECODE_LAUNCHERS[1]:
        chains = 4 if launch["args"][0]["dtype"] == "torch.float8_e4m3fn" else 1
        return {**launch, "kwargs": {**kwargs, "QK_CHAINS": chains}}
    return launch


def _gluon_decode_packed_mode(launch: dict) -> dict:
    """The Gluon decode gained the packed 656-byte form: ``P_PARTS`` became a tile
    field (1 for FP8's fp16 P, 2 for BF16's hi + lo, as the kernel chose before), ``PACKED``,
    ``LENGTH_MODE`` and ``SINK_IN_LSE`` are passed (False, ``Lengths.CAUSAL``, False for the
    576-wide form)."""
    if launch["launcher"] != DECODE_LAUNCHERS[1] or "PACKED" in launch["kwargs"]:
        return launch  # not the Gluon decode, or recorded with the packed mode (re-recorded cases)
    parts = 1 if launch["args"][0]["dtype"] == "torch.float8_e4m3fn" else 2
    added = {"P_PARTS": parts, "PACKED": False, "LENGTH_MODE": 0, "SINK_IN_LSE": False}
    return {**launch, "kwargs": {**launch["kwargs"], **added}}


def _gluon_decode_exact_bf16_max(launch: dict) -> dict:
    """The Gluon decode raises a BF16 row's running maximum exactly (from the packed-cache
    decode's work: one bf16 ``P`` meets upstream's BF16 bound once the largest ``P`` is exactly 1,
    and the second ``P V`` of the two-part ``P`` cost 12% at B128 H128): ``P_PARTS`` is gone (one
    part everywhere),
    ``MAX_SLACK_LOG2`` is passed (0 for BF16 rows, the lazy 8 for FP8 and the packed form)."""
    if launch["launcher"] != DECODE_LAUNCHERS[1]:
        return launch
    kwargs = {key: value for key, value in launch["kwargs"].items() if key != "P_PARTS"}
    bf16 = launch["args"][0]["dtype"] == "torch.bfloat16" and not kwargs["PACKED"]
    return {**launch, "kwargs": {**kwargs, "MAX_SLACK_LOG2": {"float": "0.0" if bf16 else "8.0"}}}


GEMM_KERNEL_FAMILIES = {"fp8_bmm": "bmm", "gluon_fp8_bmm": "bmm"} | dict.fromkeys(
    ("fp8_blockwise", "gluon_fp8_blockwise", "fp8_quantize"), "blockwise"
)


def _gemm_kernels_in_family_folders(launch: dict) -> dict:
    """The GEMM kernel modules moved into family folders (``flashinfer.gemm.kernels.bmm``,
    ``.blockwise``): a launcher is named by the module that holds it, so the reference's
    ``flashinfer.gemm.kernels.<module>`` reads ``flashinfer.gemm.kernels.<family>.<module>``. What
    the kernels receive is unchanged."""
    prefix = "flashinfer.gemm.kernels."
    module, _, holder = launch["launcher"].removeprefix(prefix).partition(".")
    if not launch["launcher"].startswith(prefix) or module not in GEMM_KERNEL_FAMILIES:
        return launch
    return {**launch, "launcher": f"{prefix}{GEMM_KERNEL_FAMILIES[module]}.{module}.{holder}"}


# Deliberate differences from the reference record: (why, launch -> expected launch).
CHANGES = [
    _combine_takes_sink_in_lse,
    _decode_takes_slot_page,
    _decode_cache_by_pointer,
    _decode_qk_precision,
    _gluon_decode_packed_mode,
    _gluon_decode_exact_bf16_max,
    _gemm_kernels_in_family_folders,
]
# What is compared of both records (why, launch -> what is compared).
COMPARED = [_decode_cache_by_pointer]


def _each_launch(record: dict, change) -> dict:
    return {
        case: [change(launch) for launch in launches] if isinstance(launches, list) else launches
        for case, launches in record.items()
    }


def expected_record() -> dict:
    reference = loads((HERE / "launch_protocol_main.jsonl").read_text())
    for change in CHANGES:
        reference = _each_launch(reference, change)
    return reference


@pytest.fixture(scope="module")
def record() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FLASHINFER_KERNEL_TIER")}
    result = subprocess.run(
        [sys.executable, str(HERE / "launch_protocol.py"), "--out", "-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    recorded = loads(result.stdout)
    for compared in COMPARED:
        recorded = _each_launch(recorded, compared)
    return recorded


def test_every_reference_case_is_recorded(record):
    assert sorted(record) == sorted(expected_record())


def test_launches_match_the_reference(record):
    expected = expected_record()
    differing = [case for case in expected if record.get(case) != expected[case]]
    assert not differing, (
        f"{len(differing)} calls launch differently, first: {differing[0]}\n"
        + _first_difference(expected[differing[0]], record.get(differing[0]))
    )


def test_the_record_covers_every_launcher(record):
    launchers = {
        launch["launcher"]
        for launches in record.values()
        if isinstance(launches, list)
        for launch in launches
    }
    assert {
        "flashinfer.mla.kernels.mla_decode_gluon._DECODE",
        GLUON_DECODE_COMBINE,
        "flashinfer.mla.kernels.mla_decode._DECODE",
        "flashinfer.mla.kernels.mla_decode._COMBINE",
        "flashinfer.mla.kernels.rope_quantize._ROPE_QUANTIZE",
        "flashinfer.gemm.kernels.blockwise.gluon_fp8_blockwise._LAUNCH",
        "flashinfer.gemm.kernels.bmm.gluon_fp8_bmm._LAUNCH",
        "flashinfer.gemm.kernels.blockwise.fp8_blockwise._TUNED",
        "flashinfer.gemm.kernels.bmm.fp8_bmm._TUNED",
        "flashinfer.gemm.kernels.blockwise.fp8_quantize._LAUNCH",
        "torch._scaled_mm",
    } <= launchers


def _first_difference(expected, got, path="") -> str:
    if type(expected) is not type(got):
        return f"{path}: expected {expected!r}, got {got!r}"
    if isinstance(expected, dict):
        for key in sorted(set(expected) | set(got)):
            if expected.get(key) != got.get(key):
                return _first_difference(expected.get(key), got.get(key), f"{path}/{key}")
    if isinstance(expected, list):
        if len(expected) != len(got):
            return f"{path}: {len(expected)} items expected, {len(got)} recorded"
        for i, (e, g) in enumerate(zip(expected, got)):
            if e != g:
                return _first_difference(e, g, f"{path}[{i}]")
    return f"{path}: expected {expected!r}, got {got!r}"


def test_a_repeated_call_signature_replays_the_same_launches():
    """A second call of a signature on new memory, replayed (``flashinfer._core.replay``), sends
    the kernels exactly what the whole path sends for that call: for every recorded case that a
    replay serves (and the decode cases again with ``out=``, as engines call it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FLASHINFER_KERNEL_TIER")}
    result = subprocess.run(
        [sys.executable, str(HERE / "launch_protocol.py"), "--replays", "--out", "-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout)
    differing = [case for case, (_, equal) in outcomes.items() if not equal]
    assert not differing, f"{len(differing)} replays launch differently, first: {differing[0]}"
    replayed = {case.split(" @ ")[0] for case, (hit, _) in outcomes.items() if hit}
    # the serving calls of each op with a replay
    for case in (
        "sparse float8_e4m3fn, out=",
        "sparse e4m3, metadata, out=",
        "sparse bfloat16, 3-D out=",
        "paged bfloat16, out=",
        "rope 2-D K, merged outputs (sglang)",
        "blockscale sm90 bf16 + fp8 weight",
        "blockscale sm90 fp8 + fp8, per-row weight scales",
    ):
        assert case in replayed
