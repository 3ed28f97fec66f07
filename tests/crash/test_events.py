"""Acknowledgement: `Ledger.on_durable` and `runfold run --events` (the kill test's definition of
"acknowledged"): a line is reported only after the fsync of its batch, never for a failed batch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from crash_support import cli

from runfold.api import Workspace
from runfold.core.errors import RunfoldError
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.payloads import LogTruncated
from runfold.core.records import Draft, Record
from runfold.store.ledger import Ledger, WriterIO


def _draft(n: int) -> Draft:
    return Draft(
        WORKSPACE_RUN, "runtime", LogTruncated.KIND.value, LogTruncated.from_data({"dropped_bytes": n})
    )


def test_on_durable_reports_each_batch_after_its_fsync_and_never_a_failed_one(tmp_path: Path) -> None:
    synced: list[int] = []
    fail = [False]

    def sync(fd: int) -> None:
        if fail[0]:
            raise OSError("disk gone")
        os.fsync(fd)
        synced.append(fd)

    Workspace.init(tmp_path / "w").close()
    ledger = Ledger.open(tmp_path / "w", writer=True, io=WriterIO(sync=sync))
    seen: list[tuple[int, list[int]]] = []

    def on_durable(batch: list[Record]) -> None:
        seen.append((len(synced), [r.seq for r in batch]))

    ledger.on_durable.append(on_durable)
    ledger.stage([_draft(1), _draft(2)])
    assert seen == []  # staged is not durable
    ledger.flush()
    ledger.append([_draft(3)])
    assert seen == [(1, [1, 2]), (2, [3])]  # each after its own fsync, in seq order
    fail[0] = True
    with pytest.raises(RunfoldError):
        ledger.append([_draft(4)])
    assert len(seen) == 2  # the failed batch is never acknowledged
    ledger.close()


def test_run_events_prints_every_line_of_the_run_once_durable(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = tmp_path / "s.jsonl"
    wave = {
        "content": [
            {"kind": "tool_use", "id": "a", "name": "write_file", "input": '{"path":"x.txt","content":"1"}'},
            {"kind": "tool_use", "id": "b", "name": "list_dir", "input": "{}"},
        ]
    }
    script.write_text(
        json.dumps(wave) + "\n" + json.dumps({"content": [{"kind": "text", "text": "ok"}]}) + "\n"
    )
    res = cli("run", "go", "--model", f"script:{script}", "--events", "--json", "-w", root, cwd=root)
    assert res.code == 0, res.out + res.err
    *events, summary = [json.loads(line) for line in res.out.splitlines()]
    ws = Workspace.open(root)
    lines = ws.records(run=summary["run"])
    assert events == [{"seq": r.seq, "run": r.run, "kind": r.kind_name, "hash": r.hash} for r in lines]
    assert summary["completion"] == "done" and "done:" not in res.out
    plain = cli("run", "go again", "--model", f"script:{script}", "--events", "-w", root, cwd=root)
    assert plain.code == 0
    assert all(json.loads(line)["kind"] for line in plain.out.splitlines())  # stdout is JSON Lines only
    assert "done:" in plain.err  # the summary went to stderr
