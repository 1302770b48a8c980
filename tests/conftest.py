"""Shared test set-up: no network, no colour, a fixed terminal, real checkpoints on disk."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dflash_tools_testing as testing
from tests.hub_server import HubServer, point_huggingface_hub_at

# Set before anything imports huggingface_hub (it reads these once at import).
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "200"
os.environ.pop("HF_TOKEN", None)
os.environ.pop("DFLASH_TOOLS_FORMAT", None)
os.environ.pop("DFLASH_TOOLS_DEBUG", None)

# torch creates /tmp/torchinductor_<user> when the engine tests import it, and hypothesis its
# ./.hypothesis (example database, cached constants); the suite must leave nothing behind, so both
# go into a scratch folder removed when the session ends (pytest's own cache is off too:
# `-p no:cacheprovider` in pyproject's addopts). Child processes inherit the variables.
# Tests import this module a second time as `tests.conftest`: the variable makes that import
# reuse the folder instead of making one that nothing removes.
if "_DFLASH_TOOLS_TEST_SCRATCH" not in os.environ:
    os.environ["_DFLASH_TOOLS_TEST_SCRATCH"] = tempfile.mkdtemp(prefix="dflash-tools-tests-")
    os.environ.setdefault(
        "TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ["_DFLASH_TOOLS_TEST_SCRATCH"]) / "torchinductor")
    )
    os.environ.setdefault(
        "HYPOTHESIS_STORAGE_DIRECTORY", str(Path(os.environ["_DFLASH_TOOLS_TEST_SCRATCH"]) / "hypothesis")
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(os.environ["_DFLASH_TOOLS_TEST_SCRATCH"], ignore_errors=True)


@pytest.fixture(autouse=True)
def _isolated_hf_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets an empty Hugging Face home, so no test sees a real cache or login."""
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))


CheckpointFactory = Callable[..., Path]


@pytest.fixture
def make_checkpoint(tmp_path: Path) -> CheckpointFactory:
    """make_checkpoint(dialect, spec=None, name=None, **kwargs) -> folder with a real checkpoint."""
    counter = {"n": 0}

    def factory(dialect: str, spec: testing.DraftSpec | None = None, name: str | None = None, **kwargs: Any) -> Path:
        counter["n"] += 1
        if spec is None:
            spec = default_spec(dialect)
        return testing.write_checkpoint(tmp_path / (name or f"{dialect}-{counter['n']}"), dialect, spec, **kwargs)

    return factory


def assert_bundle_is(bundled: Path, written: dict[str, Path], *, max_bytes: int) -> None:
    """`bundled` holds exactly the folders a generator just `written` (name -> folder), byte for
    byte and file for file, and stays under `max_bytes` in all."""
    assert sorted(p.name for p in bundled.iterdir()) == sorted(written)
    for name, folder in written.items():
        assert sorted(p.name for p in (bundled / name).iterdir()) == sorted(p.name for p in folder.iterdir())
        for file in sorted(folder.iterdir()):
            assert (bundled / name / file.name).read_bytes() == file.read_bytes(), f"{name}/{file.name}"
    total = sum(p.stat().st_size for p in bundled.rglob("*") if p.is_file())
    assert total < max_bytes


def default_spec(dialect: str) -> testing.DraftSpec:
    if "dspark" in dialect:
        return testing.TINY_DSPARK
    if "dflash2" in dialect:
        return testing.TINY_DFLASH2
    return testing.TINY


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """A local server imitating the Hub's API and file endpoints, with huggingface_hub pointed at it."""
    server = HubServer().start()
    point_huggingface_hub_at(monkeypatch, tmp_path, server.url)
    yield server
    server.stop()
