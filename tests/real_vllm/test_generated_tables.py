"""The first steps of the vLLM column's load path against the installed release and its transformers.

The vLLM tier's environment is the release with the transformers `.ci/requirements-vllm-RELEASE.txt`
pins. Here:

- the release's table names the transformers range the wheel requires, and the tier pins the
  version the generated table is of;
- `engine_rules/generated/` regenerated from the installed vLLM and transformers is the committed
  one (`python -m dflash_tools.engine_rules.generate_defaults`): a table cannot drift from them;
- on every corpus file, bundled example and load-path case, the column's config resolution and
  filled defaults are what vLLM's own config parser builds (`get_config`'s `HFConfigParser.parse`) (it raises where the column says
  wont-load; the values the column says the class fills are the attributes of vLLM's config
  object), and what transformers' AutoConfig alone does (`transformers_probe.read`).
"""

from __future__ import annotations

import importlib.metadata
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.engine_rules.config_loading import GENERATED, resolve
from dflash_tools.engine_rules.generate_defaults import dump, transformers_json, vllm_json, vllm_root
from dflash_tools.engine_rules.transformers_probe import ask
from tests.real_vllm.conftest import RULES, VLLM_VERSION
from tests.serving.load_path_cases import corpus_and_cases, disagreements

pytestmark = pytest.mark.real_vllm

LOADING = RULES.config_loading
assert LOADING is not None
CONFIGS = corpus_and_cases()

# The transformers table and AutoConfig's answers are the same in every vLLM tier that pins the
# same transformers: checked once, in the tier of the newest such release (CI time).
_SAME_TABLE = [
    rules.version
    for rules in ENGINE_RULES.values()
    if rules.engine == "vllm" and rules.config_loading is not None and rules.config_loading.table == LOADING.table
]
once_per_table = pytest.mark.skipif(
    _SAME_TABLE[-1] != VLLM_VERSION, reason=f"checked in the vLLM {_SAME_TABLE[-1]} tier (same transformers)"
)


def test_the_table_names_the_transformers_the_wheel_requires() -> None:
    wanted = [
        Requirement(line)
        for line in importlib.metadata.requires("vllm") or []
        if Requirement(line).name == "transformers" and Requirement(line).marker is None
    ]
    assert [requirement.specifier for requirement in wanted] == [SpecifierSet(LOADING.transformers)]


def test_the_tier_pins_the_transformers_the_table_is_of() -> None:
    assert importlib.metadata.version("transformers") == LOADING.table
    assert SpecifierSet(LOADING.transformers).contains(LOADING.table)


def test_the_release_data_is_generated_from_the_installed_vllm() -> None:
    root = vllm_root(VLLM_VERSION, [])
    assert root is not None
    assert dump(vllm_json(VLLM_VERSION, root)) == (GENERATED / LOADING.generated).read_text(encoding="utf-8")


@once_per_table
def test_the_transformers_table_is_generated_from_the_installed_transformers(tmp_path: Path) -> None:
    generated = dump(transformers_json(LOADING.table, tmp_path))
    assert generated == (GENERATED / f"transformers-{LOADING.table}.json").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def autoconfig_readings() -> dict[str, dict[str, Any]]:
    """transformers' AutoConfig on every config, in one child process."""
    return ask("read-many", {"configs": CONFIGS})


@once_per_table
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_table_predicts_what_autoconfig_does(name: str, autoconfig_readings: dict[str, dict[str, Any]]) -> None:
    resolution = resolve(CONFIGS[name], LOADING, draft="DRAFT")
    assert disagreements(resolution, autoconfig_readings[name]) == []


def _vllm_config(folder: Path) -> tuple[Any, str | None]:
    """The config object vLLM's HF parser builds (`get_config`'s step for a config.json, called
    without its retry loop, which waits seconds before it gives an error up)."""
    from vllm.transformers_utils.config import get_config_parser

    try:
        return get_config_parser("hf").parse(str(folder), trust_remote_code=False)[1], None
    except Exception as error:
        return None, f"{type(error).__name__}: {error}"


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: v.to_dict() if hasattr(v, "to_dict") else repr(v)))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_column_resolves_the_config_as_vllm_does(name: str) -> None:
    config = CONFIGS[name]
    resolution = resolve(config, LOADING, draft="DRAFT")
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config), encoding="utf-8")
        built, error = _vllm_config(Path(folder))
    assert (resolution.error is None) == (error is None), (resolution.error, error)
    if built is None:
        return
    assert resolution.config_class is not None and resolution.config_class.endswith(type(built).__name__)
    for key, value in resolution.filled.items():
        assert _plain(getattr(built, key, None)) == _plain(value), key
