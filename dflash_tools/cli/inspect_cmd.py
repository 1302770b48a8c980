"""`dflash-tools inspect`: the options (`InspectArgs`) and help; the work is in `inspect_run` (see `app.py`)."""

from typing import Annotated, Literal

import typer

from dflash_tools.cli._help import Command
from dflash_tools.cli._options import (
    EngineReleasesOption,
    FormatOption,
    HubTimeoutOption,
    JsonOption,
    KOption,
    NoColorOption,
    OutputFormat,
    Panel,
    QuietOption,
    RevisionOption,
    TargetOption,
    TargetRevisionOption,
    TokenOption,
    args_dataclass,
    command_for,
    complete_source,
)

HELP = """Check a draft checkpoint's config and tensor headers, without downloading weights.

SOURCE is a local folder, a .safetensors or config.json file, a Hugging Face repo id
(owner/name), or a bundled example:NAME (`dflash-tools examples` lists them). Several sources
are inspected concurrently and summarized together.

Examples:

  dflash-tools inspect example:zlab-dflash2
  dflash-tools inspect z-lab/Qwen3.8-27B-DFlash2 -t Qwen/Qwen3.8-27B -k 7
  dflash-tools inspect ./my-draft --format json | jq .geometry
  dflash-tools inspect ./anchor-first-draft --engine vllm
  dflash-tools inspect ./draft --engine all --target Qwen/Qwen3-8B
  dflash-tools inspect --author z-lab --search DFlash
"""

EPILOG = (
    "Exit codes: 0 no error findings; 1 at least one error finding (or a warning with "
    "--fail-on warning); 2 usage error or a source that cannot be found or reached."
)

CHECKS = "Checks"
MANY = "Several sources"


@args_dataclass
class InspectArgs:
    """The options of `inspect`, as parsed."""

    sources: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="SOURCE",
            help="Checkpoint folder, file, repo id or example:NAME.",
            show_default=False,
            autocompletion=complete_source,
        ),
    ] = None
    target: TargetOption = None
    num_speculative_tokens: KOption = None
    engines: EngineReleasesOption = None
    fail_on: Annotated[
        Literal["error", "warning", "info"],
        typer.Option("--fail-on", help="Lowest finding severity that makes the exit code 1.", rich_help_panel=CHECKS),
    ] = "error"
    revision: RevisionOption = None
    target_revision: TargetRevisionOption = None
    token: TokenOption = None
    timeout: HubTimeoutOption = 10.0
    author: Annotated[
        str | None,
        typer.Option(
            "--author", help="Inspect every Hub model of this author (with --search to filter).", rich_help_panel=MANY
        ),
    ] = None
    search: Annotated[
        str | None, typer.Option("--search", help="Hub search string, used with --author.", rich_help_panel=MANY)
    ] = None
    limit: Annotated[
        int,
        typer.Option("--limit", min=1, help="Most Hub models to inspect with --author/--search.", rich_help_panel=MANY),
    ] = 100
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, help="Sources inspected at once.", rich_help_panel=MANY)
    ] = 8
    output_format: FormatOption = OutputFormat.HUMAN
    json_flag: JsonOption = False
    tensors: Annotated[
        bool,
        typer.Option(
            "--tensors", help="Show (or include in JSON) the full tensor table.", rich_help_panel=Panel.OUTPUT
        ),
    ] = False
    quiet: QuietOption = False
    no_color: NoColorOption = False


def register(app: typer.Typer) -> None:
    app.command(
        "inspect",
        cls=Command,
        help=HELP,
        short_help="Check a draft's config and tensor headers (no weights read).",
        epilog=EPILOG,
        no_args_is_help=True,
    )(command_for(InspectArgs, "inspect_run"))
