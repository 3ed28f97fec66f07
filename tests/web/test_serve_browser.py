"""The page served by `runfold serve` in a real browser (Playwright driving Debian's Chromium):
its actions go through the serving owner. A steer from the page lands in a live run; a call
waiting for approval is approved, the next one denied with a reason the model reads; a fork and a
continue from the page are runs the CLI lists. Every check of the ledger is the CLI's, in a real
process. The token, Host and same-origin checks hold for the pages under serve too."""

from __future__ import annotations

import json
import os
import re
import select
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from web_support import garden, runfold

from server.srv_support import Server, start_server, write_script

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and flock")

def use(cid: str, name: str, args: dict[str, Any], delay_ms: int = 0) -> dict[str, Any]:
    return {
        "content": [{"kind": "text", "text": f"calling {name}"}, {"kind": "tool_use", "id": cid, "name": name, "input": json.dumps(args)}],
        **({"delay_ms": delay_ms} if delay_ms else {}),
    }


def say(text: str) -> dict[str, Any]:
    return {"content": [{"kind": "text", "text": text}], "stop": "end_turn"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A workspace with one finished scripted run whose writes ask for approval, served by a
    real `runfold serve` process; yields the server and the finished run."""
    root = tmp_path_factory.mktemp("serve-web") / "ws"
    run = garden(root)
    config = root / ".runfold" / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + '\n[approvals]\nwrite = "ask"\n', encoding="utf-8")
    server = start_server(root)
    try:
        yield server, run
    finally:
        server.stop()


def _page(browser: Any) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(60_000)
    return page


def _dispatch(server: Server, task: str, script: Path) -> str:
    with server.client() as c:
        got = c.post("/runs", json={"task": task, "model": f"script:{script}"})
    assert got.status_code == 202, got.text
    return str(got.json()["run"])


def _log(root: Path, run: str, *kinds: str) -> list[dict[str, Any]]:
    """The run's lines of `kinds` as `runfold log --json` prints them (a real process)."""
    args = ["log", "--run", run, "--json", *[a for k in kinds for a in ("--kind", k)]]
    done = runfold(root, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _wait_log(root: Path, run: str, kind: str, count: int = 1, timeout: float = 120) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        found = _log(root, run, kind)
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"run {run} never wrote {count} {kind} line(s)"
        time.sleep(0.2)


def _save(page: Any, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / name), full_page=True)


def test_a_steer_from_the_page_lands_in_a_live_run_under_serve(
    browser: Any, served: tuple[Server, str], tmp_path: Path, shots: Path
) -> None:
    server, _ = served
    root = server.root
    script = write_script(tmp_path / "slow.jsonl", [use("c1", "list_dir", {}, delay_ms=20_000), say("done")])
    run = _dispatch(server, "look around", script)
    _wait_log(root, run, "model_called")
    page = _page(browser)
    page.goto(f"{server.url}/runs/{run}")
    assert page.inner_text("#run-status") == "running"
    page.fill("#steer-form input[name=text]", "use the <staging> db")
    page.click("#steer-form button")
    page.wait_for_selector("#action-result")
    result = page.inner_text("#action-result")
    assert re.match(r"steer (accepted|recorded) by the server's run ", result), result
    page.goto(f"{server.url}/runs/{run}")  # the run's last page follows it live
    page.wait_for_selector("#timeline tr.k-steer_received", timeout=120_000)
    page.wait_for_selector("#timeline tr.k-run_frozen", timeout=120_000)
    _save(page, shots, "serve-steer.png")
    page.close()
    steers = _log(root, run, "steer_received")
    assert [(s["data"]["source"], s["data"]["text"]) for s in steers] == [("user", "use the <staging> db")]
    assert _log(root, run, "run_frozen")[0]["data"]["completion"] == "done"


def test_approve_then_deny_from_the_page_under_serve(
    browser: Any, served: tuple[Server, str], tmp_path: Path, shots: Path
) -> None:
    server, _ = served
    root = server.root
    script = write_script(
        tmp_path / "writes.jsonl",
        [
            use("call_ok", "write_file", {"path": "plan.md", "content": "step 1\n"}),
            use("call_no", "write_file", {"path": "secrets.md", "content": "nope\n"}),
            say("Wrote the plan."),
        ],
    )
    run = _dispatch(server, "write the plan", script)
    _wait_log(root, run, "approval_requested")
    page = _page(browser)
    page.goto(f"{server.url}/runs/{run}")
    waiting = page.locator("#waiting .waiting-call")
    assert waiting.count() == 1 and waiting.get_attribute("data-call") == "call_ok"
    assert "+step 1" in page.inner_text("#waiting pre.preview")
    assert not (root / "plan.md").exists()  # it waits: nothing acted
    _save(page, shots, "approval.png")
    page.click("#waiting button.approve")
    page.wait_for_selector("#action-result")
    assert page.inner_text("#action-result").startswith("approval of call call_ok "), page.inner_text("#action-result")

    _wait_log(root, run, "approval_requested", 2)
    page.goto(f"{server.url}/runs/{run}")
    assert page.locator("#waiting .waiting-call").get_attribute("data-call") == "call_no"
    page.fill("#waiting input[name=reason]", "not <that> file")
    page.click("#waiting button.deny")
    page.wait_for_selector("#action-result")
    assert page.inner_text("#action-result").startswith("denial of call call_no "), page.inner_text("#action-result")
    _wait_log(root, run, "run_frozen")
    page.goto(f"{server.url}/runs/{run}")
    assert page.locator("#waiting").count() == 0  # nothing waits any more
    page.close()

    resolved = [line["data"] for line in _log(root, run, "approval_resolved")]
    assert [(r["tool_use_id"], r["decision"], r["by"], r["via"]) for r in resolved] == [
        ("call_ok", "approved", "person", "inbox"),
        ("call_no", "denied", "person", "inbox"),
    ]
    assert resolved[1]["reason"] == "not <that> file"
    assert (root / "plan.md").read_text() == "step 1\n" and not (root / "secrets.md").exists()
    denied = [r["data"] for r in _log(root, run, "tool_result") if r["data"].get("tool_use_id") == "call_no"]
    assert len(denied) == 1 and "not <that> file" in json.dumps(denied[0])  # the model reads the reason
    assert runfold(root, "verify").returncode == 0


def test_a_fork_and_a_continue_from_the_page_under_serve_are_runs_the_cli_lists(
    browser: Any, served: tuple[Server, str], tmp_path: Path, shots: Path
) -> None:
    server, run = served
    root = server.root
    at = next(line["seq"] for line in _log(root, run, "tool_result"))
    page = _page(browser)
    page.goto(f"{server.url}/runs/{run}")
    page.fill("#fork-form input[name=at]", str(at))
    page.fill("#fork-form input[name=task]", "try the <b>other</b> list")
    page.click("#fork-form button")
    page.wait_for_selector("#action-result")
    text = page.inner_text("#action-result")
    assert text.startswith("forked "), text
    fork = text.split()[1]
    _save(page, shots, "serve-fork.png")

    script = write_script(tmp_path / "more.jsonl", [say("The list is done.")])
    page.goto(f"{server.url}/runs/{run}")
    page.fill("#continue-form input[name=model]", f"script:{script}")
    page.click("#continue-form button")
    page.wait_for_selector("#action-result")
    text = page.inner_text("#action-result")
    assert text.startswith(f"continuing {run} as run "), text
    successor = text.split()[4]
    page.close()

    deadline = time.monotonic() + 120
    while True:
        listed = {r["run"]: r for r in json.loads(runfold(root, "runs", "--json").stdout)}
        if listed.get(successor, {}).get("status") == "done" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (listed[fork]["relation"], listed[fork]["forked_from"], listed[fork]["status"]) == ("fork", run, "not_started")
    assert (listed[successor]["relation"], listed[successor]["status"]) == ("successor", "done")


def test_a_cancel_from_the_page_under_serve_freezes_the_live_run_as_cancelled(
    browser: Any, served: tuple[Server, str], tmp_path: Path, shots: Path
) -> None:
    server, _ = served
    root = server.root
    script = write_script(tmp_path / "long.jsonl", [{**say("at last"), "delay_ms": 60_000}])
    run = _dispatch(server, "think for a long time", script)
    _wait_log(root, run, "model_called")
    page = _page(browser)
    page.goto(f"{server.url}/runs/{run}")
    assert page.inner_text("#run-status") == "running"
    page.click("#cancel-form button")
    page.wait_for_selector("#action-result")
    result = page.inner_text("#action-result")
    assert re.match(r"cancel (accepted|recorded) by the server's run ", result), result
    frozen = _wait_log(root, run, "run_frozen")  # long before the 60 s reply
    page.goto(f"{server.url}/runs/{run}")
    assert page.inner_text("#run-status").startswith("cancelled")
    _save(page, shots, "serve-cancel.png")
    page.close()
    assert frozen[0]["data"]["completion"] == "cancelled"
    assert not _log(root, run, "model_returned")


def test_the_pages_under_serve_keep_their_checks(served: tuple[Server, str]) -> None:
    server, run = served
    before = runfold(server.root, "runs", "--json").stdout
    forged = httpx.post(f"{server.url}/runs/{run}/fork", data={"at": "5", "csrf": "forged"}, timeout=30)
    assert forged.status_code == 403
    other = httpx.get(f"{server.url}/", headers={"Host": "rebound.example"}, timeout=30)
    assert other.status_code == 421
    assert runfold(server.root, "runs", "--json").stdout == before
    api_miss = httpx.get(f"{server.url}/api/no-such-route", timeout=30)
    assert api_miss.status_code == 404 and api_miss.json()["error"]["code"] == "E_PATH_NOT_FOUND"


def test_with_a_token_the_pages_ask_for_it_under_serve(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    garden(root)
    server = start_server(root, token=True)
    try:
        assert server.token is not None and server.proc.stderr is not None
        said = ""
        deadline = time.monotonic() + 60
        while "web page:" not in said:  # serve prints the page's URL (and login link) at start
            fd = server.proc.stderr.fileno()
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            assert ready, f"serve never named its web page: {said!r}"
            chunk = os.read(fd, 65536).decode()
            assert chunk, said
            said += chunk
        code = re.search(r"/login\?code=([\w-]+)", said)
        assert code, said
        assert httpx.get(f"{server.url}/", timeout=30).status_code == 401
        ok = httpx.get(f"{server.url}/", headers={"Authorization": f"Bearer {server.token}"}, timeout=30)
        assert ok.status_code == 200 and "runs" in ok.text
        with httpx.Client(base_url=server.url, timeout=30) as browser_like:
            login = browser_like.get(f"/login?code={code.group(1)}")
            assert login.status_code == 303
            assert browser_like.get("/").status_code == 200  # the cookie the link set
        assert httpx.get(f"{server.url}/login?code={code.group(1)}", timeout=30).status_code == 403  # spent
        assert httpx.get(f"{server.url}/api/runs", timeout=30).status_code == 401  # the API asks as before
    finally:
        err = server.stop()
    assert server.token not in said + err


def test_the_api_docs_render_offline_from_the_server_alone(browser: Any, served: tuple[Server, str]) -> None:
    """`/api/docs` draws every route with Swagger UI served by runfold itself: every request to
    another host is refused, and the page still lists the API's operations."""
    server, _run = served
    page = _page(browser)
    elsewhere: list[str] = []

    def only_the_server(route: Any) -> None:
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    page.goto(f"{server.url}/api/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=60_000)
    paths = set(page.locator(".opblock-summary-path").all_inner_texts())
    assert {"/api/runs", "/api/runs/{run}/events", "/api/verify"} <= {p.replace("\u200b", "") for p in paths}
    assert elsewhere == []
    page.close()
