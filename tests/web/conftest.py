"""Fixtures of the web tests: a scripted workspace shared by a module, and the browser."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (never a downloaded browser). Skipped with the
    reason when /usr/bin/chromium is absent outside CI; under CI=true its absence fails."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but /usr/bin/chromium is missing: .ci/run installs the chromium package")
        pytest.skip("the browser tests need Debian's Chromium at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """Where the browser tests save a screenshot of each page (a test artefact): under
    `$RUNFOLD_TEST_ARTEFACTS/screenshots/<test module>/` when set (`.ci/run` sets it, so CI keeps
    them), else a temporary directory."""
    keep = os.environ.get("RUNFOLD_TEST_ARTEFACTS")
    if not keep:
        return tmp_path_factory.mktemp("screenshots")
    where = Path(keep) / "screenshots" / request.module.__name__.rsplit(".", 1)[-1]
    where.mkdir(parents=True, exist_ok=True)
    return where
