"""`inspect --engine sglang` where SGLang is installed: SGLang's own parser reads the draft.

As `installed_vllm` does for vLLM: where the `sglang` package is installed in this environment
(found, not imported: `detect_sglang`), a child process (`installed_sglang_child.py`) runs
SGLang's `get_config`, its model registry and its draft parsers (`parse_dflash_draft_config`,
on DSPARK `parse_dspark_draft_config` and `get_dspark_sample_from_anchor`) on the draft's config,
a local folder or the Hub config `inspect` read, written to a private temporary folder. The
result is an `EngineReading` that `installed_columns` compares with the SGLang table's column.

SGLang cannot be installed on this project's CPU machines: the child's parse step is tested on
SGLang's released source (tests/real_sglang/test_installed_sglang.py); its `get_config` and
registry steps and the child process with a real SGLang are not tested here.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from dflash_tools.serving.installed_reading import OK, EngineReading, ReadStep, run_child
from dflash_tools.serving.installed_vllm import DEFAULT_TIMEOUT_S, DraftRequest

CHILD = Path(__file__).with_name("installed_sglang_child.py")


@dataclass(frozen=True)
class InstalledSglang:
    version: str


def detect_sglang() -> InstalledSglang | None:
    """The SGLang installed in this environment (its metadata; nothing is imported), or None."""
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        return InstalledSglang(version("sglang"))
    except PackageNotFoundError:
        return None


def read_installed_sglang(
    requests: Sequence[DraftRequest], *, version: str, timeout_s: float = DEFAULT_TIMEOUT_S, python: str | None = None
) -> tuple[dict[str, EngineReading], str]:
    """SGLang's reading of each draft (`method` is SGLang's path, DFLASH or DSPARK), and why
    there is none ("" where every draft was read)."""
    with tempfile.TemporaryDirectory(prefix="dflash-tools-sglang-") as scratch:
        folder = Path(scratch)
        drafts = []
        for index, draft in enumerate(requests):
            model = draft.folder
            if model is None:
                model = folder / f"draft-{index}"
                model.mkdir()
                (model / "config.json").write_text(draft.config_text or "", encoding="utf-8")
            drafts.append({"id": draft.id, "model": str(model), "path": draft.method})
        request = folder / "request.json"
        request.write_text(json.dumps({"drafts": drafts}), encoding="utf-8")
        document, failure = run_child(CHILD, request, folder, timeout_s=timeout_s, python=python)
    if document is None:
        return {}, failure
    if document.get("import_error"):
        return {}, f"SGLang does not import here: {document['import_error']}"
    found = document.get("readings") or {}
    readings = {d.id: sglang_reading(found[d.id], version) for d in requests if d.id in found}
    return readings, ("" if len(readings) == len(requests) else failure or "it returned no reading")


def sglang_reading(found: dict[str, Any], version: str) -> EngineReading:
    """The child's record of one draft (also what `read_parsed` returns, as `{"steps": [...]}`)."""
    steps = tuple(ReadStep.from_dict(step) for step in found.get("steps", []))
    parse = next((step for step in steps if step.name == "parse" and step.status == OK), None)
    registry = next((step for step in steps if step.name == "registry" and step.status == OK), None)
    read = parse.read if parse is not None else {}
    ids = read.get("target_layer_ids")
    sample_from_anchor = read.get("sample_from_anchor")
    mask = read.get("mask_token_id")
    return EngineReading(
        engine="sglang",
        version=version,
        steps=steps,
        method=read.get("path"),
        architecture=registry.read.get("architecture") if registry is not None else None,
        registered=registry.read.get("registered") if registry is not None else None,
        sample_from_anchor=bool(sample_from_anchor) if sample_from_anchor is not None else None,
        block_size=read.get("block_size"),
        mask_token_id=int(mask) if mask is not None else None,
        target_layer_ids=tuple(int(i) for i in ids) if ids else None,
    )
