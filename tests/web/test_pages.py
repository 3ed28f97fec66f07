"""The pages in-process (FastAPI's test client over `create_app`): friendly 404s naming the
run's range or the nearest runs, a damaged ledger browsable up to its bad line, the access
token and the one-time login, the actions' same-origin token, escaping, and that reading pages
write nothing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from web_support import garden, kinds_at

from runfold.api import Workspace
from runfold.core.chain import LineRefused
from runfold.web import create_app
from runfold.web.security import COOKIE, Guard, access_token, is_loopback


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("pages") / "ws"
    return root, garden(root)


def _client(root: Path, guard: Guard | None = None) -> TestClient:
    return TestClient(create_app(root, guard=guard), base_url="http://127.0.0.1:8765")


def _files(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in sorted((root / ".runfold").rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def _pages(run: str, root: Path) -> list[str]:
    called = kinds_at(root, run, "model_called")
    return [
        "/",
        "/verify",
        f"/runs/{run}",
        f"/runs/{run}?kind=tool_result&kind=model_called",
        f"/runs/{run}?q=tomatoes",
        f"/runs/{run}?seq=5",
        f"/runs/{run}/usage.svg",
        f"/runs/{run}/lines/5",
        f"/runs/{run}/request?at={called[-1]}",
        f"/runs/{run}/request.json?at={called[0]}",
        f"/runs/{run}/window?at=12",
        f"/runs/{run}/diff?a={called[0]}&b={called[1]}",
        f"/diff?a={run}&b={run}",
    ]


def test_every_reading_page_answers_and_writes_nothing(ws: tuple[Path, str]) -> None:
    root, run = ws
    client = _client(root)
    before = _files(root)
    for url in _pages(run, root):
        got = client.get(url)
        assert got.status_code == 200, (url, got.text[:500])
        if url.endswith(".svg"):
            assert got.text.startswith("<svg")
        elif ".json" not in url:
            assert "Content-Security-Policy" in got.headers and "Traceback" not in got.text
    assert _files(root) == before


def test_a_run_or_seq_that_does_not_exist_is_a_friendly_404(ws: tuple[Path, str]) -> None:
    root, run = ws
    client = _client(root)
    got = client.get(f"/runs/{run[:6]}zz")
    assert got.status_code == 404
    assert f'href="/runs/{run}"' in got.text  # the nearest run, linked
    got = client.get(f"/runs/{run}?seq=999")
    assert got.status_code == 404
    last = Workspace.open(root).records(run=run)[-1].seq
    assert f"this run holds lines at seq 1..{last}" in got.text
    got = client.get(f"/runs/{run}/request?at=999")
    assert got.status_code == 404 and f"seq 1..{last}" in got.text
    got = client.get(f"/runs/{run}/lines/0")
    assert got.status_code == 404 and "belongs to run" in got.text
    got = client.get(f"/runs/{run}/request.json?at=5")
    assert got.status_code == 404 and "its model calls are at seq" in got.text
    for got in (client.get(f"/runs/{run}/window?at=999"), client.get("/diff?a=nope&b=" + run)):
        assert got.status_code == 404 and "Traceback" not in got.text


def test_the_timeline_pages_and_filters(ws: tuple[Path, str]) -> None:
    root, run = ws
    import runfold.web.pages as pages

    client = _client(root)
    old = pages.LINES_PER_PAGE
    pages.LINES_PER_PAGE = 5
    try:
        first = client.get(f"/runs/{run}").text
        seqs = [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', first)]
        assert seqs == [1, 2, 3, 4, 5]
        assert f"/runs/{run}?after=5" in first
        second = client.get(f"/runs/{run}?after=5").text
        assert [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', second)] == [6, 7, 8, 9, 10]
    finally:
        pages.LINES_PER_PAGE = old
    only = client.get(f"/runs/{run}?kind=model_called").text
    assert [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', only)] == kinds_at(root, run, "model_called")
    found = client.get(f"/runs/{run}?q=TOMATOES").text  # case-insensitive, in the line's bytes
    hits = [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', found)]
    with Workspace.open(root) as w:
        assert hits == [r.seq for r in w.records(run=run) if b"tomatoes" in r.raw.lower()]


def test_ledger_text_is_escaped(ws: tuple[Path, str]) -> None:
    root, run = ws
    result = kinds_at(root, run, "tool_result")[-1]
    page = _client(root).get(f"/runs/{run}/lines/{result}").text
    assert "<script>window.__pwned" not in page and "<img src=x" not in page
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=" in page


def test_a_damaged_ledger_is_browsable_up_to_the_bad_line(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    run = garden(root)
    segment = next((root / ".runfold" / "ledger").glob("ledger-*.jsonl"))
    lines = segment.read_bytes().split(b"\n")
    lines[9] = lines[9].replace(b'"who":"agent"', b'"who":"agenT"')  # seq 9: same length, chain broken after
    segment.write_bytes(b"\n".join(lines))
    with pytest.raises(LineRefused) as refused:
        Workspace.open(root).verify()
    bad = refused.value
    client = _client(root)
    got = client.get("/")
    assert got.status_code == 200, got.text[:2000]
    assert f'data-line="{bad.line_no}" data-seq="{bad.seq}"' in got.text
    assert bad.display().replace("'", "&#39;") in got.text
    assert f'data-run="{run}"' in got.text  # the run, read from the lines before the bad one
    page = client.get(f"/runs/{run}")
    assert page.status_code == 200
    shown = [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', page.text)]
    assert shown == list(range(1, bad.seq))
    assert f"the timeline stops at line {bad.line_no}" in page.text
    verify = client.get("/verify")
    assert verify.status_code == 200 and f"at line {bad.line_no} (seq {bad.seq})" in verify.text


def test_off_loopback_every_request_needs_the_token(ws: tuple[Path, str], tmp_path: Path) -> None:
    root, _run = ws
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    token = access_token(root)
    path = root / ".runfold" / "view-token"
    assert oct(path.stat().st_mode & 0o777) == "0o600" and access_token(root) == token
    client = _client(root, Guard(token=token, login_code="once"))
    assert client.get("/").status_code == 401
    assert client.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    login = client.get("/login?code=once", follow_redirects=False)
    assert login.status_code == 303 and COOKIE in login.headers["set-cookie"]
    assert "httponly" in login.headers["set-cookie"].lower()
    assert client.get("/").status_code == 200  # the cookie
    fresh = _client(root, Guard(token=token, login_code=None))
    assert fresh.get("/login?code=once", follow_redirects=False).status_code == 403


def test_actions_need_the_pages_token_and_the_same_origin(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    run = garden(root)
    guard = Guard()
    client = _client(root, guard)
    count = len(Workspace.open(root).runs())
    assert client.post(f"/runs/{run}/fork", data={"at": "7"}).status_code == 403
    assert client.post(f"/runs/{run}/fork", data={"at": "7", "csrf": "x"}).status_code == 403
    evil = client.post(
        f"/runs/{run}/fork", data={"at": "7", "csrf": guard.csrf}, headers={"Origin": "http://evil.example"}
    )
    assert evil.status_code == 403
    assert len(Workspace.open(root).runs()) == count
    ok = client.post(
        f"/runs/{run}/fork", data={"at": "7", "csrf": guard.csrf}, headers={"Origin": "http://127.0.0.1:8765"}
    )
    assert ok.status_code == 200 and "forked " in ok.text
    assert len(Workspace.open(root).runs()) == count + 1


def test_a_fork_while_another_process_holds_the_ledger_names_runfold_serve(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = tmp_path / "ws"
    run = garden(root)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from runfold.api import Workspace\n"
            f"with Workspace.open({str(root)!r}).writer():\n    print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        guard = Guard()
        got = _client(root, guard).post(f"/runs/{run}/fork", data={"at": "7", "csrf": guard.csrf})
        assert got.status_code == 409
        assert "E_LEDGER_HELD" in got.text and "runfold serve" in got.text and str(holder.pid) in got.text
        steer = _client(root, guard).post(f"/runs/{run}/steer", data={"text": "hi", "csrf": guard.csrf})
        assert steer.status_code in (400, 409) and "E_" in steer.text
    finally:
        holder.kill()
        holder.wait()


def test_continue_from_the_page_runs_a_successor_the_cli_lists(tmp_path: Path) -> None:
    from web_support import REPO, runfold

    root = tmp_path / "ws"
    run = garden(root)
    guard = Guard()
    client = _client(root, guard)
    got = client.post(
        f"/runs/{run}/continue",
        data={"model": f"script:{REPO / 'examples' / 'garden-continue.jsonl'}", "csrf": guard.csrf},
    )
    assert got.status_code == 200, got.text
    assert "continuing" in got.text  # `runfold continue` runs as its own process: watch the ledger
    listed: list[dict[str, object]] = []
    import json
    import time

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        listed = json.loads(runfold(root, "runs", "--json").stdout)
        if len(listed) == 2 and listed[1]["status"] != "running":
            break
        time.sleep(0.5)
    assert [(r["relation"], r["predecessor"]) for r in listed[1:]] == [("successor", run)], listed
    assert listed[1]["status"] == "done"


def test_a_loopback_server_answers_only_to_its_own_host_names(ws: tuple[Path, str]) -> None:
    root, _run = ws
    guard = Guard(hosts=frozenset({"127.0.0.1", "localhost", "::1"}))
    assert _client(root, guard).get("/").status_code == 200
    for name in ("localhost:8765", "[::1]:8765"):
        assert _client(root, guard).get("/", headers={"Host": name}).status_code == 200
    rebound = _client(root, guard).get("/", headers={"Host": "attacker.example:8765"})
    assert rebound.status_code == 421 and "Host" in rebound.text


def test_the_printed_url_answers_at_once(tmp_path: Path) -> None:
    """`runfold view` prints its URL only once the socket listens: a client that connects the
    moment it reads the URL is answered, never refused (found by a first-time user with curl)."""
    import re
    import subprocess
    import sys

    import httpx
    from web_support import env

    root = tmp_path / "ws"
    Workspace.init(root).close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "view", "-w", str(root), "--port", "0"],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        found = re.search(r"(http://\S+/)", proc.stdout.readline())
        assert found
        assert httpx.get(found.group(1) + "static/app.css", timeout=60).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_under_view_alone_a_waiting_call_is_approved_from_the_page_through_the_inbox(tmp_path: Path) -> None:
    """`runfold view` without a server: the run page lists the call a `runfold run` process
    waits on, and its approve button reaches that process through the control inbox."""
    import json
    import subprocess
    import sys
    import time

    from web_support import env, runfold

    root = tmp_path / "ws"
    Workspace.init(root)
    script = tmp_path / "write.jsonl"
    replies = [
        {"content": [{"kind": "tool_use", "id": "call_w", "name": "write_file", "input": json.dumps({"path": "plan.md", "content": "step 1\n"})}]},
        {"content": [{"kind": "text", "text": "Wrote it."}], "stop": "end_turn"},
    ]
    script.write_text("".join(json.dumps(r) + "\n" for r in replies), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "runfold", "run", "write the plan", "--model", f"script:{script}", "--approve", "write=ask", "-w", str(root)],
        cwd=root, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (Workspace.open(root).runs() and kinds_at(root, Workspace.open(root).latest_run(), "approval_requested")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never asked for approval"
            time.sleep(0.1)
        run = Workspace.open(root).latest_run()
        guard = Guard()
        client = _client(root, guard)
        page = client.get(f"/runs/{run}").text
        assert 'data-call="call_w"' in page and "+step 1" in page
        bad = client.post(f"/runs/{run}/decide", data={"call": "call_w", "decision": "maybe", "csrf": guard.csrf})
        assert bad.status_code == 400 and not (root / "plan.md").exists()
        forged = client.post(f"/runs/{run}/decide", data={"call": "call_w", "decision": "approve", "csrf": "x"})
        assert forged.status_code == 403
        got = client.post(f"/runs/{run}/decide", data={"call": "call_w", "decision": "approve", "csrf": guard.csrf})
        assert got.status_code == 200 and "approval of call call_w" in got.text, got.text
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (root / "plan.md").read_text() == "step 1\n"
    resolved = [json.loads(line)["data"] for line in runfold(root, "log", "--kind", "approval_resolved", "--json").stdout.splitlines()]
    assert [(r["tool_use_id"], r["decision"], r["via"]) for r in resolved] == [("call_w", "approved", "inbox")]
    assert 'data-call="call_w"' not in _client(root).get(f"/runs/{run}").text


def test_the_first_overview_of_a_large_ledger_reads_the_index_not_every_line(
    ws: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger the summary fold has not read (here: any ledger, the warm gap set to 0, the
    background fold held back) shows its runs at once from the index and their first lines,
    and says that status, turns, tokens and cost are being folded; no whole-ledger fold runs."""
    import shutil

    from runfold.web import viewer as viewer_mod

    root = tmp_path / "copy"
    shutil.copytree(ws[0], root)
    run = ws[1]
    with Workspace.open(root) as w:
        w.fork(run, 7, task="the other list")
        runs = w.runs()
    monkeypatch.setattr(viewer_mod, "WARM_GAP", 0)
    monkeypatch.setattr(viewer_mod.Viewer, "_warm", lambda self: None)
    folds: list[int] = []
    real = Workspace.run_summaries
    monkeypatch.setattr(Workspace, "run_summaries", lambda self, into=None: folds.append(1) or real(self, into))
    client = _client(root)
    got = client.get("/")
    assert got.status_code == 200 and folds == []
    assert "being folded" in got.text
    assert re.findall(r'<tr data-run="([^"]+)"', got.text) == runs
    assert "What is on the to-do list?" in got.text and "fork of" in got.text
    only_forks = client.get("/?relation=fork").text
    assert re.findall(r'<tr data-run="([^"]+)"', only_forks) == runs[1:]
    monkeypatch.setattr(viewer_mod, "WARM_GAP", 10**9)  # folded now: the full overview
    full = client.get("/").text
    assert folds and "being folded" not in full and 'data-status="done"' in full


