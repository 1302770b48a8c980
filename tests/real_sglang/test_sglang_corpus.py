"""The SGLang column on every corpus file (tests/corpus/) against SGLang 0.5.23's own code.

First, what SGLang 0.5.23 does with each file at load, re-established from its wheel and compared
with the record (`tests/corpus/engine_outcomes.json`, which the default suite compares with the
tool's SGLang column):
1. its draft's config is loaded by `get_config` (`sglang/srt/configs/model_config.py`, ModelConfig),
   whose HF parser calls transformers' `AutoConfig.from_pretrained`
   (`sglang/srt/utils/hf_transformers/config.py`) after registering SGLang's own config classes
   (`_CONFIG_REGISTRY`, `sglang/srt/utils/hf_transformers/common.py`): AutoConfig runs here under
   the transformers release the wheel pins (its METADATA; 5.19.0), in a child process, on every
   file; a `model_type` SGLang registers loads with SGLang's class;
2. the draft's architecture must be in a model file's `EntryClass`;
3. its parsers (`parse_dflash_draft_config`, DSPARK's `parse_dspark_draft_config`), executed
   from the wheel, accept the config or refuse it, and give the block size, layout, target layers
   and mask token.
With `DFLASH_TOOLS_RECORD_OUTCOMES=1` the tier writes the record instead (tests/corpus/README.md).

Then, for each file SGLang loads: SGLang serves it when its architecture is in an `EntryClass` of
`sglang/srt/models/dflash.py` or `dspark.py` and `parse_dflash_draft_config` (DSPARK: also
`parse_dspark_draft_config`) accepts it; then the block size, layout, target layers and mask token
`inspect --engine sglang==0.5.23` reports must be the ones SGLang's parser gives.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from dflash_tools.inspect import inspect_checkpoint
from dflash_tools.reading.source import load_checkpoint
from dflash_tools.serving.engine_view import inspect_for_engines
from tests.corpus import outcomes
from tests.corpus.entries import CORPUS, ENTRIES, PENDING_ARCHITECTURES, Entry
from tests.engine_sources import Sources
from tests.real_sglang.test_sglang_registry import DFLASH_FAMILY
from tests.real_sglang.test_sglang_source import entry_classes, parsers, sglang_reads

pytestmark = pytest.mark.real_sglang

__all__ = ["parsers"]  # the fixture, shared with test_sglang_source

SPEC = "sglang==0.5.23"
# Files SGLang serves and the column calls unsupported until issue 26 item 1 lands (strict xfails).
# The Kimi K3 DSpark drafts are not here: the column already reads them as SGLang does.
PENDING: dict[str, str] = {
    **{name: PENDING_ARCHITECTURES[name] for name in ()},
    **{name: reason for (name, release), reason in outcomes.TOOL_BUGS.items() if release == SPEC},
}


@pytest.fixture(scope="module")
def registered(sglang: Sources) -> set[str]:
    return set(entry_classes(sglang, "sglang/srt/models/dflash.py")) | set(
        entry_classes(sglang, "sglang/srt/models/dspark.py")
    )


# --- what SGLang does with each file at load -------------------------------------------------

CONFIG_REGISTRY = "sglang/srt/utils/hf_transformers/common.py"
SOURCE = (
    f"{SPEC} wheel: get_config (srt/utils/hf_transformers/config.py, AutoConfig under the wheel's transformers pin, "
    "run here; SGLang's own _CONFIG_REGISTRY read from common.py), EntryClass of srt/models/*.py, "
    "parse_dflash_draft_config / parse_dspark_draft_config executed from the wheel"
)


def pinned_transformers(sglang: Sources) -> str:
    """The transformers release SGLang's wheel requires (its METADATA's `Requires-Dist`)."""
    metadata = sglang.read(f"sglang-{SPEC.split('==')[1]}.dist-info/METADATA") or ""
    found = re.search(r"^Requires-Dist: transformers==([\w.]+)$", metadata, re.M)
    assert found is not None
    return found.group(1)


def sglang_config_model_types(sglang: Sources) -> dict[str, str]:
    """model_type -> SGLang's config class, for every class in its `_CONFIG_REGISTRY`."""
    tree = sglang.tree(CONFIG_REGISTRY)
    names: set[str] = set()
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "_CONFIG_REGISTRY" for t in targets) and node.value is not None:
            names |= {
                e.id for n in ast.walk(node.value) if isinstance(n, ast.List) for e in n.elts if isinstance(e, ast.Name)
            }
    types: dict[str, str] = {}
    for path in sglang.names(r"sglang/srt/configs/.+\.py"):
        for node in ast.walk(sglang.tree(path)):
            if isinstance(node, ast.ClassDef) and node.name in names:
                for statement in node.body:
                    if (
                        isinstance(statement, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "model_type" for t in statement.targets)
                        and isinstance(statement.value, ast.Constant)
                    ):
                        types[statement.value.value] = node.name
    for node in ast.walk(tree):  # _CONFIG_REGISTRY["deepseek_v4"] = ...
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if (
            isinstance(target, ast.Subscript)
            and isinstance(target.value, ast.Name)
            and target.value.id == "_CONFIG_REGISTRY"
            and isinstance(target.slice, ast.Constant)
            and isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
        ):
            types[target.slice.value] = node.value.id
    assert "muse_glimmer_assistant" in types and "laguna" in types
    return types


