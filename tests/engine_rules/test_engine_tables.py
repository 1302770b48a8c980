"""The engine tables: documented as the code uses them, cited in a form the tiers can check.

`tests/real_sglang` (and `tests/real_vllm` for the installed 0.33.0) check the citations against
the released files themselves; here, without the engines, the tables are checked for shape.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.version import Version

from dflash_tools.engine_rules import ENGINE_RULES, get_rules, latest
from dflash_tools.engine_rules import docs as engine_docs
from dflash_tools.engine_rules.sglang_0_5_23 import derived_target_layer_ids
from dflash_tools.serving.launch import LaunchSettings

SETTING_FIELDS = [name for name in LaunchSettings.__dataclass_fields__ if name != "draft_decode_context_parallel_size"]

ROOT = Path(__file__).resolve().parents[2]
# A cite names files as `package/path/file.py`, each optionally followed by `: Name` or
# `: Class.method`; free text may follow (`tests/engine_sources.py` reads them the same way).
FILE = re.compile(r"(?P<file>[a-z_]+/[\w/]*\.py)(?:: (?P<name>[A-Za-z_][\w.]*))?")


def test_docs_engines_md_is_generated_from_the_tables() -> None:
    assert (ROOT / "docs" / "engines.md").read_text() == engine_docs.render_markdown(), (
        "docs/engines.md is not what the tables say: python -m dflash_tools.engine_rules.docs > docs/engines.md"
    )


@pytest.mark.parametrize("spec", list(ENGINE_RULES))
def test_every_rule_cites_a_file_of_its_engine(spec: str) -> None:
    rules = ENGINE_RULES[spec]
    cites = rules.cites()
    assert len(cites) > 20
    for cite in cites:
        files = [match["file"] for match in FILE.finditer(cite)]
        assert files, f"{spec}: {cite!r} names no package/file.py"
        assert all(file.startswith(f"{rules.engine}/") for file in files), cite


@pytest.mark.parametrize("spec", list(ENGINE_RULES))
def test_every_launch_role_the_launcher_uses_is_in_the_table(spec: str) -> None:
    rules = ENGINE_RULES[spec]
    settings = {role for role, _ in LaunchSettings(**dict.fromkeys(SETTING_FIELDS, 1)).roles()}
    needed = {"program", "target", "algorithm", "draft", "draft-revision", "draft-tokens", "dspark-block-size"}
    # SGLang has no per-step token budget and sizes its memory pool itself.
    needed |= settings - {"max-num-batched-tokens", "gpu-memory-utilization"}
    if rules.engine == "vllm":
        needed = {"program", "target", "speculative-config"} | settings
    assert needed <= {flag.role for flag in rules.launch}
    # The plan writes each setting once per line: no role may name two flags.
    assert all(len(rules.flags(role)) == 1 for role in settings & {flag.role for flag in rules.launch})


def test_key_rules_are_unique_per_key_path_and_family() -> None:
    for spec, rules in ENGINE_RULES.items():
        seen = [(k.key, k.path, k.family) for k in rules.keys]
        assert len(seen) == len(set(seen)), spec
        paths = {route.path for route in rules.routes}
        assert {k.path for k in rules.keys} <= paths, spec
        assert {c.path for c in rules.checks} <= paths, spec


def test_release_names() -> None:
    """A local build label is the release; the newest table of an engine is its last (the list of
    releases itself is pinned once, in test_release_list.py)."""
    assert get_rules("vllm==0.34.0+cpu") is ENGINE_RULES["vllm==0.34.0"]
    assert get_rules("vllm==0.32.0") is None and get_rules("vllm==999.0.0") is None
    for engine in ("sglang", "vllm"):
        tables = [rules for rules in ENGINE_RULES.values() if rules.engine == engine]
        assert latest(engine) is max(tables, key=lambda rules: Version(rules.version))
    assert latest("trtllm") is None


@pytest.mark.parametrize(
    ("layers", "draft_layers", "published"),
    [
        # z-lab/Qwen3-8B-DFlash-b16: 36 target layers, 5 draft layers, dflash_config.target_layer_ids.
        (36, 5, [1, 9, 17, 25, 33]),
        # z-lab's DFlash2 fixture (tests/fixtures/dflash2-config.json): 52 target layers.
        (52, 5, [1, 13, 25, 37, 49]),
    ],
)
def test_sglang_derives_the_layers_z_lab_publishes(layers: int, draft_layers: int, published: list[int]) -> None:
    """Published drafts whose ids follow the evenly-spread rule: derived, SGLang picks the same."""
    assert derived_target_layer_ids(layers, draft_layers) == published


def test_sglang_derivation_refuses_what_sglang_refuses() -> None:
    assert derived_target_layer_ids(36, 1) == [18]
    with pytest.raises(ValueError):
        derived_target_layer_ids(3, 2)
    with pytest.raises(ValueError):
        derived_target_layer_ids(0, 1)
    # z-lab/Qwen3.8-27B-DFlash2 names [5, 19, 33, 47, 61] on a 64-layer target: not the derived
    # layers, so a copy of it without target_layer_ids would be served on the wrong ones.
    assert derived_target_layer_ids(64, 5) != [5, 19, 33, 47, 61]
