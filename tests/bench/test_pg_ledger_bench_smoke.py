"""Smoke test of bench/pg_ledger.py, so the benchmark cannot rot: each part at a tiny size on the
session's PostgreSQL server, the migrate round trip byte-identical with matching heads, and
positive rates for both stores."""

from __future__ import annotations

from pathlib import Path

from bench_scripts import load_bench

from runfold.store.backend import parse_store_url


def test_every_part_runs_and_the_round_trip_is_byte_identical(tmp_path: Path, postgres: str) -> None:
    bench = load_bench("pg_ledger")
    url = parse_store_url(postgres).conninfo
    rates = bench.appends(tmp_path, url, 10, 3)
    assert rates["files"] > 0 and rates["postgresql"] > 0
    trip = bench.verify_and_migrate(tmp_path / "trip", url, 300)
    assert trip["heads_match"] and trip["bytes_identical"] and trip["lines"] == 300
    assert all(v > 0 for v in trip["verify_mb_s"].values())
    cas = bench.cas(tmp_path, postgres, 3, 4096)
    assert min(cas.values()) > 0
