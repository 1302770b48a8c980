"""Command-line entry point (`dflash-tools`)."""

from __future__ import annotations

from dflash_tools.cli.app import app, register_commands

register_commands()

__all__ = ["app", "main"]


def main() -> None:
    app()
