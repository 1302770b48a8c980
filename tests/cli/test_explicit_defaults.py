"""Passing an option's default explicitly changes nothing a command prints (issue 34, "One
vocabulary across commands"): inspect, plan, convert and smoke-test, human output and JSON; a -k
equal to K_max is no request (`geometry.speculative_tokens_requested` stays false).

Only where each value came from may differ (`request.sources`, `option_sources`: `given` or
`argument` instead of `default`); everything else is the same document.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from dflash_tools.cli import app

runner = CliRunner()

TARGET = "example:vllm-cpu-demo/target"
PLAN_DEFAULTS = [
    "--engine", "all", "--tensor-parallel-size", "1", "--decode-context-parallel-size", "1",
    "--dtype", "auto", "--kv-cache-dtype", "auto",
]  # fmt: skip


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "100"})
    return result.exit_code, result.stdout


def without(document: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key not in keys}


@pytest.mark.parametrize(
    ("draft", "defaults"),
    [
        # The trained K of the bonus-anchor demo is 7 for every release.
        ("example:vllm-cpu-demo/zlab-dflash", ["-k", "7", *PLAN_DEFAULTS]),
        ("example:vllm-cpu-demo/zlab-dflash-anchor-first", PLAN_DEFAULTS),
    ],
)
def test_plan(draft: str, defaults: list[str]) -> None:
    base = ["plan", "-t", TARGET, "-d", draft, "--gpu-memory", "16"]
    assert invoke(*base) == invoke(*base, *defaults)
    plain = json.loads(invoke(*base, "--json")[1])
    explicit = json.loads(invoke(*base, *defaults, "--json")[1])
    assert [without(p, "request") for p in plain["plans"]] == [without(p, "request") for p in explicit["plans"]]
    assert without(plain, "plans") == without(explicit, "plans")


def test_convert() -> None:
    base = ["convert", "example:zlab-dflash2-anchor-first", "--dry-run"]
    assert invoke(*base) == invoke(*base, "--link-mode", "auto")
    assert invoke(*base, "--json") == invoke(*base, "--link-mode", "auto", "--json")


def test_smoke_test_dry_run() -> None:
    base = ["smoke-test", "--runtime", "torch", "--device", "cpu", "-t", "example:engine-demo/target"]
    base += ["-d", "example:engine-demo/zlab-dflash2", "--dry-run"]
    defaults = ["--seed", "0", "--run-timeout", "3600", "-k", "7", "--num-prompts", "16", "--concurrency", "1"]
    assert invoke(*base) == invoke(*base, *defaults)
    plain = json.loads(invoke(*base, "--json")[1])
    explicit = json.loads(invoke(*base, *defaults, "--json")[1])
    assert without(plain, "option_sources") == without(explicit, "option_sources")


@pytest.mark.parametrize(
    "draft",
    ["example:zlab-dflash", "example:zlab-dflash2", "example:zlab-dflash2-anchor-first", "example:dspark-native"],
)
def test_inspect(draft: str) -> None:
    k_max = json.loads(invoke("inspect", draft, "--json")[1])["geometry"]["max_speculative_tokens"]
    base = ["inspect", draft, "--engine", "all"]
    assert invoke(*base) == invoke(*base, "-k", str(k_max))
    assert invoke(*base, "--json") == invoke(*base, "-k", str(k_max), "--json")
