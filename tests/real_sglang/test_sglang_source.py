"""The SGLang 0.5.23 table against SGLang 0.5.23's released source (docs/engines.md).

Besides the citations, SGLang's own config parser (`parse_dflash_draft_config`, DSPARK's
`parse_dspark_draft_config`) and layer formula (`build_target_layer_ids`) are executed from the
wheel on every bundled example, every edge case of `tests/engine_cases.py` and every convert
output, and the SGLang column of `inspect --engine sglang` must agree with what they give.
Limit: the DSPARK parser's result type is a `msgspec.Struct`, and msgspec is not installed here;
a stand-in base class that only stores the fields is given in its place (named below).
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path
from typing import Any, Optional

import pytest

from dflash_tools.engine_rules import ENGINE_RULES
from dflash_tools.engine_rules import sglang_0_5_23 as table
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.engine_cases import case_folders
from tests.engine_sources import Sources, cite_problems, extract, function_source, key_problems, top_level
from tests.real_sglang.test_sglang_registry import entry_classes

pytestmark = pytest.mark.real_sglang

RULES = ENGINE_RULES["sglang==0.5.23"]
UTILS = "sglang/srt/speculative/dflash_utils.py"
DSPARK_CONFIG = "sglang/srt/speculative/dspark_components/dspark_config.py"


def test_every_cited_file_and_function_exists(sglang: Sources) -> None:
    assert cite_problems(RULES, sglang) == []


def test_every_key_the_table_reads_is_read_there(sglang: Sources) -> None:
    assert key_problems(RULES, sglang) == []


def literal(sources: Sources, path: str, name: str) -> Any:
    node = top_level(sources.tree(path))[name]
    assert isinstance(node, ast.Assign)
    return ast.literal_eval(node.value)


def test_defaults(sglang: Sources) -> None:
    assert literal(sglang, UTILS, "DEFAULT_DFLASH_MASK_TOKEN") == table.DEFAULT_MASK_TOKEN
    assert literal(sglang, DSPARK_CONFIG, "DEFAULT_DSPARK_GAMMA") == table.DEFAULT_DSPARK_DRAFTS
    # The block size the server falls back to, and the one the draft model builds its convolutions with.
    hook = ast.parse(function_source(sglang, "sglang/srt/arg_groups/speculative_hook.py", "_handle_dflash"))
    assert any(isinstance(n, ast.Constant) and n.value == table.DEFAULT_BLOCK_SIZE for n in ast.walk(hook))
    assert default_block_size(sglang) == table.DEFAULT_BLOCK_SIZE
    # The running requests each speculative path sets when --max-running-requests is not given.
    for handler in ("_handle_dflash", "_handle_dspark"):
        found = [
            keyword.value.value
            for node in ast.walk(
                ast.parse(function_source(sglang, "sglang/srt/arg_groups/speculative_hook.py", handler))
            )
            if isinstance(node, ast.Call)
            for keyword in node.keywords
            if keyword.arg == "max_running_requests" and isinstance(keyword.value, ast.Constant)
        ]
        assert found == [table.DEFAULT_MAX_RUNNING_REQUESTS], handler
    default = RULES.serving_default("max_running_requests", path="DFLASH")
    assert default is not None and default.value == table.DEFAULT_MAX_RUNNING_REQUESTS


def test_dflash_is_bonus_only(sglang: Sources) -> None:
    """The layout rule: drafts come from positions 1.. of the block, and no layout key is read."""
    worker = "sglang/srt/speculative/dflash_worker_v2.py"
    for sampler in ("_DflashDraftSampler.__call__", "_SelectorDraftSampler.__call__"):
        assert "[:, 1:, :]" in function_source(sglang, worker, sampler)
    assert "sample_from_anchor" not in function_source(sglang, UTILS, "parse_dflash_draft_config")
    assert "start = 0 if shift_label else 1" in function_source(
        sglang, "sglang/srt/speculative/domino_utils.py", "domino_greedy_rollout"
    )


def test_routes_are_the_loaders_the_release_registers(sglang: Sources) -> None:
    dflash = set(entry_classes(sglang, "sglang/srt/models/dflash.py"))
    dspark = set(entry_classes(sglang, "sglang/srt/models/dspark.py"))
    routes = {route.algorithm: set(route.architectures) for route in RULES.routes}
    # Each route lists every class the release registers for it, in whichever file
    # (tests/real_sglang/test_sglang_registry.py checks the whole list against every EntryClass).
    assert dflash <= routes["dflash"] | routes["dflash2"]
    assert dspark <= routes["dspark"]
    for route in RULES.routes:
        files = re.findall(r"sglang/srt/models/\w+\.py", route.cite)
        registered = {name for path in files for name in entry_classes(sglang, path)}
        assert set(route.architectures) <= registered, route.algorithm


def test_launch_flags_are_server_arguments(sglang: Sources) -> None:
    fields = set()
    for path in sglang.names(r"sglang/srt/arg_groups/fields/.*\.py"):
        fields |= {
            node.target.id
            for node in ast.walk(sglang.tree(path))
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        }
    flags = [flag.name for flag in RULES.launch if flag.name.startswith("--")]
    assert len(flags) >= 5
    for flag in flags:
        assert flag.removeprefix("--").replace("-", "_") in fields, flag


# --- SGLang's own code, executed ------------------------------------------------------------


class _StructStandIn:
    """Stand-in for `msgspec.Struct` (msgspec is not installed here): stores keyword fields."""

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__()

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def default_block_size(sglang: Sources) -> int:
    """The block size SGLang's draft model falls back to, read from its source (not our table)."""
    model = function_source(sglang, "sglang/srt/models/dflash.py", "DFlashDraftModel.__init__")
    found = re.search(r"resolve_block_size\(default=(\d+)\)", model)
    assert found is not None
    return int(found.group(1))


