"""A real PostgreSQL server for the tests of the PostgreSQL store: the throwaway server of
`bench/_pg.py` (initdb into a temporary directory, a unix socket, run as `nobody` under root),
one per test session (per xdist worker), and a fresh workspace name per test."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def start_postgres() -> Any:
    """Start the throwaway server (`bench/_pg.py` `Postgres`); the caller calls `stop()`."""
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    from _pg import Postgres

    return Postgres()


def workspace_url(dsn: str, name: str | None = None) -> str:
    """The store URL of a fresh workspace on the server of `dsn` (`?host=…&workspace=NAME`)."""
    return f"{dsn}&workspace={name or 't-' + uuid.uuid4().hex[:12]}"
