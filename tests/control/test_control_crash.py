"""Exactly-once delivery across a SIGKILL of the owner.

A `runfold run` process works through many short turns while this test keeps dropping steers
(and one cancel) into the control inbox; the owner is killed with SIGKILL at a random moment —
before a handed-over steer was fsynced, between the fsync and the inbox delete, mid-wave, after
the freeze. Then a resume (the next writer) runs. After each trial: the ledger verifies; no signal
id is recorded twice; every request is answered — recorded in the ledger exactly once (its ack
names the seq) or refused with a reason — and none is left in the inbox; a steer the dead owner
had accepted is never silently dropped. RUNFOLD_CONTROL_TRIALS raises the trial count (default 6).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from ctl_support import start_run, wait_for, write_script

from runfold.api import Workspace
from runfold.store.control import ControlDir, ControlRequest, new_signal_id
from runfold.store.ledger import now_ms

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

TRIALS = int(os.environ.get("RUNFOLD_CONTROL_TRIALS", "6"))
TURNS = 12


def script(tmp: Path) -> Path:
    entries: list[dict[str, object]] = []
    for i in range(TURNS):
        entries.append(
            {
                "content": [
                    {"kind": "text", "text": f"step {i}"},
                    {"kind": "tool_use", "id": f"a{i}", "name": "list_dir", "input": "{}"},
                    {
                        "kind": "tool_use",
                        "id": f"b{i}",
                        "name": "write_file",
                        "input": f'{{"path":"f{i}.txt","content":"x"}}',
                    },
                ],
                "stop": "tool_use",
                "delay_ms": 40,
            }
        )
    entries.append({"content": [{"kind": "text", "text": "done"}], "stop": "end_turn"})
    return write_script(tmp / "s.jsonl", entries)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_no_steer_lost_or_recorded_twice_across_a_sigkill(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial * 7919 + 1)
    root = tmp_path / "ws"
    Workspace.init(root)
    (root / ".runfold" / "config.toml").write_text("[defaults]\nmax_turns = 50\n")
    proc = start_run(root, script(tmp_path))
    run = wait_for(root, "model_called", proc)
    cd = ControlDir(root)
    sent: list[str] = []
    accepted: set[str] = set()
    kill_at = time.monotonic() + rng.uniform(0.0, 1.2)
    cancel_after = rng.randrange(3, 30)
    while time.monotonic() < kill_at and proc.poll() is None:
        kind = "cancel" if len(sent) == cancel_after else "steer"
        req = ControlRequest(
            new_signal_id(), run, kind, "user", f"steer {len(sent)}" if kind == "steer" else "", now_ms()
        )
        cd.write_request(req)
        sent.append(req.signal)
        time.sleep(rng.uniform(0.0, 0.03))
        for sig in sent:
            ack = cd.read_ack(sig)
            if ack is not None and ack.state in ("accepted", "recorded"):
                accepted.add(sig)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)

    ws = Workspace.open(root)
    durable = {str(r.env.data.get("signal")) for r in ws.records(run=run)}
    window = [s for s in sent if s in durable and cd.request_path(s).exists()]  # fsynced, not deleted
    ws.close()
    ws.resume()  # the next owner: records what the dead one was handed, settles the inbox
    ws.verify()
    assert not ws.resume().wrote
    lines = ws.records(run=run)
    assert lines[-1].kind_name == "run_frozen"
    recorded = Counter(
        str(r.env.data["signal"])
        for r in lines
        if r.kind_name in ("steer_received", "cancel_received") and "signal" in r.env.data
    )
    assert all(n == 1 for n in recorded.values()), recorded.most_common(3)
    assert cd.requests() == []
    for sig in sent:
        ack = cd.read_ack(sig)
        assert ack is not None, f"{sig} was never answered"
        if ack.state == "recorded":
            assert sig in recorded and ws.record_at(ack.seq or 0).env.data.get("signal") == sig
        else:
            assert ack.state == "refused" and ack.reason and sig not in recorded
    frozen = lines[-1].env.data
    if frozen.get("cause") == "process_died":
        # the owner died with the run open: everything it was sent, handed over or not, is on
        # the run now (recorded live, or by resume just before the freeze)
        assert set(recorded) == set(sent)
    else:
        # the run ended by itself or by the cancel: what it had accepted was recorded, or
        # refused because the run froze first
        for sig in accepted - set(recorded):
            assert "frozen" in (cd.read_ack(sig).reason or "")  # type: ignore[union-attr]
    print(
        "TRIAL",
        trial,
        frozen.get("completion"),
        frozen.get("cause"),
        len(sent),
        len(accepted),
        len(recorded),
        len(window),
    )
    ws.fold(run)  # the history folds into a valid conversation