@pytest.fixture(scope="module")
def parsers(sglang: Sources) -> dict[str, Any]:
    namespace: dict[str, Any] = {
        "DEFAULT_BLOCK_SIZE": default_block_size(sglang),
        "Any": Any,
        "List": list,
        "Optional": Optional,
        "Sequence": Sequence,
        "Tuple": tuple,
        "Integral": Integral,
        "dataclass": dataclass,
        "logger": logging.getLogger("sglang-source"),
    }
    extract(
        sglang,
        UTILS,
        [
            "DEFAULT_DFLASH_MASK_TOKEN",
            "build_target_layer_ids",
            "get_dflash_layer_types",
            "get_dflash_attention_sliding_window_size",
            "_cfg_get",
            "_get_text_config",
            "_get_dflash_config",
            "is_nemotron_35_draft_config",
            "_parse_optional_int",
            "DFlashDraftConfig",
            "parse_dflash_draft_config",
        ],
        namespace,
    )
    dspark: dict[str, Any] = {
        **{k: namespace[k] for k in ("Any", "List", "Optional", "logger", "parse_dflash_draft_config")},
        "msgspec": type("msgspec", (), {"Struct": _StructStandIn}),
    }
    extract(
        sglang,
        DSPARK_CONFIG,
        [
            "DEFAULT_DSPARK_GAMMA",
            "SUPPORTED_DSPARK_MARKOV_HEAD_TYPES",
            "get_dspark_sample_from_anchor",
            "DSparkDraftConfig",
            "_cfg_get",
            "_get_text_config",
            "_get_nested_config",
            "_get_dspark_config",
            "parse_dspark_draft_config",
        ],
        dspark,
    )
    return {"dflash": namespace, "dspark": dspark}


def test_layer_formula_is_sglangs(parsers: dict[str, Any]) -> None:
    theirs = parsers["dflash"]["build_target_layer_ids"]
    for layers in range(-1, 130):
        for draft_layers in range(-1, 13):
            try:
                expected: Any = theirs(layers, draft_layers)
            except ValueError:
                expected = ValueError
            try:
                ours: Any = table.derived_target_layer_ids(layers, draft_layers)
            except ValueError:
                ours = ValueError
            assert ours == expected, (layers, draft_layers)