def test_requests_no_page_takes_get_the_error_page_not_the_frameworks_json(ws: tuple[Path, str]) -> None:
    """A typed URL with a word for a seq, an address no page has, a GET of an action and an
    oversized form field each get the error page in the E_CODE shape, naming what to do."""
    root, run = ws
    guard = Guard()
    client = _client(root, guard)
    cases = [
        (client.get(f"/runs/{run}?seq=abc"), 400, "E_INVALID_ARGS: cannot read the request&#39;s parameters (seq &#39;abc&#39;"),
        (client.get(f"/runs/{run}/lines/twelve"), 400, "seq &#39;twelve&#39;: Input should be a valid integer"),
        (client.get(f"/runs/{run}/diff"), 400, "a: Field required; b: Field required"),
        (client.get("/?page=-1"), 400, "page &#39;-1&#39;: Input should be greater than or equal to 0"),
        (client.get("/no/such/page"), 404, "E_PATH_NOT_FOUND: cannot show this address on /no/such/page"),
        (client.get(f"/runs/{run}/fork"), 405, "E_INVALID_ARGS: cannot GET this address"),
        (client.post(f"/runs/{run}/fork", data={"at": "ten", "csrf": guard.csrf}), 400, "at &#39;ten&#39;"),
        (client.post(f"/runs/{run}/steer", data={"text": "x" * 1_100_000, "csrf": guard.csrf}), 400, "maximum size"),
    ]
    for got, status, said in cases:
        assert got.status_code == status, (got.request.url, got.text[:300])
        assert got.headers["content-type"].startswith("text/html"), got.text[:300]
        assert 'id="error-message"' in got.text and said in got.text, got.text[:3000]
    assert len(Workspace.open(root).runs()) == 1
    first = client.get(f"/runs/{run}?after=-999")  # an edited URL before the first line: the first page
    assert first.status_code == 200 and re.findall(r'<tr data-seq="(\d+)"', first.text)[:2] == ["1", "2"]


