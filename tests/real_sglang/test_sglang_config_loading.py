"""The first steps of the SGLang column's load path against SGLang 0.5.23's wheel and its transformers.

SGLang loads a draft's config with transformers' AutoConfig (`HfModelConfigParser.parse`), its own
config registry registered there (`hf_transformers/common.py`), with the transformers its wheel
pins. Here:

- the table names the transformers the wheel requires;
- `engine_rules/generated/` regenerated from the wheel (SGLang's registry) and from that
  transformers (its config classes' fills) is the committed one: a table cannot drift;
- on every corpus file, bundled example and load-path case, the column's config resolution and
  filled defaults are what that transformers' AutoConfig does (`transformers_probe.read`).

SGLang itself is never imported (conftest.py). `.ci/tier-sglang.sh` unpacks the pinned
transformers, without its dependencies, into the folder `DFLASH_TOOLS_SGLANG_TRANSFORMERS`,
which the probes put first on their path (the environment's own transformers is another one).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from dflash_tools.engine_rules import get_rules
from dflash_tools.engine_rules.config_loading import GENERATED, resolve, transformers_table
from dflash_tools.engine_rules.generate_defaults import dump, sglang_json, transformers_json
from dflash_tools.engine_rules.transformers_probe import ask
from tests.engine_sources import Sources
from tests.real_sglang.conftest import SGLANG_VERSION
from tests.serving.load_path_cases import corpus_and_cases, disagreements

pytestmark = pytest.mark.real_sglang

_rules = get_rules(f"sglang=={SGLANG_VERSION}")
assert _rules is not None and _rules.config_loading is not None
LOADING = _rules.config_loading
CONFIGS = corpus_and_cases()


@pytest.fixture(scope="module")
def pinned_transformers() -> Path:
    folder = os.environ.get("DFLASH_TOOLS_SGLANG_TRANSFORMERS")
    assert folder, "run .ci/tier-sglang.sh: it unpacks SGLang's transformers into DFLASH_TOOLS_SGLANG_TRANSFORMERS"
    return Path(folder)


def test_the_table_names_the_transformers_the_wheel_requires(sglang: Sources) -> None:
    metadata = sglang.read(f"sglang-{SGLANG_VERSION}.dist-info/METADATA")
    assert metadata is not None
    wanted = [
        Requirement(line.split(":", 1)[1].strip())
        for line in metadata.splitlines()
        if re.match(r"Requires-Dist:\s*transformers\b", line) and ";" not in line
    ]
    assert [requirement.specifier for requirement in wanted] == [SpecifierSet(LOADING.transformers)]
    assert SpecifierSet(LOADING.transformers).contains(LOADING.table)


def test_the_release_data_is_generated_from_the_wheel(sglang: Sources) -> None:
    classes = transformers_table(LOADING.table)["model_types"]
    generated = dump(sglang_json(SGLANG_VERSION, sglang.location, classes))
    assert generated == (GENERATED / LOADING.generated).read_text(encoding="utf-8")


def test_the_transformers_table_is_generated_from_the_pinned_transformers(
    pinned_transformers: Path, tmp_path: Path
) -> None:
    generated = dump(transformers_json(LOADING.table, tmp_path, path=pinned_transformers))
    assert generated == (GENERATED / f"transformers-{LOADING.table}.json").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def autoconfig_readings(pinned_transformers: Path) -> dict[str, dict[str, Any]]:
    readings = ask("read-many", {"configs": CONFIGS}, path=pinned_transformers)
    assert {reading["transformers"] for reading in readings.values()} == {LOADING.table}
    return readings


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_table_predicts_what_autoconfig_does(name: str, autoconfig_readings: dict[str, dict[str, Any]]) -> None:
    resolution = resolve(CONFIGS[name], LOADING, draft="DRAFT")
    assert disagreements(resolution, autoconfig_readings[name]) == []
