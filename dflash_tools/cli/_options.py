"""Options every command shares, declared once so their names, help and env vars never drift.

This module is on the `--help` path: it imports typer and nothing else of weight (no rich, no
core module). An option's `rich_help_panel` names the group it is listed under in `--help`
(`_help.py` lays the page out); use the panel names below so the same option sits in the same
group in every command.
"""

from enum import StrEnum
from typing import Annotated

import typer


class OutputFormat(StrEnum):
    HUMAN = "human"
    JSON = "json"


class Panel:
    """Option groups shared by several commands (a command may add its own)."""

    HUB = "Hugging Face Hub"
    OUTPUT = "Output"


TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="HF_TOKEN",
        help="Hugging Face token (default: $HF_TOKEN or the saved login).",
        show_default=False,
        rich_help_panel=Panel.HUB,
    ),
]
TargetRevisionOption = Annotated[
    str | None, typer.Option("--target-revision", help="Hub revision of the target.", rich_help_panel=Panel.HUB)
]
# The same name means the same thing in every command: `--timeout` bounds each Hub request.
HubTimeoutOption = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="Seconds for each Hub request.", rich_help_panel=Panel.HUB),
]
FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        "-f",
        envvar="DFLASH_TOOLS_FORMAT",
        help="human, or json (one document on stdout).",
        rich_help_panel=Panel.OUTPUT,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Shorthand for --format json.", rich_help_panel=Panel.OUTPUT)]
NoColorOption = Annotated[
    bool, typer.Option("--no-color", help="No colour (also: NO_COLOR).", rich_help_panel=Panel.OUTPUT)
]