@pytest.fixture(scope="module")
def family(sglang: Sources) -> set[str]:
    """Every DFlash-family class an `EntryClass` of the wheel registers."""
    return {
        name
        for path in sglang.names(r"sglang/srt/models/[^/]+\.py")
        for name in entry_classes(sglang, path)
        if DFLASH_FAMILY.search(name)
    }


@pytest.fixture(scope="module")
def autoconfig(sglang: Sources, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """AutoConfig of the wheel's pinned transformers on every corpus file, in a child process with
    that release first on the path (.ci/tier-sglang.sh installs it, --no-deps, into a throwaway
    folder named by DFLASH_TOOLS_SGLANG_TRANSFORMERS; without it, it is installed here)."""
    release = pinned_transformers(sglang)
    folder = os.environ.get("DFLASH_TOOLS_SGLANG_TRANSFORMERS")
    if not folder:
        folder = str(tmp_path_factory.mktemp("transformers"))
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", folder, f"transformers=={release}"],
            check=True,
        )  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_TOOLS_")}
    environment.update(PYTHONPATH=folder, HF_HUB_OFFLINE="1")
    completed = subprocess.run(
        [sys.executable, str(CORPUS / "autoconfig_probe.py"), str(CORPUS)],
        capture_output=True, text=True, env=environment, timeout=600, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-4000:]
    document: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    assert document["transformers"] == release
    return document


def test_transformers_autoconfig_under_sglangs_pin_is_what_the_record_says(autoconfig: dict[str, Any]) -> None:
    release = f"transformers=={autoconfig['transformers']}"
    source = f"ran AutoConfig.from_pretrained of {release} (SGLang {SPEC.split('==')[1]}'s pin; tests/corpus/autoconfig_probe.py) in the SGLang tier"
    measured = {entry: {**outcome, "source": source} for entry, outcome in autoconfig["entries"].items()}
    differs = outcomes.check_or_record(release, measured)
    assert not differs, outcomes.explain(differs)


def sglang_outcome(
    entry: Entry, loaded: dict[str, Any], own: dict[str, str], family: set[str], parsers: dict[str, Any]
) -> dict[str, Any]:
    config = entry.config()
    model_type = config.get("model_type")
    if model_type in own:  # SGLang registers its own class for it with AutoConfig
        loaded = {"outcome": "loads", "config_class": own[model_type]}
    out: dict[str, Any] = {"config": {k: v for k, v in loaded.items() if k != "filled"}}
    architecture = (config.get("architectures") or [""])[0]
    out["registered"] = architecture in family
    if loaded["outcome"] != "loads":
        out.update(outcome="wont-load", error=loaded["error"])
    elif not out["registered"]:
        out["outcome"] = "unsupported"
    else:
        theirs = sglang_reads(parsers, config)
        if theirs.refused:
            out["outcome"] = "refused"
        else:
            out.update(
                outcome="served",
                block_size=theirs.block_size,
                layout=theirs.layout,
                target_layer_ids=theirs.target_layer_ids,
                mask_token_id=theirs.mask_token_id,
            )
    out["source"] = SOURCE
    return out


