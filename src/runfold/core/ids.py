"""Identifiers: run ids (UUIDv7, nil for the workspace), seqs and millisecond timestamps.

Generation takes the clock reading and random bytes as arguments so the core stays pure; the
caller (storage, runtime) supplies them (RFC 9562 §5.7 for the UUIDv7 layout).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NewType

from runfold.core.errors import invalid_args

RunId = NewType("RunId", str)
"""A lowercase hyphenated UUID; real runs are UUIDv7."""
Seq = NewType("Seq", int)
"""A line's global position in the workspace ledger, contiguous from 0."""
Millis = NewType("Millis", int)
"""UTC milliseconds since the Unix epoch."""

WORKSPACE_RUN = RunId("00000000-0000-0000-0000-000000000000")
"""The nil UUID: the run of workspace-level lines."""

ZERO_HASH = "0" * 64
"""The `prev` of line 0."""

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def run_id_v7(ms: int, random_bytes: bytes) -> RunId:
    """Build a UUIDv7 from a UTC millisecond time and ≥ 10 random bytes (RFC 9562 §5.7).

    Raises ValueError when `random_bytes` is shorter than 10 or `ms` is outside 48 bits.
    """
    if len(random_bytes) < 10:
        raise ValueError("run_id_v7 needs at least 10 random bytes")
    if not 0 <= ms < 1 << 48:
        raise ValueError(f"run_id_v7: time {ms} ms is outside 48 bits")
    rand_a = int.from_bytes(random_bytes[0:2], "big") & 0x0FFF
    rand_b = int.from_bytes(random_bytes[2:10], "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{value:032x}"
    return RunId(f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")


def is_run_id(text: str) -> bool:
    """True for a lowercase hyphenated UUID (any version, including nil)."""
    return bool(_UUID.match(text))


def parse_run_id(text: str) -> RunId:
    """Return `text` as a RunId; raises `E_INVALID_ARGS` when it is not a lowercase UUID."""
    if not is_run_id(text):
        raise invalid_args(
            "read run id",
            repr(text),
            "give a lowercase hyphenated UUID such as the ones `runfold runs` prints",
        )
    return RunId(text)


def is_hex64(text: str) -> bool:
    """True for 64 lowercase hex digits (a BLAKE3-256 digest)."""
    return bool(_HEX64.match(text))


def run_id_time_ms(run: RunId) -> int | None:
    """The creation time of a UUIDv7 run id in ms, or None for other versions."""
    if run[14] != "7":
        return None
    return int(run.replace("-", "")[:12], 16)


def runs_with_prefix(prefix: str, runs: Iterable[str]) -> list[str]:
    """The ids among `runs` that start with `prefix`, in their first order and once each, like
    git's abbreviated hashes: hyphens in either are ignored, so are case and blanks around the
    prefix (`0190F6A2-7C` and `0190f6a27c` name the same runs). A prefix with nothing left once
    blanks and hyphens are dropped names no run. The one rule by which the commands, the server
    and the agents' tools read a run named by the start of its id; `short_run_ids` prints
    prefixes it resolves."""
    key = run_prefix_key(prefix)
    if not key:
        return []
    return [run for run in dict.fromkeys(runs) if run.replace("-", "").startswith(key)]


def run_prefix_key(prefix: str) -> str:
    """What `runs_with_prefix` compares of `prefix`: lowercase, without blanks around it or
    hyphens; empty when the prefix names no run."""
    return prefix.strip().lower().replace("-", "")


def short_run_ids(runs: Iterable[str], minimum: int = 8) -> dict[str, str]:
    """The shortest prefix of each run id (at least `minimum` characters, never ending on a
    hyphen) that no other id in `runs` shares, like git's abbreviated hashes; the nil run is
    `workspace`. UUIDv7 ids start with their creation time, so runs started together need
    more than 8 characters. Every prefix returned resolves back through a unique-prefix lookup.
    """
    ids = sorted(set(runs))
    names: dict[str, str] = {}
    for index, run in enumerate(ids):
        length = minimum
        for other in ids[max(index - 1, 0) : index + 2]:
            if other != run:
                shared = next(
                    (i for i, (a, b) in enumerate(zip(run, other, strict=False)) if a != b), len(run)
                )
                length = max(length, shared + 1)
        if length < len(run) and run[length - 1] == "-":
            length += 1
        names[run] = "workspace" if run == WORKSPACE_RUN else run[:length]
    return names
