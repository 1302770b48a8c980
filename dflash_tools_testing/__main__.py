"""`python -m dflash_tools_testing [FOLDER]`: regenerate the bundled examples (default: dflash_tools/examples)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dflash_tools.reading.local import examples_dir
from dflash_tools_testing import write_examples

DEFAULT = examples_dir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_tools_testing",
        description="Write the small example checkpoints that dflash-tools bundles (example:NAME) into FOLDER.",
    )
    parser.add_argument(
        "folder",
        nargs="?",
        default=str(DEFAULT),
        metavar="FOLDER",
        help="where to write them (default: the package's dflash_tools/examples)",
    )
    args = parser.parse_args(argv)
    if args.folder.startswith("-"):
        # `-- --help` would otherwise make a folder named --help: almost surely a mistyped option.
        parser.error(f"{args.folder!r} looks like an option, not a folder; write ./{args.folder} if you mean it")
    for path in write_examples(Path(args.folder)):
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    sys.exit(main())
