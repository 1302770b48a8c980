"""Command-line entry point (`dflash-tools`): one module per command, one output sink, one error map.

`app` registers the commands; `inspect_cmd`, `convert_cmd` and `smoke_test_cmd` each parse their
options, call the library and render; `_output` is the only place that writes to the terminal and
`_errors` maps every library error to a one-line message, a next step and an exit code.

Imports: the commands (`inspect`, `convert`, `smoke`) and what they return (`draft`, `reading`,
`dialects`, `files`), plus typer and rich, which nothing outside this package imports.
"""

from __future__ import annotations

from dflash_tools.cli.app import app, register_commands

register_commands()

__all__ = ["app", "main"]


def main() -> None:
    app()
