"""The page in a real browser (Playwright driving Debian's Chromium) against `runfold view` in a
real process: the overview, a run, the request bytes at a seq, the window chart against
`runfold why --json`, a fork the CLI then lists, a steer that lands in a live `runfold run`, and
a hostile tool result that renders as text. Each page is saved as a screenshot."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import blake3
import pytest
from web_support import HOSTILE, env, garden, kinds_at, runfold, view_server, why_json

from runfold.api import Workspace

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and flock")


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("web") / "ws"
    return root, garden(root)


@pytest.fixture(scope="module")
def url(ws: tuple[Path, str]) -> Any:
    with view_server(ws[0]) as u:
        yield u


def _page(browser: Any) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(60_000)
    return page


def test_overview_then_a_run_then_a_seq_shows_that_requests_bytes(
    browser: Any, ws: tuple[Path, str], url: str, shots: Path
) -> None:
    root, run = ws
    page = _page(browser)
    errors: list[str] = []  # the console stays clean: no failed load (an icon), no script error
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/")
    row = page.locator(f"#runs tr[data-run='{run}']")
    assert row.count() == 1
    assert "done" in row.inner_text()
    page.screenshot(path=str(shots / "overview.png"), full_page=True)
    page.goto(url + "/verify")
    assert "ledger verified" in page.inner_text("#verify")
    page.screenshot(path=str(shots / "verify.png"), full_page=True)
    page.goto(url + "/")

    row.locator("a.run-link").click()
    page.wait_for_selector("#timeline")
    assert page.inner_text("#run-id") == run
    page.screenshot(path=str(shots / "run.png"), full_page=True)

    called = kinds_at(root, run, "model_called")
    seq = called[1]
    page.locator(f"#timeline tr[data-seq='{seq}'] a.request-at").click()
    page.wait_for_selector("#request-body")
    assert page.inner_text("#request-seq") == str(seq)
    shown = page.inner_text("#request-body").encode("utf-8")
    with Workspace.open(root) as w:
        recorded = w.record_at(seq).env.data["request"]
    assert len(shown) == recorded["bytes"]
    assert blake3.blake3(shown).hexdigest() == recorded["hash"]
    assert page.get_attribute("#replay-check", "data-exact") == "yes"
    assert page.locator("#verdicts tr[data-dialect]").count() >= 3
    page.screenshot(path=str(shots / "request.png"), full_page=True)

    page.click("#next-request")  # step to the next model call
    page.wait_for_selector(f"#request-seq:text('{called[2]}')")
    page.click("#diff-prev")
    page.wait_for_selector("#diff")
    assert "bytes are identical" in page.inner_text("#diff-facts")
    assert page.locator("#diff span.add").count() > 0
    page.screenshot(path=str(shots / "request-diff.png"), full_page=True)
    assert errors == [], errors
    missing = page.goto(f"{url}/runs/{run[:8]}ffff")  # last: the console names this page's own 404
    assert missing is not None and missing.status == 404
    assert page.locator(f"#nearby a[href$='{run}']").count() == 1  # the nearest run, linked
    page.screenshot(path=str(shots / "not-found.png"), full_page=True)
    page.close()


def test_the_window_chart_matches_why_json_at_that_seq(
    browser: Any, ws: tuple[Path, str], url: str, shots: Path
) -> None:
    root, run = ws
    at = kinds_at(root, run, "tool_result")[-1]
    page = _page(browser)
    page.goto(f"{url}/runs/{run}")
    page.locator(f"#timeline tr[data-seq='{at}'] a.window-at").click()
    page.wait_for_selector("#by-region")
    want = why_json(root, run, at)
    assert page.inner_text("#window-cut") == str(want["cut"])
    assert int(page.get_attribute("#window-total", "data-bytes") or -1) == want["total"]["bytes"]

    def chart(selector: str) -> dict[str, int]:
        parts = page.locator(f"{selector} rect.part")
        return {
            parts.nth(i).get_attribute("data-key"): int(parts.nth(i).get_attribute("data-bytes"))
            for i in range(parts.count())
        }

    assert chart("#by-region") == {r: v["bytes"] for r, v in want["regions"].items()}
    assert chart("#by-cause") == {c: v["bytes"] for c, v in want["causes"].items()}
    changes = page.locator("#changes tr[data-seq]")
    assert [int(changes.nth(i).get_attribute("data-seq")) for i in range(changes.count())] == [
        c["seq"] for c in want["changes"]
    ]
    page.screenshot(path=str(shots / "window.png"), full_page=True)
    page.close()


def test_a_hostile_tool_result_renders_as_text(browser: Any, ws: tuple[Path, str], url: str, shots: Path) -> None:
    root, run = ws
    result = kinds_at(root, run, "tool_result")[-1]
    page = _page(browser)
    for path in (f"/runs/{run}/lines/{result}", f"/runs/{run}?q=script", f"/runs/{run}/request"):
        page.goto(url + path)
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("main script, main img[src=x]").count() == 0
    page.goto(f"{url}/runs/{run}/lines/{result}")
    assert HOSTILE in json.loads(page.inner_text("#line-raw"))["data"]["result"]["content"]
    page.screenshot(path=str(shots / "hostile-line.png"), full_page=True)
    page.close()


def test_a_fork_from_the_page_is_a_run_the_cli_lists(browser: Any, ws: tuple[Path, str], url: str, shots: Path) -> None:
    root, run = ws
    at = kinds_at(root, run, "tool_result")[0]
    page = _page(browser)
    page.goto(f"{url}/runs/{run}")
    page.fill("#fork-form input[name=at]", str(at))
    page.fill("#fork-form input[name=task]", "try the <b>other</b> list")
    page.click("#fork-form button")
    page.wait_for_selector("#action-result")
    text = page.inner_text("#action-result")
    assert text.startswith("forked "), text
    new = text.split()[1]
    listed = json.loads(runfold(root, "runs", "--json").stdout)
    mine = next(r for r in listed if r["run"] == new)
    assert (mine["relation"], mine["forked_from"], mine["status"]) == ("fork", run, "not_started")
    page.screenshot(path=str(shots / "fork.png"), full_page=True)
    page.click("#next-run")
    page.wait_for_selector("#tree")
    assert "fork of" in page.inner_text("#tree")
    page.goto(f"{url}/diff?a={run}&b={new}")
    assert "share their first" in page.inner_text("#common")
    page.screenshot(path=str(shots / "runs-diff.png"), full_page=True)
    page.close()


def test_an_action_without_the_pages_token_is_refused(ws: tuple[Path, str], url: str) -> None:
    import httpx

    root, run = ws
    before = len(Workspace.open(root).runs())
    got = httpx.post(f"{url}/runs/{run}/fork", data={"at": "5", "csrf": "forged"}, timeout=30)
    assert got.status_code == 403
    assert len(Workspace.open(root).runs()) == before


def _slow_script(path: Path) -> Path:
    replies = [
        {
            "content": [
                {"kind": "text", "text": "looking"},
                {"kind": "tool_use", "id": "c1", "name": "list_dir", "input": "{}"},
            ],
            "stop": "tool_use",
            "delay_ms": 30_000,
        },
        {"content": [{"kind": "text", "text": "done"}], "stop": "end_turn"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in replies), encoding="utf-8")
    return path


def test_a_steer_from_the_page_lands_in_a_live_run(
    browser: Any, tmp_path: Path, shots: Path
) -> None:
    root = tmp_path / "live"
    Workspace.init(root)
    script = _slow_script(tmp_path / "slow.jsonl")
    with view_server(root) as url:  # up first: the run's slow reply leaves time to steer
        proc = subprocess.Popen(
            [sys.executable, "-m", "runfold", "run", "look around", "--model", f"script:{script}", "-w", str(root)],
            cwd=root,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 90
            while not (Workspace.open(root).runs() and kinds_at(root, Workspace.open(root).latest_run(), "model_called")):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the run never called its model"
                time.sleep(0.1)
            run = Workspace.open(root).latest_run()
            page = _page(browser)
            page.goto(f"{url}/runs/{run}")
            assert page.inner_text("#run-status") == "running"
            page.fill("#steer-form input[name=text]", "use the <staging> db")
            page.click("#steer-form button")
            page.wait_for_selector("#action-result")
            assert "accepted" in page.inner_text("#action-result"), page.inner_text("#action-result")
            page.goto(f"{url}/runs/{run}")  # the last page follows the run live (SSE)
            page.wait_for_selector("#timeline tr.k-steer_received", timeout=120_000)
            page.wait_for_selector("#timeline tr.k-run_frozen", timeout=120_000)
            seqs = [int(s) for s in page.eval_on_selector_all("#timeline tr[data-seq]", "rs => rs.map(r => r.dataset.seq)")]
            assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
            page.screenshot(path=str(shots / "live.png"), full_page=True)
            page.close()
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, out + err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    with Workspace.open(root) as w:
        steers = [r.env.data for r in w.records(run=run, kind="steer_received")]
        assert seqs == [r.seq for r in w.records(run=run)]
    assert [(d["source"], d["text"]) for d in steers] == [("user", "use the <staging> db")]
