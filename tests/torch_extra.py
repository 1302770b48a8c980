"""`require_torch_extra()`: skip a test unless dflash-tools' torch extra is installed whole.

The extra (pyproject.toml, `[project.optional-dependencies] torch`) is what the torch reference
engine needs: torch, numpy and transformers (the target is a Hugging Face causal LM). README's
CPU-index line, `pip install torch --index-url ...`, installs torch alone; until
`pip install '.[torch]'` follows it, the engine answers every run with the install hint
(`errors.TORCH_INSTALL_HINT`). That is right for the tool, but it is not a run of the engine,
so a test of the engine is skipped there instead of failing, as it is without torch.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement  # pytest's own dependency

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def torch_extra_modules() -> list[str]:
    """The torch extra's distributions, read from pyproject.toml; each imports under its own name."""
    requirements = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["torch"]
    return [Requirement(requirement).name.replace("-", "_") for requirement in requirements]


def require_torch_extra() -> ModuleType:
    """torch, once every package of the extra imports; else the test is skipped, naming the missing one."""
    for module in torch_extra_modules():
        pytest.importorskip(module, reason=f"the torch extra is not installed whole: {module} is missing")
    return pytest.importorskip("torch")
