"""`runfold steer` takes its words from a file (`--file PATH`) or standard input (`-`), so a
steer longer than a command line allows (about 128 KiB) reaches the run whole; `--from` refuses
the reserved `.runfold` as a sender; an empty `--model` is refused, never read as the local model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ctl_support import env, runfold, start_run, wait_for, write_script

from runfold.api import Workspace

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX flock and signals")

BIG = ("a steer too long for a command line " * 8000)[:300_000]  # ~300 KB, over the ~128 KiB argv cap


def _slow_reply(delay_ms: int) -> dict[str, object]:
    return {"content": [{"kind": "text", "text": "thinking"}], "stop": "end_turn", "delay_ms": delay_ms}


def test_steer_from_a_file_and_from_stdin_reaches_the_run_whole(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = write_script(tmp_path / "s.jsonl", [_slow_reply(20_000), _slow_reply(20_000), _slow_reply(0)])
    proc = start_run(root, script)
    run = wait_for(root, "model_called", proc)
    words = tmp_path / "review.md"
    words.write_text(BIG + "\n", encoding="utf-8")
    by_file = runfold(root, "steer", run[:8], "--file", str(words), "--json")
    assert by_file.returncode == 0, by_file.stderr
    piped = subprocess.run(
        [sys.executable, "-m", "runfold", "steer", run[:8], "-", "--json", "-w", str(root)],
        input="from stdin ✓\n",
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode == 0, piped.stderr
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    texts = [r.env.data["text"] for r in Workspace.open(root).records(run=run, kind="steer_received")]
    assert texts == [BIG, "from stdin ✓"]  # one trailing line break cut, nothing else


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "give the words"),
        (("words", "--file", "x.md"), "give the words once"),
        (("--file", "missing.md"), "cannot be read"),
        (("--file", "latin1.md"), "not UTF-8"),
        (("words", "--from", ".runfold"), "reserved"),
        (("words", "--from", "lab/.RUNFOLD/x"), "reserved"),
        (("words", "--from", "../up"), "'..' segment"),
    ],
)
def test_steer_refuses_bad_input_before_queueing_anything(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    (root / "latin1.md").write_bytes("café".encode("latin-1"))
    res = runfold(root, "steer", "0190", *args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("E_INVALID_ARGS: cannot ") and says in res.stderr, res.stderr
    assert not list((root / ".runfold").glob("control/inbox/*"))


def test_steer_from_the_reserved_directory_is_refused_with_a_live_owner(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    script = write_script(tmp_path / "s.jsonl", [_slow_reply(8_000)])
    proc = start_run(root, script)
    run = wait_for(root, "model_called", proc)
    res = runfold(root, "steer", run[:8], "pose as the ledger", "--from", ".runfold")
    assert res.returncode == 2 and "`.runfold` is reserved" in res.stderr, res.stderr
    proc.communicate(timeout=120)
    assert Workspace.open(root).records(run=run, kind="steer_received") == []


@pytest.mark.parametrize("spec", ["", "   ", "local:"])
def test_an_empty_model_spec_is_refused(tmp_path: Path, spec: str) -> None:
    root = tmp_path / "ws"
    Workspace.init(root).close()
    res = subprocess.run(
        [sys.executable, "-m", "runfold", "run", "hi", "--model", spec, "-w", str(root)],
        cwd=root,
        env={**env(), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "E_INVALID_ARGS: cannot choose the model" in res.stderr and json.dumps(spec)[1:-1] in res.stderr
    assert Workspace.open(root).runs() == []  # nothing was written
