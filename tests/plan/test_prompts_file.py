"""`--prompts FILE` is JSON Lines: records end at "\n" only, a byte-order mark is not a prompt, and
one prompt has a cap (docs/reliability.md, "JSON Lines"; issue 33 found the dataset reader's copy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_tools.errors import UsageError
from dflash_tools.plan.presets import MAX_PROMPT_CHARS, load_prompts


def test_a_line_separator_inside_a_prompt_stays_in_that_prompt(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    # ensure_ascii=False writes U+2028 and U+0085 raw, as JSON allows inside a string.
    rows = ["one\u2028line", "two\x85parts", "three"]
    path.write_text("\n".join(json.dumps({"prompt": p}, ensure_ascii=False) for p in rows) + "\n", encoding="utf-8")
    assert load_prompts(path).texts == rows


def test_a_byte_order_mark_and_crlf_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\r\n{"prompt": "b"}\r\n')
    assert load_prompts(path).texts == ["a", "b"]


def test_one_prompt_over_the_cap_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "x" * (MAX_PROMPT_CHARS + 1)}) + "\n", encoding="utf-8")
    with pytest.raises(UsageError, match="MAX_PROMPT_CHARS"):
        load_prompts(path)
