"""What pip does to an installed ``flashinfer-python==0.6.17+musa`` when an engine pins FlashInfer.

The README's install section rests on these: a pin of ``0.6.17`` accepts our ``0.6.17+musa``
(PEP 440 ignores the local label of a candidate when the pin has none); a pin of another
version makes pip replace ours with that version's wheel, unless a constraints file pins ours
(pip then refuses) or the engine is installed with ``--no-deps``. The "upstream" wheel and the
engines here are stand-ins built by the test: a ``flashinfer/__init__.py`` and two metadata-only
engines.
"""

from __future__ import annotations

import zipfile

from conftest import VERSION, run

UPSTREAM_VERSION = "0.6.8"
READ_VERSION = "import importlib.metadata as md; print(md.version('flashinfer-python'))"


def _wheel(folder, name, version, requires=(), files=None):
    """A minimal pure-Python wheel: METADATA, WHEEL, RECORD and the given files."""
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    contents = dict(files or {})
    contents[f"{info}/METADATA"] = metadata
    contents[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    contents[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in [*contents, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as z:
        for path, text in contents.items():
            z.writestr(path, text)


def test_engine_pins(make_env, tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    upstream_init = f"__version__ = {UPSTREAM_VERSION!r}\n"
    _wheel(index, "flashinfer-python", UPSTREAM_VERSION, files={"flashinfer/__init__.py": upstream_init})
    _wheel(index, "engine-same", "1.0", requires=["flashinfer-python==0.6.17"])
    _wheel(index, "engine-other", "1.0", requires=[f"flashinfer-python=={UPSTREAM_VERSION}"])
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"flashinfer-python=={VERSION}\n")

    env = make_env()
    env.install("flashinfer-python")

    def pip(*args):
        return run([env.python, "-m", "pip", "install", "--no-index", "--find-links", str(index), *args])

    assert pip("engine-same").returncode == 0
    assert env.python_ok(READ_VERSION).strip() == VERSION

    refused = pip("-c", str(constraints), "engine-other")
    assert refused.returncode != 0 and "ResolutionImpossible" in refused.stderr, refused.stderr
    assert env.python_ok(READ_VERSION).strip() == VERSION

    assert pip("--no-deps", "engine-other").returncode == 0
    assert env.python_ok(READ_VERSION).strip() == VERSION
    env.python_ok("import flashinfer; assert flashinfer.__version__ == '0.6.17+musa'")

    assert pip("engine-other").returncode == 0  # no protection: ours is replaced
    assert env.python_ok(READ_VERSION).strip() == UPSTREAM_VERSION
    env.python_ok(f"import flashinfer; assert flashinfer.__version__ == {UPSTREAM_VERSION!r}")