def test_a_ledger_whose_reader_meets_the_damage_on_open_is_browsable_up_to_the_bad_line(tmp_path: Path) -> None:
    """A line that is no ledger line, inserted mid-ledger: the reader's own open refuses the
    ledger (the index no longer matches it), yet the run page, a line before the bad one and
    the usage chart are read from the lines before it; a line past it names the damage."""
    root = tmp_path / "ws"
    run = garden(root)
    segment = next((root / ".runfold" / "ledger").glob("ledger-*.jsonl"))
    lines = segment.read_bytes().split(b"\n")
    lines.insert(10, b"this is not a ledger line")
    segment.write_bytes(b"\n".join(lines))
    damaged = segment.read_bytes()
    client = _client(root)
    page = client.get(f"/runs/{run}")
    assert page.status_code == 200, page.text[:3000]
    assert [int(s) for s in re.findall(r'<tr data-seq="(\d+)"', page.text)] == list(range(1, 10))
    assert "the ledger fails verification at line 11 (seq 10)" in page.text
    line = client.get(f"/runs/{run[:8]}/lines/7")
    assert line.status_code == 200 and 'id="damaged-ledger"' in line.text, line.text[:3000]
    past = client.get(f"/runs/{run}/lines/12")
    assert past.status_code == 409 and "fails verification at line 11 (seq 10)" in past.text
    chart = client.get(f"/runs/{run}/usage.svg")
    assert chart.status_code == 200 and chart.text.startswith("<svg") and 'class="tok"' in chart.text
    assert segment.read_bytes() == damaged  # nothing cut or rewritten (the index is the store's cache)


