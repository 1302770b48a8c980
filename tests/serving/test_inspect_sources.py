"""`inspect`'s core entry point (`serving.inspect_sources`): the library returns what the CLI prints.

`dflash_tools.inspect_checkpoint` and `inspect_sources` are the command's own calls: the same
engine choices as `--engine`, the same engine columns, the same document; and one inspect reads
the config's dialect once and matches the published profiles on the description.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dflash_tools
from dflash_tools import dialects
from dflash_tools.cli import app
from dflash_tools.draft import profiles
from dflash_tools.draft.geometry import resolve_geometry
from dflash_tools.draft.inspected import InspectedDraft
from dflash_tools.draft.tensors import TensorSummary
from dflash_tools.engine_rules import ENGINE_RULES, latest
from dflash_tools.errors import SourceError, UsageError

runner = CliRunner()
ANCHOR_FIRST = "example:zlab-dflash2-anchor-first"


def cli_document(*args: str) -> tuple[int, Any]:
    result = runner.invoke(app, ["inspect", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("engine", ["all", "sglang", *ENGINE_RULES])
def test_library_returns_the_engine_columns_the_cli_prints(engine: str) -> None:
    report = dflash_tools.inspect_checkpoint(ANCHOR_FIRST, target="example:tiny-target", engines=[engine])
    code, document = cli_document(ANCHOR_FIRST, "-t", "example:tiny-target", "--engine", engine)
    assert report.to_dict()["engines"] == document["engines"]
    assert list(document["engines"]) and code in (0, 1)


def test_the_core_returns_the_document_the_cli_prints() -> None:
    """One source and several, with the engine views and a K: the `--json` document is the core's."""
    request = dflash_tools.InspectRequest(
        sources=("example:zlab-dflash", ANCHOR_FIRST),
        engines=("all",),
        num_speculative_tokens=7,
    )
    result = dflash_tools.inspect_sources(request)
    code, document = cli_document("example:zlab-dflash", ANCHOR_FIRST, "--engine", "all", "-k", "7")
    assert result.to_dict() == document
    assert result.exit_code == code
    single = dflash_tools.inspect_sources(dflash_tools.InspectRequest(sources=(ANCHOR_FIRST,)))
    assert single.to_dict() == cli_document(ANCHOR_FIRST)[1]


def test_the_library_takes_the_engine_names_the_cli_takes() -> None:
    assert "engines" not in dflash_tools.inspect_checkpoint(ANCHOR_FIRST).to_dict()
    newest = latest("vllm")
    assert newest is not None
    assert list(dflash_tools.inspect_checkpoint(ANCHOR_FIRST, engines="sglang").to_dict()["engines"]) == ["sglang"]
    for bad in (["no-such-engine"], [""], ["vllm,"]):
        with pytest.raises(UsageError, match="--engine"):
            dflash_tools.inspect_checkpoint(ANCHOR_FIRST, engines=bad)
    with pytest.raises(SourceError):
        dflash_tools.inspect_checkpoint("./no-such-draft", engines=["all"])


def test_one_unreadable_source_among_several_takes_its_place(tmp_path: Path) -> None:
    request = dflash_tools.InspectRequest(sources=(ANCHOR_FIRST, str(tmp_path / "missing")))
    result = dflash_tools.inspect_sources(request)
    assert isinstance(result.reports[1], SourceError) and result.exit_code == 2
    assert result.documents()[1]["error"]["kind"] == "source"


def test_one_inspect_detects_the_dialect_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each registered dialect module's `detect` is asked once per inspect (it was asked twice).
    The wrapper counts the calls and returns what the real function returns."""
    calls: list[str] = []
    for module in dialects._MODULES:
        real = module.detect

        def counting(config: dict[str, Any], real: Any = real, name: str = module.SPEC.family) -> Any:
            calls.append(name)
            return real(config)

        monkeypatch.setattr(module, "detect", counting)
    for engines in ([], ["all"]):
        calls.clear()
        # Without `engines` when none are asked: the call the library had before it took them.
        if engines:
            report = dflash_tools.inspect_checkpoint(ANCHOR_FIRST, engines=engines)
        else:
            report = dflash_tools.inspect_checkpoint(ANCHOR_FIRST)
        assert report.description is not None
        assert len(calls) == len(set(calls)), (engines, calls)


def _published() -> tuple[str, dict[str, Any], dict[str, Any]]:
    profile = next(p for p in profiles.load_profiles() if p.name == "z-lab/Qwen3.8-27B-DFlash2")
    return profile.name, profile.data, copy.deepcopy(profile.releases[0].config)


def test_profiles_are_matched_on_the_description() -> None:
    """A fine-tune of a published draft (another mask token) under the published repo id: the
    differences come from its description, geometry and tensor headers."""
    name, data, config = _published()
    config["dflash_config"]["mask_token_id"] = 1
    desc = dialects.read(config)
    geometry = resolve_geometry(desc)[0]
    match = profiles.match_profile(name, InspectedDraft(desc, geometry), config=config, config_text=json.dumps(config))
    assert match is not None and match.matched_by == "repo id"
    assert match.differences == [
        {"key": "model.mask_token_id", "published": data["model"]["mask_token_id"], "actual": 1}
    ]
    tensors = TensorSummary(count=80, parameters=data["tensors"]["parameters"], bytes=0, dtypes={})
    with_tensors = profiles.match_profile(name, InspectedDraft(desc, geometry, tensors), config=config)
    assert with_tensors is not None
    assert {"key": "tensors.count", "published": 81, "actual": 80} in with_tensors.differences
    # Without a repo id or a folder of its name: by dimensions.
    by_dimensions = profiles.match_profile("./my-draft", InspectedDraft(desc, geometry), config=config)
    assert by_dimensions is not None and by_dimensions.matched_by == "dimensions"
