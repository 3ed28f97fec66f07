"""`runfold init`, `verify`, `log`, `show`: the ledger verbs."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ledger verbs to `app`."""
    return None