def test_a_ledger_that_lost_its_newest_lines_says_so_not_zero_lines_browsable(tmp_path: Path) -> None:
    """Verification fails with no line at fault (the head mark names a line the ledger no
    longer holds): the verify page gives the verifier's message, not "the 0 lines before it"."""
    root = tmp_path / "ws"
    garden(root)
    segment = next((root / ".runfold" / "ledger").glob("ledger-*.jsonl"))
    data = segment.read_bytes()
    segment.write_bytes(data[: data.rstrip(b"\n").rindex(b"\n") + 1])  # the last line gone
    got = _client(root).get("/verify")
    assert got.status_code == 200
    assert "head mark" in got.text and "lines before it are browsable" not in got.text, got.text[-3000:]


def test_an_imported_run_shows_where_it_came_from_and_filters_as_import(tmp_path: Path) -> None:
    """A session imported from another tool's file: the overview's `from` names the format and
    the file, the relation filter `import` lists it alone, and its page's tree says so."""
    from web_support import REPO, runfold

    root = tmp_path / "ws"
    garden(root)
    source = REPO / "tests" / "fixtures" / "transcripts" / "claude-code-hello-world.jsonl"
    done = runfold(root, "import", "auto", str(source))
    assert done.returncode == 0, done.stdout + done.stderr
    with Workspace.open(root) as w:
        imported = w.latest_run()
    client = _client(root)
    overview = client.get("/").text
    row = overview.split(f'<tr data-run="{imported}"', 1)[1].split("</tr>", 1)[0]
    assert "import: claude-code session main of claude-code-hello-world.jsonl" in row
    only = client.get("/?relation=import").text
    assert re.findall(r'<tr data-run="([^"]+)"', only) == [imported]
    assert re.findall(r'<tr data-run="([^"]+)"', client.get("/?q=hello-world.jsonl").text) == [imported]
    tree = client.get(f"/runs/{imported}").text.split('id="tree"', 1)[1].split("</section>", 1)[0]
    assert "(imported: claude-code session main of claude-code-hello-world.jsonl)" in tree
    listed = {r["run"]: r for r in __import__("json").loads(runfold(root, "runs", "--json").stdout)}
    assert listed[imported]["relation"] == "import" and listed[imported]["imported"]["format"] == "claude-code"
