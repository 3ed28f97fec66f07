"""Runs spread over Ray: the workspace owner as a named actor (one per workspace, found again by
a second claim), steer and cancel through it, an idempotent dispatch, and a batch with a worker
killed (SIGKILL) mid-batch: every run ends frozen with a valid history and none runs twice —
checked from the ledgers. Plus the `runfold batch` command and its errors."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import orjson
import pytest

from cli.cli_support import run_cli

ray = pytest.importorskip("ray")

from runfold.api import Workspace  # noqa: E402
from runfold.core.kinds import Kind  # noqa: E402
from runfold.runtime.spec import new_run_id  # noqa: E402
from runfold.server.batch import BatchRunner, TaskResult, audit, connect, read_tasks, shard_roots  # noqa: E402
from runfold.server.ray_owner import claim_owner, owner_name  # noqa: E402

LIST = {"kind": "tool_use", "id": "call_1", "name": "list_dir", "input": '{"path":"."}'}


def script(tmp: Path, delay_ms: int = 0, turns: int = 2) -> Path:
    """A scripted session: `turns - 1` folder listings, then an answer, each after `delay_ms`."""
    path = tmp / f"session-{delay_ms}-{turns}.jsonl"
    entries = [{"content": [LIST], "delay_ms": delay_ms} for _ in range(turns - 1)]
    entries.append({"content": [{"kind": "text", "text": "The folder is listed."}], "delay_ms": delay_ms})
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries))
    return path


def tasks_file(tmp: Path, n: int, model: Path) -> Path:
    path = tmp / "tasks.jsonl"
    path.write_bytes(
        b"".join(orjson.dumps({"id": f"t{i}", "task": f"list the folder ({i})", "model": f"script:{model}"}) + b"\n" for i in range(n))
    )
    return path


@pytest.fixture(scope="module")
def cluster() -> object:
    connect("local", workers=2)
    yield ray
    ray.shutdown()


def started_counts(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    with Workspace.open(root) as ws:
        for rec in ws.records(kind=Kind.RUN_STARTED.value):
            counts[rec.env.run] = counts.get(rec.env.run, 0) + 1
    return counts


def test_a_second_claim_finds_the_running_owner_and_a_dispatch_is_idempotent(cluster: object, tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    first = claim_owner(root)
    again = claim_owner(root)
    assert ray.get(first.pid.remote(), timeout=120) == ray.get(again.pid.remote(), timeout=120)
    assert owner_name(root) == owner_name(root) != owner_name(Workspace.init(tmp_path / "other").root)
    run = new_run_id()
    request = {"task": "list it", "model": f"script:{script(tmp_path)}"}
    ray.get(first.ensure.remote(run, request), timeout=120)
    assert ray.get(again.ensure.remote(run, request), timeout=120)["known"]  # asked twice: one run
    out = ray.get(first.outcome.remote(run), timeout=120)
    assert (out["frozen"], out["turns"]) == ("done", 2)
    ray.get(first.stop.remote(), timeout=120)
    ray.kill(first, no_restart=True)
    assert started_counts(root) == {run: 1}


def test_steer_and_cancel_go_to_the_owner_through_ray(cluster: object, tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    actor = claim_owner(root)
    slow = f"script:{script(tmp_path, delay_ms=1500, turns=20)}"
    run = new_run_id()
    assert ray.get(actor.ensure.remote(run, {"task": "list it slowly", "model": slow}), timeout=120)["state"] == "running"
    steered = ray.get(actor.steer.remote(run, "look at the notes too", True), timeout=180)
    assert steered["state"] == "recorded"
    cancelled = ray.get(actor.cancel.remote(run, True), timeout=180)
    assert cancelled["state"] in ("accepted", "recorded")
    out = ray.get(actor.outcome.remote(run), timeout=180)
    assert out["frozen"] == "cancelled"
    ray.get(actor.stop.remote(), timeout=120)
    ray.kill(actor, no_restart=True)
    with Workspace.open(root) as ws:
        kinds = [r.env.kind for r in ws.records(run)]
    assert Kind.CANCEL_RECEIVED.value in kinds and kinds[-1] == Kind.RUN_FROZEN.value


def test_a_worker_killed_mid_batch_loses_no_run_and_runs_none_twice(cluster: object, tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    model = script(tmp_path, delay_ms=150, turns=3)
    runner = BatchRunner(shard_roots(root, 2), concurrency=8, continue_lost=True)
    runner.claim()
    pids = ray.get([a.pid.remote() for a in runner.actors], timeout=120)
    killed: list[int] = []

    def on_result(_r: TaskResult, done: int) -> None:
        if done >= 10 and not killed:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    runner.on_result = on_result
    report = runner.run(read_tasks(tasks_file(tmp_path, 40, model)))
    after = ray.get(runner.actors[0].pid.remote(), timeout=180)
    info = ray.get(runner.actors[0].info.remote(), timeout=180)
    runner.stop()

    assert killed and after != pids[0]  # Ray restarted the owner in a new worker process
    check = audit(report)
    assert check["started_twice"] == [] and check["not_frozen"] == [] and check["missing"] == []
    assert check["frozen"] == check["runs"] == len(report.runs())
    # every task ends done, directly or through the successor of the run the kill lost
    assert [r.final.frozen for r in report.results] == ["done"] * 40
    lost = [r for r in report.runs() if r.lost]
    assert lost  # the killed owner had runs in flight (4 of the 8 at once, each ~0.5 s long)
    assert sorted(r.run for r in lost) == sorted(info["frozen_at_start"])  # resume froze them
    for r in lost:
        assert r.frozen == "cancelled" and r.continued_by is not None and r.continued_by.shard == r.shard
    for shard in report.shards:  # one run_started per run, in one shard
        assert set(started_counts(Path(shard)).values()) <= {1}


def test_batch_command_prints_outcomes_and_a_summary(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    tasks = tasks_file(tmp_path, 6, script(tmp_path))
    res = run_cli("batch", tasks, "--ray", "local", "--workers", "2", "-w", root, "--json", cwd=tmp_path, process=True)
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert data["summary"]["outcomes"] == {"done": 6} and data["summary"]["workers"] == 2
    assert data["check"]["frozen"] == 6 and data["check"]["started_twice"] == []
    assert sorted(r["id"] for r in data["results"]) == [f"t{i}" for i in range(6)]
    assert {r["shard"] for r in data["results"]} == {str(root / ".runfold" / "shards" / "0"), str(root / ".runfold" / "shards" / "1")}


def test_an_unreachable_cluster_is_an_error_not_a_local_run(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    tasks = tasks_file(tmp_path, 2, script(tmp_path))
    start = time.monotonic()
    res = run_cli("batch", tasks, "--ray", "127.0.0.1:9", "-w", root, cwd=tmp_path, process=True)
    assert res.code == 2
    assert res.err.startswith("E_INVALID_ARGS: cannot reach the Ray cluster") and "--ray local" in res.err
    assert started_counts(root) == {}  # nothing ran here instead
    assert time.monotonic() - start < 120


def test_a_missing_ray_extra_names_the_install(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    blocker = tmp_path / "block"
    (blocker / "ray").mkdir(parents=True)
    (blocker / "ray" / "__init__.py").write_text("raise ImportError('ray is not installed')\n")
    tasks = tasks_file(tmp_path, 1, script(tmp_path))
    path = os.pathsep.join([str(blocker), *sys.path])
    res = run_cli("batch", tasks, "--ray", "local", "-w", root, cwd=tmp_path, process=True, env={"PYTHONPATH": path})
    assert res.code == 3
    assert res.err.strip().splitlines() == [
        "E_CONFIG_INVALID: cannot run a batch on Ray (the ray package is not installed) on ray — "
        "install the extra: `pip install 'runfold[ray]'`"
    ]


def test_a_bad_task_line_is_refused_before_anything_runs(tmp_path: Path) -> None:
    root = Workspace.init(tmp_path / "ws").root
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task": "one"}\n\n{"task": "two", "modle": "x"}\n')
    res = run_cli("batch", tasks, "--ray", "local", "-w", root, cwd=tmp_path)
    assert res.code == 2
    assert f"on {tasks} line 3" in res.err and "unknown field 'modle'" in res.err
    tasks.write_text('{"task": "one"}\n{"task": "two", "max_turns": 0}\n')
    res = run_cli("batch", tasks, "--ray", "local", "-w", root, cwd=tmp_path)
    assert res.code == 2 and "line 2" in res.err


def test_a_served_workspace_is_refused_before_ray_starts(tmp_path: Path) -> None:
    from srv_support import start_server

    root = Workspace.init(tmp_path / "ws").root
    srv = start_server(root)
    try:
        blocker = tmp_path / "block"  # Ray cannot even be imported: the refusal comes first
        (blocker / "ray").mkdir(parents=True)
        (blocker / "ray" / "__init__.py").write_text("raise ImportError('ray is not installed')\n")
        tasks = tasks_file(tmp_path, 1, script(tmp_path))
        path = os.pathsep.join([str(blocker), *sys.path])
        res = run_cli("batch", tasks, "--ray", "local", "-w", root, cwd=tmp_path, process=True, env={"PYTHONPATH": path})
        assert res.code == 3, res.err
        [line] = res.err.strip().splitlines()
        assert line.startswith(f"E_LEDGER_HELD: cannot run a batch on {root}") and f"pid {srv.proc.pid}" in line
        with srv.client() as c:
            assert c.get("/runs").json()["runs"] == []  # nothing was dispatched to the server either
    finally:
        srv.stop()


def test_a_workspace_another_process_writes_is_one_clear_error_from_the_actor(cluster: object, tmp_path: Path) -> None:
    from runfold.core.errors import ErrorCode, RunfoldError

    ws = Workspace.init(tmp_path / "ws")
    with ws.writer(resume=False):
        runner = BatchRunner([ws.root], concurrency=1)
        try:
            with pytest.raises(RunfoldError) as held:
                runner.claim()
        finally:
            runner.stop()
    assert held.value.code is ErrorCode.LEDGER_HELD and str(os.getpid()) in str(held.value)


def test_ctrl_c_stops_a_batch_as_cancelled_with_every_run_frozen(tmp_path: Path) -> None:
    import subprocess

    root = Workspace.init(tmp_path / "ws").root
    tasks = tasks_file(tmp_path, 4, script(tmp_path, delay_ms=1500, turns=20))
    env = {k: v for k, v in os.environ.items() if k != "RUNFOLD_WORKSPACE"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "batch", str(tasks), "--ray", "local", "-w", str(root)],
        cwd=tmp_path, env={**env, "NO_COLOR": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not started_counts(root):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    assert started_counts(root), "no run started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 6, out + err
    assert "batch interrupted after 0 of 4 tasks" in err and "Traceback" not in err
    with Workspace.open(root) as ws:
        frozen = {r.env.run for r in ws.records(kind=Kind.RUN_FROZEN.value)}
        assert set(started_counts(root)) <= frozen  # nothing left running
        assert ws.verify().lines > 0


def test_an_address_where_no_ray_head_answers_is_an_error_within_the_timeout(tmp_path: Path) -> None:
    """A port that accepts connections but is not a Ray head (another service): Ray retries
    for ten minutes and more; the connect gives up after its timeout and nothing is run."""
    import socket
    import subprocess

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        code = (
            "from runfold.server.batch import connect\n"
            "from runfold.core.errors import RunfoldError\n"
            "try:\n"
            f"    connect('127.0.0.1:{port}', workers=1, timeout_s=10)\n"
            "except RunfoldError as err:\n"
            "    print(err.display())\n"
            "    raise SystemExit(2)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout.startswith(f"E_INVALID_ARGS: cannot reach the Ray cluster (no Ray head answered there within 10 s) on --ray 127.0.0.1:{port}")


def test_the_shards_of_a_postgresql_workspace_keep_their_ledgers_in_the_database(
    cluster: object, tmp_path: Path, pg_url: str
) -> None:
    from runfold.store.backend import parse_store_url, store_setting

    root = Workspace.init(tmp_path / "ws", pg_url).root
    name = parse_store_url(pg_url).name
    roots = shard_roots(root, 2)
    for k, shard in enumerate(roots):
        url = store_setting(shard)
        assert url is not None and url.name == f"{name}/shards/{k}"
        assert not list((shard / ".runfold" / "ledger").glob("ledger-*"))  # no file ledger beside it
    runner = BatchRunner(roots, concurrency=4)
    runner.claim()
    report = runner.run(read_tasks(tasks_file(tmp_path, 4, script(tmp_path))))
    runner.stop()
    check = audit(report)
    assert check["frozen"] == check["runs"] == 4 and check["started_twice"] == [] and check["missing"] == []
    held = {}
    for shard in roots:
        with Workspace.open(shard) as ws:
            assert ws.verify().path.startswith("postgresql://")
            held.update(started_counts(shard))
    assert sorted(held) == sorted(r.run for r in report.results) and set(held.values()) == {1}
    assert shard_roots(root, 2) == roots  # a second batch joins the same shards
