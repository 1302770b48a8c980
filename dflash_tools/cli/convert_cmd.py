"""`dflash-tools convert`: the options (`ConvertArgs`) and help; the work is in `convert_run` (see `app.py`)."""

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
    QuietOption,
    RevisionOption,
    TargetOption,
    TokenOption,
    args_dataclass,
    command_for,
    complete_source,
)

HELP = """Normalize a draft checkpoint, or translate it between z-lab and speculators form.

Writes block_size and sample_from_anchor explicitly everywhere an engine reads them and leaves
every other byte of config.json as it was. The source is never modified: the result is built
in a staging folder next to OUT, inspected, and renamed into place. Unchanged weights are
hard-linked (or copied); tensors that must go are removed by streaming the bytes, no torch.

Examples:

  dflash-tools convert z-lab/Qwen3.8-27B-DFlash2 -o ./qwen38-dflash2
  dflash-tools convert ./anchor-draft -o ./out --sample-from-anchor
  dflash-tools convert ./speculators-draft -o ./zlab --to zlab
  dflash-tools convert ./speculators-draft -o ./for-sglang --for sglang
  dflash-tools convert ./draft --in-place
  dflash-tools convert ./draft -o ./out --dry-run
  dflash-tools convert ./draft --check
  dflash-tools convert ./draft -o ./out --push-to-hub me/draft-fixed
"""

EPILOG = (
    "Exit codes: 0 converted (or, with --check, nothing would change); 1 --check found changes, "
    "or the conversion was refused (conflicting values: the message names the flag that settles "
    "them; a conversion that would change behaviour; new errors in the result) or failed, or the "
    "written checkpoint still has error findings convert cannot fix (--allow-errors accepts them); "
    "2 usage error (e.g. --in-place with -o, a non-empty OUT without --force, --in-place on the "
    "Hugging Face cache) or a source that cannot be found or reached."
)

WHERE = "Where to write"
WHAT = "What to write"


@args_dataclass
class ConvertArgs:
    """The options of `convert`, as parsed."""

    # Optional to typer only: a required argument renders as `{SOURCE}` in typer's usage line.
    source: Annotated[
        str | None,
        typer.Argument(
            metavar="SOURCE",
            help="Checkpoint folder, Hub repo id or example:NAME.",
            show_default=False,
            autocompletion=complete_source,
        ),
    ] = None
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="OUT",
            help="New folder for the result (must be empty or absent).",
            show_default=False,
            rich_help_panel=WHERE,
        ),
    ] = None
    in_place: Annotated[
        bool,
        typer.Option(
            "--in-place",
            help="Rewrite SOURCE itself (a plain local folder; NAME.bak backups kept).",
            rich_help_panel=WHERE,
        ),
    ] = False
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the plan and the config.json diff; write nothing.", rich_help_panel=WHERE
        ),
    ] = False
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Write nothing; exit 1 if anything would change (a CI gate).", rich_help_panel=WHERE
        ),
    ] = False
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace a non-empty OUT or old backups; let a flag override an explicit value.",
            rich_help_panel=WHERE,
        ),
    ] = False
    allow_errors: Annotated[
        bool,
        typer.Option(
            "--allow-errors",
            help="Exit 0 (and push) even when the written checkpoint still has error findings convert cannot fix; "
            "without it that exits 1.",
            rich_help_panel=WHERE,
        ),
    ] = False
    backup: Annotated[
        bool,
        typer.Option(
            "--backup/--no-backup", help="With --in-place: keep NAME.bak of every replaced file.", rich_help_panel=WHERE
        ),
    ] = True
    link_mode: Annotated[
        Literal["auto", "hardlink", "copy", "symlink"],
        typer.Option("--link-mode", help="How unchanged weights reach OUT.", rich_help_panel=WHERE),
    ] = "auto"
    # Every dialect the API writes (`convert.TARGET_FAMILIES`; tests/hostile/test_hostile_readers.py holds
    # the two lists equal): spelled out so that --help imports no dialect.
    to: Annotated[
        Literal["zlab", "speculators", "muse-glimmer"] | None,
        typer.Option(
            "--to",
            help="Translate to this dialect (DFlash / DFlash2; muse-glimmer from z-lab; default: keep the dialect).",
            show_default=False,
            rich_help_panel=WHAT,
        ),
    ] = None
    for_engines: Annotated[
        list[str] | None,
        typer.Option(
            "--for",
            metavar="ENGINE",
            # Release names from the tables when the page is shown (`_help.expand`).
            help="Write what this engine release reads (sglang: z-lab form) and refuse a draft it cannot serve as "
            "trained: {releases}; {newest}; all. Repeat it or separate names with commas.",
            show_default=False,
            rich_help_panel=WHAT,
        ),
    ] = None
    block_size: Annotated[
        int | None,
        typer.Option(
            "--block-size",
            min=1,
            help="The trained block size, overriding the checkpoint.",
            show_default=False,
            rich_help_panel=WHAT,
        ),
    ] = None
    sample_from_anchor: Annotated[
        bool | None,
        typer.Option(
            "--sample-from-anchor/--no-sample-from-anchor",
            help="The trained layout: anchor-first / bonus-anchor.",
            show_default=False,
            rich_help_panel=WHAT,
        ),
    ] = None
    target: TargetOption = None
    revision: RevisionOption = None
    token: TokenOption = None
    timeout: HubTimeoutOption = 10.0
    push_to_hub: Annotated[
        str | None,
        typer.Option(
            "--push-to-hub",
            metavar="REPO",
            help="Upload the result to this Hub repo, as a pull request.",
            show_default=False,
            rich_help_panel=Panel.HUB,
        ),
    ] = None
    pr: Annotated[
        bool,
        typer.Option(
            "--pr/--no-pr",
            help="--no-pr: commit directly (creating the repo if needed) instead of opening a pull request.",
            rich_help_panel=Panel.HUB,
        ),
    ] = True
    commit_message: Annotated[
        str | None,
        typer.Option(
            "--commit-message",
            help="Commit / pull request title for --push-to-hub.",
            show_default=False,
            rich_help_panel=Panel.HUB,
        ),
    ] = None
    output_format: FormatOption = OutputFormat.HUMAN
    json_flag: JsonOption = False
    quiet: QuietOption = False
    no_color: NoColorOption = False


def register(app: typer.Typer) -> None:
    app.command(
        "convert",
        cls=Command,
        help=HELP,
        short_help="Normalize a draft, or translate it (z-lab <-> speculators).",
        epilog=EPILOG,
        no_args_is_help=True,
    )(command_for(ConvertArgs, "convert_run"))