def test_sglang_does_with_every_corpus_file_what_the_record_says(
    sglang: Sources, autoconfig: dict[str, Any], family: set[str], parsers: dict[str, Any]
) -> None:
    own = sglang_config_model_types(sglang)
    measured = {
        entry.dir: sglang_outcome(entry, autoconfig["entries"][entry.dir], own, family, parsers) for entry in ENTRIES
    }
    differs = outcomes.check_or_record(SPEC, measured)
    assert not differs, outcomes.explain(differs)


# --- the tool's column against SGLang's parser ------------------------------------------------


def corpus_params() -> list[Any]:
    out = []
    for entry in ENTRIES:
        reason = PENDING.get(entry.dir)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(entry, id=entry.dir, marks=marks))
    return out


@pytest.mark.parametrize("entry", corpus_params())
def test_the_sglang_column_agrees_with_sglang_on_the_corpus(
    entry: Entry, parsers: dict[str, Any], registered: set[str]
) -> None:
    if outcomes.recorded(SPEC)[entry.dir]["outcome"] == "wont-load":
        pytest.skip("SGLang's get_config raises: tests/corpus/test_engine_outcomes.py checks the column's outcome")
    config = entry.config()
    architecture = (config.get("architectures") or [""])[0]
    theirs = sglang_reads(parsers, config)
    served = architecture in registered and not theirs.refused
    view = inspect_for_engines(load_checkpoint(str(entry.folder)), [SPEC]).extra["engines"]["sglang"]
    if view["outcome"] == "wont-load":
        # It stops at config load, before the parsers compared here run: the verdict is checked
        # against transformers' AutoConfig in test_sglang_config_loading.py.
        return
    if not served:
        assert view["outcome"] in ("refused", "unsupported"), (view["outcome"], view["refusal"])
        return
    assert view["outcome"] not in ("refused", "unsupported"), view["refusal"]
    if view["outcome"] == "unchecked":
        # An architecture SGLang registers and no dialect reads (Laguna): refused by name
        # (DFT008), so the column states no geometry to compare.
        assert view["reads_format"] is False or view["block_size"] is None, view
        return
    assert (view["block_size"], view["block_size_source"]) == (theirs.block_size, theirs.block_source)
    assert view["layout"] == theirs.layout
    assert view["target_layer_ids"] == theirs.target_layer_ids
    assert view["mask_token_id"] == theirs.mask_token_id
    # What inspect says the draft was trained with is what SGLang reads from the file. Every
    # published file reads; a partial copy may lack decoder fields (DFT006) and read as nothing.
    trained = inspect_checkpoint(str(entry.folder)).description
    assert trained is not None or entry.klass != "published", entry.dir
    if trained is not None and theirs.target_layer_ids is not None:
        assert trained.target_layer_ids == theirs.target_layer_ids
    if trained is not None and theirs.mask_token_id is not None:
        assert trained.mask_token_id == theirs.mask_token_id


def test_the_corpus_covers_what_sglang_registers(registered: set[str]) -> None:
    """The corpus has a file of each algorithm SGLang serves (DFlash, DFlash2, DSpark)."""
    architectures = {entry.architecture for entry in ENTRIES}
    assert {"DFlashDraftModel", "DFlash2DraftModel", "Qwen3DSparkModel", "DSparkDraftModel"} <= architectures
    assert {"DFlashDraftModel", "DFlash2DraftModel", "Qwen3DSparkModel"} <= registered
