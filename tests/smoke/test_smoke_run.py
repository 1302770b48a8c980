"""The core entry points of `plan` and `smoke-test`, used as a library (docs/python-api.md): what
the CLI prints with --json is what they return, so the CLI only parses and renders."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import dflash_tools
from dflash_tools.cli import app
from dflash_tools.engine_rules import latest
from dflash_tools.plan.presets import DraftEntry, load_prompts, resolve_prompts_path

TARGET = "example:engine-demo/target"
DRAFT = "example:engine-demo/zlab-dflash2"


def test_smoke_test_from_the_library_is_the_commands_document() -> None:
    prompts = load_prompts(resolve_prompts_path(None))
    options = dflash_tools.SmokeOptions(
        target=TARGET,
        drafts=[DraftEntry(DRAFT)],
        prompts=prompts.texts,
        prompts_source=str(resolve_prompts_path(None)),
        engine=dflash_tools.Runtime.TORCH,
        dry_run=True,
        runtime_requested="torch",
    )
    document = dflash_tools.smoke_test(options)
    result = CliRunner().invoke(
        app, ["smoke-test", "--dry-run", "--json", "--runtime", "torch", "-t", TARGET, "-d", DRAFT]
    )
    printed = json.loads(result.stdout)
    assert result.exit_code == document["exit_code"] == 0
    # The same plan; only where each value came from differs (the library set them directly).
    assert {k: v for k, v in printed.items() if k != "option_sources"} == {
        k: v for k, v in document.items() if k != "option_sources"
    }
    assert document["option_sources"] == {} and printed["option_sources"]["engine"] == "argument"


def test_plan_launch_from_the_library_is_the_commands_document() -> None:
    newest = latest("vllm")
    assert newest is not None
    request = dflash_tools.PlanRequest(
        target="example:vllm-cpu-demo/target",
        drafts=(dflash_tools.PlanDraft("example:vllm-cpu-demo/zlab-dflash"),),
        engines=(newest.spec,),
        gpu_memory_gib=16.0,
        sources={"target": "given", "drafts": "given"},
    )
    launch = dflash_tools.plan_launch(request)
    result = CliRunner().invoke(
        app,
        ["plan", "-t", request.target, "-d", request.drafts[0].source, "--gpu-memory", "16"]
        + ["--engine", newest.spec, "--json"],
    )
    assert result.exit_code == launch.exit_code == 0
    assert json.loads(result.stdout) == launch.to_dict()
