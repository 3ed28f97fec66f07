"""Helpers for the end-to-end tests: the CLI runner of tests/cli (one implementation, shared)."""

from __future__ import annotations

from cli.cli_support import Result, run_cli

__all__ = ["Result", "run_cli"]
