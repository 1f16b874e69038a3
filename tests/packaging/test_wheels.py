"""The four wheels: contents, metadata and installs in fresh environments."""

from __future__ import annotations

import zipfile
from email.parser import Parser

from conftest import ROOT, VERSION, check
from packaging.requirements import Requirement

IMPORT_GEMM = (
    "import torch, flashinfer.gemm as g, flashinfer.utils as u;"
    "a = torch.randn(1, 4, 8, dtype=torch.bfloat16); b = torch.randn(1, 8, 3, dtype=torch.bfloat16);"
    "out = g.bmm_bf16(a, b);"
    "assert out.shape == (1, 4, 3) and torch.allclose(out.float(), (a.float() @ b.float()), atol=0.1);"
    "assert u.BackendSupportedError;"
    "print(g.__file__)"
)
IMPORT_MLA = (
    "import flashinfer.rope, flashinfer.decode, flashinfer.mla;"
    "assert flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla is "
    "flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla;"
    "assert callable(flashinfer.decode.get_batch_decode_metadata_mla);"
    "assert callable(flashinfer.rope.mla_rope_quantize_fp8);"
    "print(flashinfer.rope.__file__)"
)
IMPORT_ALL = (
    "import flashinfer, importlib.metadata as md;"
    f"assert flashinfer.__version__ == {VERSION!r};"
    f"assert md.version('flashinfer-python') == md.version('flashinfer_python') == {VERSION!r};"
    "assert callable(flashinfer.bmm_fp8) and callable(flashinfer.bmm_bf16);"
    "[getattr(flashinfer, m) for m in ('gemm', 'rope', 'decode', 'mla', 'utils', 'prefill')];"
    "print(flashinfer.__file__)"
)


def _files(wheel) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if ".dist-info/" not in n}


def _metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(name).decode())


def test_no_file_in_two_wheels(wheels):
    seen: dict[str, str] = {}
    for dist, wheel in wheels.items():
        for path in _files(wheel):
            assert path not in seen, f"{path} is shipped by both {seen[path]} and {dist}"
            seen[path] = dist


def test_only_the_metapackage_ships_the_package_init(wheels):
    for dist, wheel in wheels.items():
        has_init = "flashinfer/__init__.py" in _files(wheel)
        assert has_init == (dist == "flashinfer-python"), dist


def test_the_metapackage_records_the_commit_it_was_built_from(wheels):
    """``flashinfer.__git_version__``: the commit of the checkout the wheel was built from, which
    its sdist carries to the wheel (``packages/flashinfer-python/hatch_build.py``)."""
    head = check(["git", "-C", str(ROOT), "rev-parse", "HEAD"]).strip()
    with zipfile.ZipFile(wheels["flashinfer-python"]) as z:
        info = z.read("flashinfer/_build_info.py").decode()
    assert f"GIT_COMMIT = '{head}" in info, info


def test_versions_and_dependencies(wheels):
    for dist, wheel in wheels.items():
        meta = _metadata(wheel)
        assert meta["Version"] == VERSION
        requires = meta.get_all("Requires-Dist") or []
        names = [r.split(";")[0].strip() for r in requires]
        assert not any(
            n.split("=")[0].split(">")[0].strip().lower() in ("mate", "torch-musa", "torch_musa")
            for n in names
        )
        for req in names:
            if req.startswith("torch"):
                assert req.replace(" ", "").startswith("torch>="), (
                    f"{dist}: torch must have a lower bound only, got {req}"
                )
    meta_requires = _metadata(wheels["flashinfer-python"]).get_all("Requires-Dist")
    for dist in ("flashinfer-core", "flashinfer-gemm", "flashinfer-mla"):
        assert f"{dist}=={VERSION}" in [r.replace(" ", "") for r in meta_requires], meta_requires
    # torch warns "Failed to initialize NumPy" on every import without numpy: the distribution
    # every other one depends on brings it
    core_requires = _metadata(wheels["flashinfer-core"]).get_all("Requires-Dist")
    assert "numpy" in [Requirement(r).name for r in core_requires], core_requires
    for dist in ("flashinfer-gemm", "flashinfer-mla"):
        requires = [r.replace(" ", "") for r in _metadata(wheels[dist]).get_all("Requires-Dist")]
        assert f"flashinfer-core=={VERSION}" in requires, (dist, requires)


