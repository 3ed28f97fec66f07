"""A sample of bench/wave_campaign.py: 20 real `runfold run` processes stopped at random moments
(SIGINT, SIGTERM, SIGHUP, SIGKILL then resume) inside waves of fast and slow `exec` and read
calls; zero invalid histories, zero finished calls missing from a successor's conversation,
every unknown or never-started call named by the successor's note, no `exec` process alive."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bench_scripts import load_bench

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals and /proc")


def test_twenty_stops_at_random_moments_lose_nothing(tmp_path: Path) -> None:
    bench = load_bench("wave_campaign")
    done = bench.campaign(20, 20261202, 3, tmp_path)
    figures = bench.summary(done)
    assert figures["failed_trials"] == 0, figures["failures"]
    assert figures["stopped_mid_wave"] >= 3, figures  # the sample does reach inside waves