@dataclass
class Verdict:
    refused: bool
    block_size: int | None = None
    block_source: str | None = None
    layout: str | None = None
    target_layer_ids: list[int] | None = None
    mask_token_id: int | None = None


def sglang_reads(parsers: dict[str, Any], config: dict[str, Any]) -> Verdict:
    """What SGLang's own code makes of a config, as its server and workers call it."""
    dflash = parsers["dflash"]
    nested = config.get("dflash_config") or {}
    architecture = (config.get("architectures") or [""])[0]
    try:
        parsed = dflash["parse_dflash_draft_config"](draft_hf_config=config)
        draft_layers = parsed.require_num_layers()
        layers = parsed.num_target_layers or (max(parsed.target_layer_ids) + 1 if parsed.target_layer_ids else 0)
        ids = parsed.resolve_target_layer_ids(target_num_layers=layers, draft_num_layers=draft_layers)
        dflash["get_dflash_attention_sliding_window_size"](config)
        source = "dflash_config" if "block_size" in nested else ("top-level" if "block_size" in config else "default")
        if architecture in {"Qwen3DSparkModel", "LingDSparkModel", "DSparkDraftModel"}:
            dspark = parsers["dspark"]["parse_dspark_draft_config"](draft_hf_config=config)
            if not dspark.require_markov():
                return Verdict(refused=True)
            anchor = parsers["dspark"]["get_dspark_sample_from_anchor"](config)
            return Verdict(
                refused=False,
                block_size=dspark.resolve_gamma(default=parsers["dspark"]["DEFAULT_DSPARK_GAMMA"]),
                block_source=source,
                layout="anchor-first" if anchor else "bonus",
                target_layer_ids=list(dspark.target_layer_ids) if dspark.target_layer_ids else ids,
                mask_token_id=dspark.mask_token_id,
            )
        if architecture.startswith(("DFlash2", "MiniMaxDFlash2")) and not parsed.selector_rank:
            return Verdict(refused=True)  # DFlash2DraftModel.__init__
        layout = "anchor-first" if parsed.is_domino and parsed.shift_label else "bonus"
        return Verdict(
            refused=False,
            block_size=parsed.resolve_block_size(default=dflash["DEFAULT_BLOCK_SIZE"]),
            block_source=source,
            layout=layout,
            target_layer_ids=ids,
            mask_token_id=parsed.mask_token_id,
        )
    except (ValueError, TypeError):
        return Verdict(refused=True)


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return case_folders(tmp_path_factory.mktemp("cases"))


def test_the_sglang_column_agrees_with_sglangs_own_parser(parsers: dict[str, Any], cases: dict[str, Path]) -> None:
    assert len(cases) > 40
    checked = 0
    for name, folder in cases.items():
        config = json.loads((folder / "config.json").read_text())
        theirs = sglang_reads(parsers, config)
        view = inspect_for_engines(load_checkpoint(str(folder)), ["sglang==0.5.23"]).extra["engines"]["sglang"]
        if view["outcome"] == "wont-load":
            # It stops at config load, before these parsers run: test_sglang_config_loading.py
            # checks that verdict against transformers' AutoConfig on the same cases.
            continue
        if theirs.refused:
            assert view["outcome"] in ("refused", "unsupported"), (name, view["outcome"], view["refusal"])
            continue
        assert view["outcome"] not in ("refused", "unsupported"), (name, view["refusal"])
        assert (view["block_size"], view["block_size_source"]) == (theirs.block_size, theirs.block_source), name
        assert view["layout"] == theirs.layout, name
        assert view["target_layer_ids"] == theirs.target_layer_ids, name
        assert view["mask_token_id"] == theirs.mask_token_id, name
        checked += 1
    assert checked > 20
