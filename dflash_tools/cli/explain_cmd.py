"""`dflash-tools explain`: the options and help; the work is in `explain_run` (see `app.py`)."""

from typing import Annotated

import typer

from dflash_tools.cli._help import Command
from dflash_tools.cli._options import (
    FormatOption,
    JsonOption,
    NoColorOption,
    OutputFormat,
    args_dataclass,
    command_for,
    complete_finding_code,
)

HELP = """Explain a finding code: when it is raised, and what to do about it.

Without CODE, list every code with its severity and what it means: the catalogue that
docs/findings.md is rendered from, shipped with the tool.

Examples:

  dflash-tools explain DFT071
  dflash-tools explain 71
  dflash-tools explain
"""

EPILOG = "Exit codes: 0 explained; 2 no such code."


@args_dataclass
class ExplainArgs:
    """The options of `explain`, as parsed."""

    code: Annotated[
        str | None,
        typer.Argument(
            metavar="CODE",
            help="A finding code: DFT071, dft071 or 71.",
            show_default=False,
            autocompletion=complete_finding_code,
        ),
    ] = None
    output_format: FormatOption = OutputFormat.HUMAN
    json_flag: JsonOption = False
    no_color: NoColorOption = False


def register(app: typer.Typer) -> None:
    app.command(
        "explain",
        cls=Command,
        help=HELP,
        epilog=EPILOG,
        short_help="Explain a finding code (DFTnnn), or list them all.",
    )(command_for(ExplainArgs, "explain_run"))
