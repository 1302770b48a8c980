"""Options every command shares, declared once so their names, help and env vars never drift."""

from __future__ import annotations

from typing import Annotated

import typer

from dflash_tools.cli._output import OutputFormat

TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="HF_TOKEN",
        help="Hugging Face token (default: $HF_TOKEN or the saved login).",
        show_default=False,
    ),
]
TargetRevisionOption = Annotated[str | None, typer.Option("--target-revision", help="Hub revision of the target.")]
FormatOption = Annotated[
    OutputFormat,
    typer.Option("--format", "-f", envvar="DFLASH_TOOLS_FORMAT", help="human or json (one document on stdout)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Shorthand for --format json.")]
NoColorOption = Annotated[bool, typer.Option("--no-color", help="No colour (also: NO_COLOR).")]
