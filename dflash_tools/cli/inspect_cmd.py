"""`dflash-tools inspect`: the options and help; the work is in `inspect_run` (see `app.py`)."""

from typing import Annotated, Literal

import typer

from dflash_tools.cli._help import Command
from dflash_tools.cli._options import (
    FormatOption,
    HubTimeoutOption,
    JsonOption,
    NoColorOption,
    OutputFormat,
    Panel,
    TargetRevisionOption,
    TokenOption,
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


def register(app: typer.Typer) -> None:
    app.command(
        "inspect",
        cls=Command,
        help=HELP,
        short_help="Check a draft's config and tensor headers (no weights read).",
        epilog=EPILOG,
        no_args_is_help=True,
    )(inspect_command)


def inspect_command(
    sources: Annotated[
        list[str] | None,
        typer.Argument(metavar="SOURCE", help="Checkpoint folder, file, repo id or example:NAME.", show_default=False),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target", "-t", help="Target model (folder or repo id): check the pairing.", rich_help_panel=CHECKS
        ),
    ] = None,
    num_speculative_tokens: Annotated[
        int | None,
        typer.Option(
            "-k",
            "--num-speculative-tokens",
            min=1,
            help="Serving K to check against the trained geometry.",
            rich_help_panel=CHECKS,
        ),
    ] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(
            "--engine",
            # The names are the core's (`serving.engine_view.engine_choices()`, checked when the
            # command runs); listed here so that --help need not import it. tests/cli/test_help.py
            # compares them.
            metavar="ENGINE",
            help="What an engine release will do with the draft, and its launch line: sglang (the newest table, "
            "sglang==0.5.23), vllm==0.33.0, vllm==0.34.0 (their rules; they need not be installed), all (every "
            "one), or vllm (the vLLM installed in this Python environment). Repeat it or separate names with "
            "commas.",
            show_default=False,
            rich_help_panel=CHECKS,
        ),
    ] = None,
    fail_on: Annotated[
        Literal["error", "warning", "info"],
        typer.Option("--fail-on", help="Lowest finding severity that makes the exit code 1.", rich_help_panel=CHECKS),
    ] = "error",
    revision: Annotated[
        str | None,
        typer.Option("--revision", help="Hub branch, tag or commit of the draft.", rich_help_panel=Panel.HUB),
    ] = None,
    target_revision: TargetRevisionOption = None,
    token: TokenOption = None,
    timeout: HubTimeoutOption = 10.0,
    author: Annotated[
        str | None,
        typer.Option(
            "--author", help="Inspect every Hub model of this author (with --search to filter).", rich_help_panel=MANY
        ),
    ] = None,
    search: Annotated[
        str | None, typer.Option("--search", help="Hub search string, used with --author.", rich_help_panel=MANY)
    ] = None,
    limit: Annotated[
        int,
        typer.Option("--limit", min=1, help="Most Hub models to inspect with --author/--search.", rich_help_panel=MANY),
    ] = 100,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, help="Sources inspected at once.", rich_help_panel=MANY)
    ] = 8,
    output_format: FormatOption = OutputFormat.HUMAN,
    json_flag: JsonOption = False,
    tensors: Annotated[
        bool,
        typer.Option(
            "--tensors", help="Show (or include in JSON) the full tensor table.", rich_help_panel=Panel.OUTPUT
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="Human output: only the verdict and the findings.", rich_help_panel=Panel.OUTPUT
        ),
    ] = False,
    no_color: NoColorOption = False,
) -> None:
    options = dict(locals())  # exactly the parameters above
    from dflash_tools.cli import inspect_run  # the work, imported only when the command runs

    inspect_run.run(**options)
