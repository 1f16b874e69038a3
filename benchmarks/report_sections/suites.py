"""RESULTS.md's test-run sections: the GPU suite and the headline rows per Triton release."""

from __future__ import annotations

from report_sections import FILES, data_line, load, prose, sci


def triton_releases() -> str:
    """Per Triton release: the gpu session and the headline rows next to Triton 3.6, same call."""
    run = load("triton_releases")
    head = ["row"] + [f"Triton {r['release']}: us (3.6 same call), ratio" for r in run["runs"]]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    kernels = {}
    for i, row in enumerate(run["runs"][0]["base"]["rows"]):
        cells = [row["row"]]
        for r in run["runs"]:
            base, other = r["base"]["rows"][i], r["under_release"]["rows"][i]
            if "us" not in base or "us" not in other:
                cells.append("not run")
                continue
            cells.append(f"{other['us']:.1f} ({base['us']:.1f}), {base['us'] / other['us']:.2f}x")
            kernels.setdefault(row["row"], set()).update({tuple(other["kernels"]), tuple(base["kernels"])})
        lines.append("| " + " | ".join(cells) + " |")
    differ = [name for name, taken in kernels.items() if len(taken) > 1]
    taken = "; ".join(f"{name}: {' / '.join(', '.join(k) for k in sorted(t))}" for name, t in kernels.items())
    same = "the same under every release" if not differ else f"differing for {', '.join(differ)}"
    suites = ", ".join(
        f"{r['release']} {r['gpu_session']['tests'] - r['gpu_session']['failures'] - r['gpu_session']['errors']}"
        f" of {r['gpu_session']['tests']} passed"
        for r in run["runs"]
    )
    base = run["base_gpu_session"]
    suites += (
        f"; under the machine's Triton {base['release']}, at {base['commit']} in a later call: "
        f"{base['gpu_session']['tests'] - base['gpu_session']['failures'] - base['gpu_session']['errors']} "
        f"of {base['gpu_session']['tests']} passed. `examples/fp8_mla_decode.py` in that call: "
        + ", ".join(
            f"under {release} OK (max relative error {sci(e['max_relative_error'])})"
            for release, e in base["example"].items()
        )
    )
    devices = sorted({r["under_release"]["device"] for r in run["runs"]})
    return (
        f"```\n{run['command']}\n```\n\n"
        + prose(
            f"{', '.join(devices)}, {run['runs'][0]['base']['date'][:10]}, torch "
            f"{run['runs'][0]['base']['torch']}; packages at {run['commit']}. The `gpu` session's tests "
            f'(`tests/gpu -m "not slow"`) under each release: {suites}. Each cell: time per call '
            "under the release, in parentheses under Triton 3.6 in the same call, and 3.6's time over "
            "the release's (above 1: the release is faster). CUDA-graph replays, medians. "
            f"The kernels `auto` launched, {same}: {taken}."
        )
        + "\n\n"
        + "\n".join(lines)
        + "\n\n"
        + data_line("triton_releases")
    )


def gpu_suite() -> str:
    """The GPU test suite's run: command, wall time, counts, and every test that did not pass."""
    run = load("gpu_suite")
    lines = []
    for name, part in run["parts"].items():
        counts = part["counts"]
        total = sum(counts.values())
        tally = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        command = (
            f"python benchmarks/gpu_suite.py --workers {run['workers']} --parts {name} "
            f"--json benchmarks/results/{FILES['gpu_suite']}"
        )
        head = (
            f'The `{name}` nox session\'s selection (`tests/gpu -m "{part["marker"]}"`), {run["workers"]} '
            f"pytest-xdist workers, {run['device']}, {run['cpus']} CPU cores, {run['date'][:10]}: "
            f"{part['wall_s']:.0f} s wall, {total} tests: {tally}."
        )
        lines.append(f"```\n{command}\n```\n\n" + prose(head))
        if part["not_passed"]:
            lines.append("\nNot passed:\n")
            lines += [f"- `{test.rpartition('::')[2]}`" for test in sorted(part["not_passed"])]
    missing = [name for name in ("gpu", "gpu-slow") if name not in run["parts"]]
    if missing:
        lines.append("\n" + prose(f"Not in this run: {', '.join(f'`{m}`' for m in missing)}."))
    return "\n".join(lines) + "\n\n" + data_line("gpu_suite")


BLOCKS = {"triton_releases": triton_releases, "gpu_suite": gpu_suite}
