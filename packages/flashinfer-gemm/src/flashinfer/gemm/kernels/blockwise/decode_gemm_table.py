"""Launch shapes of the decode-size GEMM (:mod:`.fp8_decode_gemm`), measured on the H200.

Written by ``benchmarks/decode_gemm_sweep.py --write-table`` into ``decode_gemm_table.json``
beside this module (data, one row a line, so that a new sweep's diff reads row by row): for each
``(n, k, multiprocessors)`` the fastest launch shape ``(block_n, block_m, split, stages, warps,
tma, swap[, gluon])`` of its sweep per row count, and whether cuBLASLt's block-scaled GEMM was
faster still, as ``(max_m, config, cublas_ahead)`` rows in increasing ``max_m``: ``TABLE`` for the
portable kernel, ``GLUON_TABLE`` for the Gluon tier (the fastest launch there of either kernel:
the Gluon one, :mod:`.gluon_fp8_decode_gemm`, or the portable one, ``gluon`` False). Shapes not
listed take the kernel's heuristic. In the file a key ``(n, k, multiprocessors)`` is the string
``"n,k,multiprocessors"`` and tuples are lists; here they are tuples again.
"""

from __future__ import annotations

import json
from pathlib import Path

PATH = Path(__file__).with_suffix(".json")


def dumps(tables: dict[str, dict]) -> str:
    """The text of ``decode_gemm_table.json`` holding ``tables`` (``{"TABLE": ..., "GLUON_TABLE":
    ...}`` as this module has them)."""
    names = []
    for name, table in tables.items():
        shapes = []
        for (n, k, num_sms), rows in table.items():
            lines = ",\n".join(
                f"      {json.dumps([max_m, list(config), ahead])}" for max_m, config, ahead in rows
            )
            shapes.append(f'    "{n},{k},{num_sms}": [\n{lines}\n    ]')
        names.append(f'  "{name}": {{\n' + ",\n".join(shapes) + "\n  }")
    return "{\n" + ",\n".join(names) + "\n}\n"


def _from_json(table: dict) -> dict:
    return {
        tuple(map(int, shape.split(","))): [(max_m, tuple(config), ahead) for max_m, config, ahead in rows]
        for shape, rows in table.items()
    }


_TABLES = {name: _from_json(table) for name, table in json.loads(PATH.read_text()).items()}
TABLE: dict = _TABLES["TABLE"]
GLUON_TABLE: dict = _TABLES["GLUON_TABLE"]
