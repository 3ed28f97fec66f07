"""The CLI handing over to a process that owns the workspace as `runfold serve` does but answers
its API with something else (another program on the port, a proxy's page, a broken server):
`runfold runs` still lists the ledger, and `run`, `steer`, `cancel` say the answer could not be
read instead of failing with an internal error or claiming the request was handed over."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from srv_support import env, make_workspace, write_script

from runfold.api import Workspace

FAKE = Path(__file__).with_name("fake_server.py")


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runfold", *args, "-w", str(root)],
        cwd=root, env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(params=["<html>not json</html>", '{"runs": 5}', '{"runs": [1, "x"], "run": 7}'])
def garbled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    root = make_workspace(tmp_path / "ws")
    script = write_script(tmp_path / "answer.jsonl", [{"content": [{"kind": "text", "text": "done"}]}])
    Workspace(root).run("hello", model=f"script:{script}")
    (root / ".runfold" / "fake-body").write_text(request.param)
    fake = subprocess.Popen([sys.executable, str(FAKE), str(root), "body", request.param], stdout=subprocess.PIPE, text=True, env=env())
    try:
        assert fake.stdout is not None and fake.stdout.readline().strip() == "ready"
        yield root
    finally:
        fake.kill()
        fake.wait()


def test_runs_lists_the_ledger_when_the_server_answers_garbage(garbled: Path) -> None:
    res = cli(garbled, "runs")
    assert res.returncode == 0, res.stderr
    assert "hello" in res.stdout and "internal error" not in res.stderr
    if "runs\": [" not in (garbled / ".runfold" / "fake-body").read_text():  # a list of runs none of which is one
        assert "note: runs queued on the server are not listed: E_INVALID_ARGS" in res.stderr, res.stderr


def test_runs_lists_the_ledger_when_the_server_never_answers(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    script = write_script(tmp_path / "answer.jsonl", [{"content": [{"kind": "text", "text": "done"}]}])
    Workspace(root).run("hello", model=f"script:{script}")
    fake = subprocess.Popen([sys.executable, str(FAKE), str(root), "hang"], stdout=subprocess.PIPE, text=True, env=env())
    try:
        assert fake.stdout is not None and fake.stdout.readline().strip() == "ready"
        res = cli(root, "runs")
    finally:
        fake.kill()
        fake.wait()
    assert res.returncode == 0, res.stderr
    assert "hello" in res.stdout
    assert "note: runs queued on the server are not listed" in res.stderr and "ReadTimeout" in res.stderr, res.stderr


def test_steer_cancel_and_run_say_the_answer_could_not_be_read(garbled: Path) -> None:
    for args in (("steer", "0000", "hi"), ("cancel", "0000"), ("run", "--model", "local", "x")):
        res = cli(garbled, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "E_INVALID_ARGS: cannot read the answer of the runfold server" in res.stderr, (args, res.stderr)
        assert "handed to run" not in res.stdout
