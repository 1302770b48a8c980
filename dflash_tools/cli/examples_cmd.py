"""`dflash-tools examples`: the options and help; the work is in `examples_run` (see `app.py`)."""

from typing import Annotated

import typer

from dflash_tools.cli._help import Command
from dflash_tools.cli._options import FormatOption, JsonOption, NoColorOption, OutputFormat, Panel

HELP = """List the bundled example checkpoints, usable anywhere a SOURCE or --target goes as example:NAME.

With NAME and --copy-to DIR, copy that example into a new folder of your own, to edit it or to
try `convert --in-place` on it (the bundled copy is never modified).

Examples:

  dflash-tools examples
  dflash-tools examples zlab-dflash2 --copy-to ./my-draft
  dflash-tools inspect example:zlab-dflash2
  dflash-tools smoke-test --runtime torch --device cpu \\
      -t example:engine-demo/target -d example:engine-demo/zlab-dflash2
"""


COPY = "Copy"


def register(app: typer.Typer) -> None:
    app.command("examples", cls=Command, help=HELP, short_help="List the bundled example:NAME checkpoints.")(
        examples_command
    )


def examples_command(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME", help="One example (NAME or example:NAME): show it, or copy it.", show_default=False
        ),
    ] = None,
    copy_to: Annotated[
        str | None,
        typer.Option(
            "--copy-to",
            metavar="DIR",
            help="Copy example NAME into DIR, a new folder (absent or empty).",
            show_default=False,
            rich_help_panel=COPY,
        ),
    ] = None,
    output_format: FormatOption = OutputFormat.HUMAN,
    json_flag: JsonOption = False,
    names_only: Annotated[
        bool, typer.Option("--names", help="Only the example:NAME sources, one a line.", rich_help_panel=Panel.OUTPUT)
    ] = False,
    no_color: NoColorOption = False,
) -> None:
    options = dict(locals())  # exactly the parameters above
    from dflash_tools.cli import examples_run  # the work, imported only when the command runs

    examples_run.run(**options)
