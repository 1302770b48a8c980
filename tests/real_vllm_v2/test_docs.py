"""docs/tier-vllm-v2.md lists exactly the work-arounds `workarounds.py` applies, per vLLM version.

Runs in the default suite (no vLLM needed): the table is plain data until a child applies it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.real_vllm_v2 import workarounds

DOC = Path(__file__).resolve().parents[2] / "docs" / "tier-vllm-v2.md"


def documented() -> dict[str, list[tuple[str, str]]]:
    """version -> [(name, where)] from the '### vLLM X' tables of the page."""
    tables: dict[str, list[tuple[str, str]]] = {}
    version = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"### vLLM (\S+)$", line)
        if heading:
            version = heading.group(1)
            tables[version] = []
            continue
        row = re.match(r"\| `([a-z0-9-]+)` \| `([^`]+)`", line)
        if version is not None and row:
            tables[version].append((row.group(1), row.group(2)))
        elif line.startswith("## "):
            version = None
    return tables


def test_docs_list_every_workaround_of_every_version() -> None:
    table = {
        version: [(w.name, w.where.split(" ")[0]) for w in entries]
        for version, entries in workarounds.WORKAROUNDS.items()
    }
    assert documented() == table


def test_a_version_without_a_table_is_refused_with_the_file_to_edit() -> None:
    try:
        workarounds.for_version("0.0.1")
    except workarounds.UnsupportedVllm as exc:
        assert "tests/real_vllm_v2/workarounds.py" in str(exc)
    else:
        raise AssertionError("an unknown vLLM release got a work-around table")


def test_every_workaround_says_what_it_changes() -> None:
    for entries in workarounds.WORKAROUNDS.values():
        assert len({w.name for w in entries}) == len(entries)
        for workaround in entries:
            assert (workaround.env or workaround.patch) and workaround.where and workaround.why, workaround.name
