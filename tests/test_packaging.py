"""What `pip install 'dflash-tools[vllm]'` resolves to is a vLLM the plugin patches.

The extra is read from pyproject.toml and matched with `packaging` (pip's own version logic)
against vLLM's published releases and the next ones that could appear.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from dflash_tools.vllm_plugin.fingerprints import SUPPORTED_VERSIONS

ROOT = Path(__file__).resolve().parents[1]
# vLLM on PyPI up to today (a fact of PyPI: a new release joins it once it is published,
# docs/adding-an-engine-release.md).
PUBLISHED = ["0.31.0", "0.32.0", "0.33.0", "0.34.0"]


def next_releases() -> list[str]:
    """Releases that do not exist yet but a resolver would take: the next patch, minor and major
    release after the newest the plugin patches."""
    newest = max(map(Version, SUPPORTED_VERSIONS))
    return [
        f"{newest.major}.{newest.minor}.{newest.micro + 1}",
        f"{newest.major}.{newest.minor + 1}.0",
        f"{newest.major + 1}.0.0",
    ]


def vllm_extra() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (requirement,) = [Requirement(r) for r in project["optional-dependencies"]["vllm"]]
    assert requirement.name == "vllm"
    return requirement


def test_a_fresh_resolution_lands_on_a_supported_release() -> None:
    specifier = vllm_extra().specifier
    unpublished = sorted(set(SUPPORTED_VERSIONS) - set(PUBLISHED), key=Version)
    assert not unpublished, f"add {unpublished} to PUBLISHED here once on PyPI (docs/adding-an-engine-release.md)"
    admitted = [v for v in PUBLISHED if specifier.contains(v)]
    # pip takes the newest admitted release: it must be one the plugin patches.
    assert max(admitted, key=Version) in SUPPORTED_VERSIONS
    # Every supported release stays installable with the extra (an existing older one is kept).
    missing = sorted(set(SUPPORTED_VERSIONS) - set(admitted), key=Version)
    assert not missing, f"pyproject.toml's vllm extra ({specifier}) does not admit {missing}"
    assert [v for v in admitted if v not in SUPPORTED_VERSIONS] == []


def test_a_later_release_is_not_pulled_in_before_the_plugin_knows_it() -> None:
    specifier = vllm_extra().specifier
    assert [v for v in next_releases() if specifier.contains(v)] == []


def test_the_wheel_carries_the_examples_and_not_the_fixture_factory(tmp_path: Path) -> None:
    """The bundled examples ship (`example:NAME`); the checkout's fixture factory and demo training
    (`dflash_tools_testing/`, which nothing in the package imports) do not. Built as pip builds it."""
    import subprocess
    import sys
    import zipfile

    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps", "-q"]
        + ["-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"dflash_tools"}
    assert not [name for name in names if name.startswith("dflash_tools/testing/")]
    examples = ROOT / "dflash_tools" / "examples"
    bundled = {str(p.relative_to(ROOT)) for p in examples.rglob("*") if p.is_file()}
    assert bundled and bundled <= set(names)
