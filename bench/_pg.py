"""A throwaway PostgreSQL server for benchmarks and tests: `initdb` into a temporary directory,
listening only on a unix socket there, run as `nobody` when the caller is root (the server
refuses to run as root), stopped and removed by `stop()`.

One helper for every script and test that needs a real server (`bench/peers.py`,
`bench/pg_ledger.py`, `bench/pg_race.py`, the PostgreSQL store tests).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def postgres_bin() -> Path | None:
    """The newest `/usr/lib/postgresql/<version>/bin` holding `initdb`, or None."""
    bins = [Path(b) for b in sorted(glob.glob("/usr/lib/postgresql/*/bin")) if Path(b, "initdb").exists()]
    return bins[-1] if bins else None


class Postgres:
    """A throwaway PostgreSQL server (see the module docstring). `dsn` connects as the superuser
    `bench` to database `postgres`; `database(name)` creates another and returns its DSN.
    Raises RuntimeError when no server binaries are installed, CalledProcessError when initdb
    or pg_ctl fails."""

    def __init__(self, max_connections: int = 100) -> None:
        found = postgres_bin()
        if found is None:
            raise RuntimeError("no PostgreSQL under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
        self.bin = found
        self.dir = Path(tempfile.mkdtemp(prefix="runfold-pg-"))
        self.user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "nobody", "nogroup")
            self.user = ["runuser", "-u", "nobody", "--"]
        data = self.dir / "data"
        self._run(str(self.bin / "initdb"), "-D", str(data), "-U", "bench", "-A", "trust", "--no-sync")
        opts = f"-c listen_addresses='' -k {self.dir} -c max_connections={max_connections}"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start"
        )
        self.dsn = f"postgresql://bench@/postgres?host={self.dir}"

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self.user, *cmd], check=True, capture_output=True, timeout=120)

    @property
    def version(self) -> str:
        return self.bin.parent.name

    def database(self, name: str) -> str:
        """Create database `name` (dropping one left over) and return its DSN."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn.replace("/postgres?", f"/{name}?")

    def stop(self) -> None:
        subprocess.run(
            [*self.user, str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop"],
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(self.dir, ignore_errors=True)
