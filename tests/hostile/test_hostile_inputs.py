"""Hostile inputs to plan, presets, the engine views, convert's reads and the Python API.

Every case of tests/hostile/input_cases.py ends cleanly (one JSON document, the expected exit
code and cause, within its bound, nothing beside OUT); fuzzed presets and shard indexes end in a
UsageError or a finding naming the file, never another exception; the Python API takes
`os.PathLike` and the engine names the CLI takes, and answers wrong argument types with the
project's own errors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

import dflash_tools_testing as testing
from dflash_tools import (
    PlanDraft,
    PlanRequest,
    convert_checkpoint,
    inspect_checkpoint,
    plan_conversion,
    plan_launch,
)
from dflash_tools.convert.build import IndexRefused, rewritable_index
from dflash_tools.draft.target import load_target
from dflash_tools.errors import UsageError
from dflash_tools.plan.presets import validate_preset
from dflash_tools.reading.checkpoint import INDEX_NAME, LoadedCheckpoint, parse_index
from tests.hostile.input_cases import CASES, Case, build_fixtures, problems, run_case

FUZZ_SEED = 27
FUZZED = 300


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile-inputs")
    build_fixtures(folder)
    return folder


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_input_case_ends_cleanly(case: Case, root: Path) -> None:
    outcome = run_case(case, root)
    assert not problems(outcome, root), problems(outcome, root)


# --- fuzzed presets and indexes -------------------------------------------------------------------

# Values a field may be given instead of the right one: wrong types, NaN and the infinities,
# numbers beyond 64 bits, empty and nested containers.
HOSTILE_VALUES: list[Any] = [
    None,
    True,
    "eight",
    "",
    -1,
    0,
    2**63,
    2**64,
    float("nan"),
    float("inf"),
    -float("inf"),
    1e308,
    [],
    [1, [2]],
    {},
    {"a": {"b": [None]}},
    "\ud800",
]


def _good_preset() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "name": "fuzz",
        "target": "org/target",
        "drafts": [{"draft": "org/draft", "floor": {"mean_acceptance_length": 3.0, "provenance": "a run"}}],
        "num_speculative_tokens": 7,
        "max_tokens": 64,
        "num_prompts": 4,
        "chat": True,
        "engine_args": {"max_num_seqs": 8, "gpu_memory_utilization": 0.9},
        "env": {"A": "1"},
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _set(document: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        document = document[part]
    document[path[-1]] = value


def test_fuzzed_presets_are_usage_errors_naming_the_field_or_valid() -> None:
    generator = random.Random(FUZZ_SEED)
    paths = _paths(_good_preset())
    refused = 0
    for _ in range(FUZZED):
        preset = _good_preset()
        for path in generator.sample(paths, generator.randint(1, 3)):
            with contextlib.suppress(KeyError, IndexError, TypeError):  # a parent already replaced
                _set(preset, path, generator.choice(HOSTILE_VALUES))
        try:
            validate_preset(preset, "preset fuzz.json")
        except UsageError as exc:
            refused += 1
            assert exc.message.startswith("preset fuzz.json: ") and "\n" not in exc.message, exc.message
            assert len(exc.message) < 2000
    # Nearly every mutation breaks the preset; a few (a name of "", chat of true) are still valid.
    # The reader before the schema accepted 32 of these 300 (strings and 1e308 in engine_args).
    assert refused >= FUZZED - 10


def _index_bytes(generator: random.Random) -> bytes:
    good = json.dumps({"metadata": {"total_size": 8}, "weight_map": {"a.weight": "model-1.safetensors"}}).encode()
    kind = generator.randrange(6)
    if kind == 0:  # cut anywhere
        return good[: generator.randrange(len(good))]
    if kind == 1:  # random bytes
        return bytes(generator.randrange(256) for _ in range(generator.randrange(1, 200)))
    if kind == 2:  # one byte replaced (often not UTF-8)
        at = generator.randrange(len(good))
        return good[:at] + bytes([generator.randrange(128, 256)]) + good[at + 1 :]
    if kind == 3:  # the weight map or the document replaced by a hostile value
        value = generator.choice(HOSTILE_VALUES)
        document: Any = value if generator.random() < 0.5 else {"weight_map": value}
        return json.dumps(document).encode()
    if kind == 4:  # deep
        levels = generator.choice([100, 1_000, 50_000])
        return b'{"weight_map": ' + b"[" * levels + b"]" * levels + b"}"
    entries = {f"t{i}": generator.choice(["../x", "/etc/passwd", "", 7, None, "m.safetensors"]) for i in range(5)}
    return json.dumps({"weight_map": entries}).encode()


def test_fuzzed_indexes_are_findings_naming_the_file(tmp_path: Path) -> None:
    generator = random.Random(FUZZ_SEED)
    unusable = 0
    for number in range(FUZZED):
        data = _index_bytes(generator)
        loaded = LoadedCheckpoint(source="fuzz", kind="local", location=str(tmp_path), config=None, config_text=None)
        weight_map = parse_index(data, loaded)
        if weight_map is None:
            unusable += 1
            (finding,) = [f for f in loaded.findings if f.code == "DFT004"]
            assert finding.message.startswith(INDEX_NAME) and finding.file == INDEX_NAME
        folder = tmp_path / str(number)
        folder.mkdir()
        (folder / INDEX_NAME).write_bytes(data)
        try:
            rewritable_index(folder)
        except IndexRefused as exc:
            assert weight_map is None, "convert refuses an index inspect accepts"
            assert str(folder / INDEX_NAME) in exc.message and exc.findings[0].code == "DFT004"
        else:
            assert weight_map is not None, "convert rewrites an index inspect refuses"
    assert unusable > FUZZED // 2


# --- the Python API -------------------------------------------------------------------------------


def test_the_api_takes_paths_and_the_engine_names_the_cli_takes(root: Path, tmp_path: Path) -> None:
    draft, target = root / "draft", root / "target"
    report = inspect_checkpoint(draft, target=target)
    assert report.description is not None and report.target is not None
    assert load_target(target).num_hidden_layers == testing.TINY.num_target_layers
    from dflash_tools.engine_rules import ENGINE_RULES

    for engines, count in (("sglang", 1), (["all"], len(ENGINE_RULES)), (["sglang", "vllm==0.34.0"], 2)):
        assert len(plan_conversion(draft, for_engines=engines).engines) == count, engines
    result = convert_checkpoint(draft, tmp_path / "out")
    assert result.output == tmp_path / "out" and (tmp_path / "out" / "config.json").is_file()
    launch = plan_launch(
        PlanRequest(target=target, drafts=(PlanDraft(draft),), engines=("sglang",), max_model_len=2048)
    )
    assert [list(p.engines) for p in launch.plans] == [["sglang==0.5.23"]]


@pytest.mark.parametrize("value", [None, 7, b"/tmp/x", ["a"], ""], ids=["None", "int", "bytes", "list", "empty"])
def test_the_api_answers_a_wrong_source_with_a_usage_error(value: Any, root: Path) -> None:
    for call in (
        lambda: inspect_checkpoint(value),
        lambda: inspect_checkpoint(root / "draft", target=value if value is not None else 7),
        lambda: plan_conversion(value),
        lambda: convert_checkpoint(value, root / "never"),
        lambda: load_target(value),
        lambda: plan_launch(PlanRequest(target=value, drafts=(PlanDraft(str(root / "draft")),), engines=("all",))),
    ):
        with pytest.raises(UsageError):
            call()
    assert not (root / "never").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_num_seqs", "8"),
        ("max_num_seqs", 2**64),
        ("gpu_memory_gib", float("inf")),
        ("gpu_memory_gib", 1e308),
        ("gpu_memory_utilization", float("nan")),
        ("num_speculative_tokens", True),
        ("engines", "sglang"),
        ("dtype", 16),
    ],
)
def test_a_plan_request_built_in_python_is_checked_as_the_command_line_is(field: str, value: Any, root: Path) -> None:
    request = PlanRequest(target=str(root / "target"), drafts=(PlanDraft(str(root / "draft")),), engines=("all",))
    with pytest.raises(UsageError, match=field):
        plan_launch(dataclasses.replace(request, **{field: value}))


def test_the_api_refuses_wrong_counts_and_engine_names(root: Path) -> None:
    for call in (
        lambda: inspect_checkpoint(root / "draft", num_speculative_tokens="7"),  # type: ignore[arg-type]
        lambda: inspect_checkpoint(root / "draft", timeout=float("nan")),
        lambda: plan_conversion(root / "draft", block_size=2**64),
        lambda: plan_conversion(root / "draft", for_engines=[7]),  # type: ignore[list-item]
        lambda: plan_conversion(root / "draft", for_engines=["tgi"]),
        lambda: convert_checkpoint(root / "draft", root / "never", link_mode="teleport"),
    ):
        with pytest.raises(UsageError):
            call()
    assert not (root / "never").exists()
