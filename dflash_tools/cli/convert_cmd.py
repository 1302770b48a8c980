"""`dflash-tools convert` (being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the command to the root app."""
