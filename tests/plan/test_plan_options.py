"""`plan`'s options are declared once (`plan.options.PlanOptions`: name, type, default); the CLI's
`PlanArgs` is that class plus its output options, with a flag per field, and the core takes either.

No `from __future__ import annotations` here: the classes below stand for the core's declaration,
whose annotations typer reads as they are."""

import dataclasses
from typing import Annotated

import pytest
import typer
from typer.main import get_command

import dflash_tools
from dflash_tools.cli._options import DraftsOption, TargetOption, command_for
from dflash_tools.cli.app import app
from dflash_tools.cli.plan_cmd import FLAGS, PlanArgs
from dflash_tools.plan.model import GIVEN, PRESET, REQUEST_SETTINGS
from dflash_tools.plan.options import PlanOptions
from dflash_tools.plan.presets import load_preset
from dflash_tools.plan.request import plan_request

# The options only the CLI has: how to print, and the Hub client's (plan_launch's own arguments).
CLI_ONLY = {"token", "timeout", "output_format", "json_flag", "quiet", "no_color"}


def core_fields() -> list[str]:
    return list(PlanOptions.__annotations__)


def test_the_cli_declares_no_option_the_core_reads() -> None:
    """PlanArgs adds only the CLI's own options; every option the core reads is PlanOptions'."""
    assert issubclass(PlanArgs, PlanOptions)
    assert set(vars(PlanArgs)["__annotations__"]) == CLI_ONLY
    assert set(REQUEST_SETTINGS) <= set(core_fields())
    assert set(FLAGS) == set(core_fields())


def test_every_core_option_is_on_the_command_line_with_its_type_and_default() -> None:
    command = get_command(app).commands["plan"]  # type: ignore[attr-defined]
    params = {param.name: param for param in command.params}
    assert set(params) == set(core_fields()) | CLI_ONLY
    for field in dataclasses.fields(PlanOptions()):
        assert params[field.name].default == field.default, field.name
    assert params["tensor_parallel_size"].opts == ["--tensor-parallel-size"]


def test_plan_request_takes_the_options_from_python() -> None:
    """A library caller builds `PlanOptions` as the CLI does: a preset merged, each value's source."""
    assert (dflash_tools.PlanOptions, dflash_tools.plan_request) == (PlanOptions, plan_request)
    request = plan_request(PlanOptions(preset="qwen3.8-27b-dflash2", max_num_seqs=4, num_speculative_tokens="5"))
    preset = load_preset("qwen3.8-27b-dflash2")
    assert request.target == preset.target
    assert [draft.source for draft in request.drafts] == [entry.draft for entry in preset.drafts]
    assert (request.max_num_seqs, request.num_speculative_tokens) == (4, 5)
    assert request.sources["target"] == PRESET and request.sources["max_num_seqs"] == GIVEN
    options = PlanOptions(target="t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.target = "u"  # type: ignore[misc]


def test_a_core_option_without_a_flag_is_refused_when_the_command_is_registered() -> None:
    class Options:
        target: str | None = None
        drafts: list[str] | None = None

    class Args(Options):
        quiet: bool = False

    with pytest.raises(TypeError, match=r"fields without a flag \['drafts'\]"):
        command_for(Args, "plan_run", {"target": TargetOption})
    with pytest.raises(TypeError, match=r"flags without a field \['preset'\]"):
        command_for(Args, "plan_run", {"target": TargetOption, "drafts": DraftsOption, "preset": TargetOption})
    # A shared option keeps its one type: a field of another type is a mistake in one of the two.
    with pytest.raises(TypeError, match=r"Args.drafts: the option is str \| None"):
        command_for(Args, "plan_run", {"target": TargetOption, "drafts": TargetOption})
    flag = typer.Option("--draft")
    command = command_for(Args, "plan_run", {"target": TargetOption, "drafts": flag})
    assert command.__annotations__["drafts"] == Annotated[list[str] | None, flag]
    assert list(command.__annotations__) == ["target", "drafts", "quiet", "return"]
