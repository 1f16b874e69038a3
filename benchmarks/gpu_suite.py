"""Time the GPU test suite on this machine: ``tests/gpu`` as the ``gpu`` and ``gpu-slow`` nox
sessions run it, with pytest-xdist workers.

Each part is one pytest process (``-m "not slow"``, then ``-m slow``); its wall time, counts (from
pytest's JUnit XML) and slowest tests go into one JSON file (RESULTS.md's "GPU suite"). The
packages come from the Python that runs this. Run: ``python benchmarks/gpu_suite.py [--workers 8]
[--json PATH] [-- extra pytest args]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = {"gpu": "not slow", "gpu-slow": "slow"}


def run_part(marker: str, workers: int, extra: list[str]) -> dict:
    """One pytest process over ``tests/gpu`` with ``-m marker``: wall seconds, counts, slowest."""
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder, "junit.xml")
        command = [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-p", "no:cacheprovider", "-m", marker]
        command += [f"--junitxml={junit}", "-W", "ignore"] + (["-n", str(workers)] if workers > 1 else [])
        start = time.perf_counter()
        finished = subprocess.run(command + extra, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        print(finished.stdout[-3000:], finished.stderr[-2000:], sep="\n", flush=True)
        cases = ET.parse(junit).getroot().iter("testcase") if junit.exists() else []
        rows = []
        for case in cases:
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            rows.append(
                (float(case.get("time", 0.0)), f"{case.get('classname')}::{case.get('name')}", outcome)
            )
    counts = {
        outcome: sum(1 for row in rows if row[2] == outcome)
        for outcome in ("passed", "failed", "error", "skipped")
    }
    rows.sort(reverse=True)
    return {
        "marker": marker,
        "command": " ".join(command[1:] + extra),
        "returncode": finished.returncode,
        "wall_s": round(wall, 1),
        "test_s": round(sum(row[0] for row in rows), 1),
        "counts": counts,
        "not_passed": [name for _, name, outcome in rows if outcome in ("failed", "error")],
        "slowest": [[round(seconds, 2), name] for seconds, name, _ in rows[:15]],
    }


def device_name() -> str:
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    except ImportError:
        return "no torch"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8, help="pytest-xdist workers (1: none)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "workers": args.workers,
        "parts": {name: run_part(PARTS[name], args.workers, args.extra) for name in args.parts},
    }
    for name, part in results["parts"].items():
        print(f"{name}: {part['wall_s']} s wall, {part['counts']}, rc {part['returncode']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return max(part["returncode"] for part in results["parts"].values())


if __name__ == "__main__":
    sys.exit(main())
