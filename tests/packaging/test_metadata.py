"""What each wheel and sdist tells an installer: licence, description, classifiers, extras."""

from __future__ import annotations

import tarfile
import zipfile
from email.parser import Parser

from conftest import DISTRIBUTIONS, ROOT, VERSION
from packaging.requirements import Requirement

LICENCE = (ROOT / "LICENSE").read_bytes()


def _wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(name).decode())


def test_root_licence_is_the_apache_2_text():
    text = LICENCE.decode()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"], text[:200]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply" in text
    for path in DISTRIBUTIONS.values():  # hatchling packs files of the project folder only
        assert (path / "LICENSE").read_bytes() == LICENCE, f"{path}/LICENSE differs from the root LICENSE"


def test_licence_in_every_wheel(wheels):
    for dist, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
            assert len(names) == 1, f"{dist}: {z.namelist()}"
            assert z.read(names[0]) == LICENCE, dist
        meta = _wheel_metadata(wheel)
        assert meta["License-Expression"] == "Apache-2.0", dist
        assert meta.get_all("License-File") == ["LICENSE"], dist


def test_licence_and_readme_in_every_sdist(sdists):
    for dist, sdist in sdists.items():
        top = f"{dist.replace('-', '_')}-{VERSION}"
        with tarfile.open(sdist) as t:
            assert t.extractfile(f"{top}/LICENSE").read() == LICENCE, dist
            readme = t.extractfile(f"{top}/README.md").read()
        assert readme == (DISTRIBUTIONS[dist] / "README.md").read_bytes(), dist


def test_long_description_is_the_distribution_readme(wheels):
    for dist, wheel in wheels.items():
        meta = _wheel_metadata(wheel)
        readme = (DISTRIBUTIONS[dist] / "README.md").read_text()
        assert meta["Description-Content-Type"] == "text/markdown", dist
        assert meta.get_payload().strip() == readme.strip(), dist
        assert len(readme.splitlines()) >= 15, f"{dist}: README.md is too short to describe it"


def test_classifiers_and_urls(wheels):
    for dist, wheel in wheels.items():
        meta = _wheel_metadata(wheel)
        classifiers = meta.get_all("Classifier") or []
        assert "Programming Language :: Python :: 3 :: Only" in classifiers, dist
        assert "Operating System :: POSIX :: Linux" in classifiers, dist
        assert not [c for c in classifiers if c.startswith("License ::")], (
            "PEP 639: the licence is an expression"
        )
        urls = meta.get_all("Project-URL") or []
        assert any("github.com/flashinfer-ai/flashinfer/tree/v0.6.17" in u for u in urls), (dist, urls)


def test_triton_is_an_extra_never_a_dependency(wheels):
    for dist, wheel in wheels.items():
        meta = _wheel_metadata(wheel)
        requires = meta.get_all("Requires-Dist") or []
        triton = [r for r in requires if r.startswith("triton")]
        if dist == "flashinfer-core":  # no Triton kernels of its own
            assert triton == [] and meta.get_all("Provides-Extra") is None, requires
        else:
            assert len(triton) == 1, (dist, requires)
            req = Requirement(triton[0])
            assert str(req.specifier) == ">=3.6", (dist, req)
            assert req.marker.evaluate({"extra": "triton"}) and not req.marker.evaluate({"extra": ""}), req
            assert meta.get_all("Provides-Extra") == ["triton"], dist


def test_one_torch_lower_bound_everywhere(wheels):
    bounds = set()
    for wheel in wheels.values():
        requires = _wheel_metadata(wheel).get_all("Requires-Dist") or []
        bounds |= {r.replace(" ", "") for r in requires if r.startswith("torch")}
    assert bounds == {"torch>=2.11"}, bounds