def test_gemm_alone(make_env):
    env = make_env()
    env.install("flashinfer-gemm")
    env.python_ok(IMPORT_GEMM)
    env.python_fails("import flashinfer.rope")
    err = env.python_fails("import flashinfer.mla")
    assert "shipped by the flashinfer-mla distribution" in err and f"flashinfer-mla=={VERSION}" in err, err
    env.python_fails("from flashinfer import bmm_fp8")
    env.python_ok("import importlib.util; assert importlib.util.find_spec('flashinfer.mla') is None")


def test_mla_alone(make_env):
    env = make_env()
    env.install("flashinfer-mla")
    env.python_ok(IMPORT_MLA)
    err = env.python_fails("import flashinfer.gemm")
    assert "shipped by the flashinfer-gemm distribution" in err, err


def test_all_in_different_orders(make_env):
    for order in (
        ["flashinfer-python"],
        ["flashinfer-core", "flashinfer-gemm", "flashinfer-mla", "flashinfer-python"],
        ["flashinfer-mla", "flashinfer-python", "flashinfer-gemm"],
    ):
        env = make_env()
        for name in order:
            env.install(name)
        env.python_ok(IMPORT_ALL + ";" + IMPORT_GEMM + ";" + IMPORT_MLA)
        report = check_show_config(env)
        assert "flashinfer-gemm" in report and "reference" in report
        # the console script the metapackage installs, named as invoked
        version = check([env.path / "bin" / "flashinfer", "--version"], cwd=env.path)
        assert version.strip() == f"flashinfer {VERSION}"


def check_show_config(env) -> str:
    from conftest import check

    return check([env.python, "-m", "flashinfer", "show-config"], cwd=env.path)


def test_uninstall_one_keeps_the_others(make_env):
    env = make_env()
    env.install("flashinfer-python")
    env.uninstall("flashinfer-python")
    env.python_ok(IMPORT_GEMM + ";" + IMPORT_MLA)
    env.python_fails("import flashinfer; flashinfer.__version__")
    env.uninstall("flashinfer-gemm")
    env.python_ok(IMPORT_MLA)
    env.python_fails("import flashinfer.gemm")
    env.install("flashinfer-gemm")
    env.uninstall("flashinfer-mla")
    env.python_ok(IMPORT_GEMM)
    env.python_fails("import flashinfer.rope")


def test_editable_install_of_all_four(make_env):
    """Editable portions live in four folders: only extend_path in the root makes them one package."""
    env = make_env()
    env.install("flashinfer-core", "flashinfer-gemm", "flashinfer-mla", "flashinfer-python", editable=True)
    out = env.python_ok(IMPORT_ALL + ";" + IMPORT_GEMM + ";" + IMPORT_MLA)
    assert "packages/flashinfer-python/src" in out and "packages/flashinfer-gemm/src" in out


def test_root_without_extend_path_breaks_editable_installs(make_env, tmp_path):
    """The control for the test above: the same layout, the root's extend_path line removed."""
    from conftest import DISTRIBUTIONS

    env = make_env()
    env.install("flashinfer-core", "flashinfer-gemm", "flashinfer-mla", editable=True)
    root_src = DISTRIBUTIONS["flashinfer-python"] / "src" / "flashinfer"
    broken = tmp_path / "broken" / "flashinfer"
    broken.mkdir(parents=True)
    for f in root_src.glob("*.py"):
        text = f.read_text()
        if f.name == "__init__.py":
            assert "pkgutil.extend_path" in text
            text = text.replace("__path__ = pkgutil.extend_path(__path__, __name__)", "")
        (broken / f.name).write_text(text)
    site = next((env.path / "lib").glob("python*/site-packages"))
    (site / "broken_root.pth").write_text(str(broken.parent) + "\n")
    err = env.python_fails("import flashinfer")
    assert "ImportError" in err or "ModuleNotFoundError" in err, err
