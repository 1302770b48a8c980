"""`inspect` speaks the vocabulary of the other commands (issue 34, item 3).

- its document has `command`, `exit_code` and an `ok` that agrees with the exit code, as every
  other command's has (`--fail-on warning` included);
- its engine columns name K and the query positions as `plan` names them
  (`num_speculative_tokens`, `num_query_tokens`; human: `outcome`, `K / queries`), with the same
  values for the same draft, target and release;
- `inspect -t example:NAME --engine ...` names the target in its launch lines as `plan` does: a
  folder that exists, not `example:NAME`;
- `-q` keeps the launch lines, as `--help` says;
- `-k K_max`, the default, passed explicitly changes no engine column.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from dflash_tools.cli import app
from dflash_tools.engine_rules import ENGINE_RULES

runner = CliRunner()
TARGET = "example:vllm-cpu-demo/target"
DRAFTS = ["example:vllm-cpu-demo/zlab-dflash", "example:vllm-cpu-demo/zlab-dflash-anchor-first"]
ANCHOR_FIRST = "example:zlab-dflash2-anchor-first"


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout


def by_spec(engines: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{e['engine']}=={e['version']}": e for e in engines.values()}


def test_ok_and_exit_code_agree_with_the_process() -> None:
    for args in (
        ["example:zlab-dflash2"],
        ["example:dspark-native", "--fail-on", "warning"],
        [ANCHOR_FIRST, "--engine", "all"],
    ):
        code, out = run("inspect", *args, "--json")
        document = json.loads(out)
        assert document["command"] == "inspect", args
        assert (document["exit_code"], document["ok"]) == (code, code == 0), args
    # A warning fails the run with --fail-on warning: the document says so too (it said ok: true).
    code, out = run("inspect", "example:dspark-native", "--fail-on", "warning")
    assert code == 1 and out.startswith("FAIL")


def test_inspect_and_plan_name_the_engine_fields_alike() -> None:
    for draft in DRAFTS:
        _, inspected = run("inspect", draft, "-t", TARGET, "--engine", "all", "--json")
        _, planned = run("plan", "-t", TARGET, "-d", draft, "--json")
        columns = by_spec(json.loads(inspected)["engines"])
        plans = by_spec(json.loads(planned)["plans"][0]["engines"])
        assert list(columns) == list(plans) == list(ENGINE_RULES)
        for spec, column in columns.items():
            fields = ("outcome", "layout", "num_speculative_tokens", "num_query_tokens")
            assert {f: column[f] for f in fields} == {f: plans[spec][f] for f in fields}, (draft, spec)
            assert "draft_tokens" not in column and "draft_tokens" not in plans[spec]
    # The human tables: the same row names for the same values.
    _, inspected = run("inspect", DRAFTS[1], "-t", TARGET, "--engine", "all")
    _, planned = run("plan", "-t", TARGET, "-d", DRAFTS[1])
    for table in (inspected, planned):
        labels = {line.split("  ")[0] for line in table.splitlines()}
        assert {"outcome", "K / queries"} <= labels and "serves" not in labels


def test_the_launch_line_names_the_target_as_plan_does() -> None:
    _, inspected = run("inspect", DRAFTS[0], "-t", TARGET, "--engine", "all", "--json")
    _, planned = run("plan", "-t", TARGET, "-d", DRAFTS[0], "--json")
    served = json.loads(planned)["plans"][0]["target"]["launch_name"]
    assert (Path(served) / "config.json").is_file()
    for spec, column in by_spec(json.loads(inspected)["engines"]).items():
        argv = column["launch"]
        assert argv is not None and served in argv and TARGET not in argv, spec
        assert served in shlex.split(column["launch_command"]), spec


def test_quiet_keeps_the_launch_lines() -> None:
    code, out = run("inspect", DRAFTS[1], "-t", TARGET, "--engine", "all", "-q")
    lines = out.splitlines()
    assert any(line.startswith("launch (") for line in lines)
    assert any("vllm serve" in line for line in lines)
    # What -q drops: the label/value block and the columns.
    assert not any(line.startswith(("location", "geometry")) for line in lines)


def test_the_default_k_given_explicitly_changes_no_engine_column() -> None:
    for source in (ANCHOR_FIRST, "example:zlab-dflash2", "example:zlab-dflash"):
        _, out = run("inspect", source, "--json")
        k_max = json.loads(out)["geometry"]["max_speculative_tokens"]
        _, without = run("inspect", source, "--engine", "all", "--json")
        _, explicit = run("inspect", source, "--engine", "all", "-k", str(k_max), "--json")
        assert json.loads(explicit)["engines"] == json.loads(without)["engines"], source
