"""The workspace and run pages: the runs with filters and search and the ledger's verify status;
a run with its tree, its usage and cost per turn, and its timeline (filter by kind, search, jump
to seq, paginated); one line as stored; the static files.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from runfold.api_lines import LinePosition
from runfold.core import fold as fold_api
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.fold.runs import status_text, tokens_of
from runfold.core.ids import short_run_ids
from runfold.core.kinds import KNOWN_KIND_NAMES
from runfold.core.payloads import ModelReturned
from runfold.web.charts import Turn, usage_svg
from runfold.web.site import HERE, Site, friendly
from runfold.web.viewer import Damage, is_damage

RUNS_PER_PAGE = 100
LINES_PER_PAGE = 100
WAITING_SCAN = 1_000
"""How far back from a running run's last line the page looks for calls waiting for approval:
a waiting call holds its run, so only its own wave's lines can follow it."""
STATIC = {"app.css": "text/css", "app.js": "text/javascript"}


def _matches(s: fold_api.RunSummary, q: str, status: str, relation: str) -> bool:
    if status and status_text(s).split(" ")[0] != status and s.status != status:
        return False
    if relation and (s.relation or "none") != relation:
        return False
    if q:
        hay = " ".join([s.run, s.task, s.model or "", s.addr or "", s.imported_from, status_text(s)]).lower()
        return q.lower() in hay
    return True


def lineage_of(summaries: list[fold_api.RunSummary], run: str) -> tuple[list[fold_api.RunSummary], list[tuple[int, fold_api.RunSummary]]]:
    """The runs `run` came from (oldest first) and the runs that came from it, depth-first as
    `(depth, summary)`: its tree (forks, successors, delegations)."""
    by_id = {s.run: s for s in summaries}
    up: list[fold_api.RunSummary] = []
    cur = by_id.get(run)
    seen = {run}
    while cur is not None and cur.origin is not None and cur.origin not in seen:
        seen.add(cur.origin)
        cur = by_id.get(cur.origin)
        if cur is not None:
            up.append(cur)
    children: dict[str, list[fold_api.RunSummary]] = {}
    for s in summaries:
        if s.origin is not None:
            children.setdefault(s.origin, []).append(s)
    down: list[tuple[int, fold_api.RunSummary]] = []

    def walk(rid: str, depth: int) -> None:
        for child in children.get(rid, []):
            if child.run in seen:
                continue
            seen.add(child.run)
            down.append((depth, child))
            walk(child.run, depth + 1)

    walk(run, 1)
    return list(reversed(up)), down


def add_routes(router: APIRouter, site: Site) -> None:
    """Add the workspace, run and line pages to `router`."""
    viewer = site.viewer

    @router.get("/", name="overview")
    @friendly(site)
    def overview(
        request: Request,
        q: str = "",
        status: str = "",
        relation: str = "",
        page: Annotated[int, Query(ge=0)] = 0,
    ) -> Response:
        start = page * RUNS_PER_PAGE
        with viewer.open() as ws:
            try:
                folded = viewer.warm_summaries(ws)
                if folded is None:  # a large ledger not folded yet: the runs from the index
                    return _first_overview(request, site, ws, q, status, relation, page)
            except Exception as exc:
                if not is_damage(exc):
                    raise
                folded = viewer.summaries(ws)  # shown up to the bad line, with the verifier's message
            summaries, damage = folded
            verify = viewer.verify_state(ws)
            lines = len(ws.seq_range()) if damage is None else None
        names = viewer.names(summaries)
        shown = [s for s in summaries if _matches(s, q, status, relation)]
        return site.render(
            request,
            "overview.html",
            title="runs",
            folded=True,
            runs=shown[start : start + RUNS_PER_PAGE],
            total=len(summaries),
            matching=len(shown),
            page=page,
            pages=max((len(shown) + RUNS_PER_PAGE - 1) // RUNS_PER_PAGE, 1),
            names=names,
            q=q,
            status=status,
            relation=relation,
            statuses=sorted({status_text(s).split(" ")[0] for s in summaries}),
            status_text=status_text,
            damage=damage,
            verify=verify,
            lines=lines,
        )

    @router.get("/verify", name="verify")
    @friendly(site)
    def verify_page(request: Request) -> Response:
        with viewer.open() as ws:
            viewer.verify_state(ws)
        state = viewer.wait_verified(120)
        return site.render(request, "verify.html", title="verify", verify=state)

    @router.get("/runs/{run}", name="run")
    @friendly(site)
    def run_page(
        request: Request,
        run: str,
        kind: Annotated[list[str] | None, Query()] = None,
        q: str = "",
        seq: int | None = None,
        after: int = -1,
    ) -> Response:
        kinds = frozenset(k for k in (kind or []) if k)
        after = max(after, -1)  # before the first line: the first page
        with viewer.open() as ws:
            folded = viewer.warm_summaries(ws)
            summaries, damage = folded if folded is not None else ([], None)
            rid = viewer.run_id(ws, run)
            summary = next((s for s in summaries if s.run == rid), None)
            if folded is None:  # a large ledger not folded yet: this run's own first lines
                summary = viewer.run_head(ws, rid)
                summaries = _ancestors(viewer, ws, summary)
            if seq is not None:
                _check_seq(ws, rid, seq, summary if folded is not None else None)
                after = seq - 1
            names = viewer.names(summaries) if summaries else {}
            live = damage is None and folded is not None and summary is not None and summary.status == "running"
            waiting = viewer.waiting_calls(ws, rid, max(summary.last_seq - WAITING_SCAN, 0)) if live and summary else []
            page = viewer.timeline(ws, rid, kinds=kinds, text=q, after=after, limit=LINES_PER_PAGE, names=names)
        up, down = lineage_of(summaries, rid)
        return site.render(
            request,
            "run.html",
            title=f"run {rid[:8]}",
            run=rid,
            s=summary,
            status_text=status_text,
            up=up,
            down=down,
            folded=folded is not None,
            names=names,
            page=page,
            kinds=sorted(KNOWN_KIND_NAMES),
            chosen=kinds,
            q=q,
            seq=seq,
            after=after,
            damage=damage or page.damage,
            waiting=waiting,
        )

    @router.get("/runs/{run}/usage.svg", name="usage")
    @friendly(site)
    def usage(request: Request, run: str) -> Response:
        with viewer.open() as ws:
            rid = viewer.run_id(ws, run)
            prices = ws.summary_folder().prices  # the workspace's price table, as `runfold cost` prices
            turns = []
            model = ""
            for rec in viewer.readable_run_lines(ws, rid, 0):
                if not rec.known:
                    continue
                if rec.env.kind == "model_called":
                    model = str(rec.env.data.get("model") or model)
                elif rec.env.kind == "model_returned":
                    ret = rec.typed(ModelReturned)
                    tokens = tokens_of(ret.usage)
                    cost, _ = fold_api.reply_cost(model, tokens, ret.billed_usd_micros, prices)
                    turns.append(Turn(rec.seq, tokens, cost))
        return Response(str(usage_svg(turns)), media_type="image/svg+xml")

    @router.get("/runs/{run}/lines/{seq}", name="line")
    @friendly(site)
    def line_page(request: Request, run: str, seq: int) -> Response:
        with viewer.open() as ws:
            rid = viewer.run_id(ws, run)
            try:
                rec = ws.record_at(seq)
                position: LinePosition | None = ws.position(seq)
            except Exception as exc:  # a ledger that fails verification: its readable lines
                if not is_damage(exc):
                    raise
                found = viewer.readable_line(ws, seq)
                if isinstance(found, Damage):
                    raise RunfoldError(
                        ErrorCode.LEDGER_CORRUPT,
                        f"show seq {seq}",
                        f"run {rid}",
                        f"the ledger fails verification at line {found.line_no} (seq {found.seq}): "
                        f"{found.fault}; the lines before it are browsable, `runfold verify` names the damage",
                    ) from None
                rec, position = found, None
            if rec.run != rid:
                raise invalid_args(
                    f"show seq {seq} of run {rid}",
                    str(ws.root),
                    f"seq {seq} belongs to run {rec.run}; open it there",
                    nearby=(rec.run,),
                )
        return site.render(
            request, "line.html", title=f"seq {seq}", run=rid, rec=rec, raw=rec.raw.decode("utf-8"), position=position
        )

    @router.get("/static/{name}", name="static")
    def static(name: str) -> Response:
        if name not in STATIC:
            return Response("no such file", status_code=404, media_type="text/plain")
        return FileResponse(HERE / "static" / name, media_type=STATIC[name])


def _first_overview(
    request: Request, site: Site, ws: object, q: str, status: str, relation: str, page: int
) -> Response:
    """The overview of a ledger the summary fold has not read yet (it reads in the background):
    the runs from the index (`Workspace.runs`, cheap), each shown from its own first lines (task,
    model, lineage, start) — only the page's runs, or every run when a filter is given. Status,
    turns, tokens and cost wait for the fold; a status filter too."""
    from runfold.api import Workspace

    assert isinstance(ws, Workspace)
    viewer = site.viewer
    runs = ws.runs()
    start = page * RUNS_PER_PAGE
    if q or relation:
        heads = [viewer.run_head(ws, r) for r in runs]
        shown = [h for h in heads if _matches(h, q, "", relation)]
        matching, rows = len(shown), shown[start : start + RUNS_PER_PAGE]
    else:
        matching, rows = len(runs), [viewer.run_head(ws, r) for r in runs[start : start + RUNS_PER_PAGE]]
    return site.render(
        request,
        "overview.html",
        title="runs",
        folded=False,
        runs=rows,
        total=len(runs),
        matching=matching,
        page=page,
        pages=max((matching + RUNS_PER_PAGE - 1) // RUNS_PER_PAGE, 1),
        names=short_run_ids(runs),
        q=q,
        status=status,
        relation=relation,
        statuses=[],
        status_text=status_text,
        damage=None,
        verify=viewer.verify_state(ws),
        lines=len(ws.seq_range()),
    )


def _check_seq(ws: object, rid: str, seq: int, summary: fold_api.RunSummary | None) -> None:
    """Refuse a seq that is no line of the run, naming the run's range (or where it starts)."""
    from runfold.api import Workspace

    assert isinstance(ws, Workspace)
    if summary is not None:
        if summary.first_seq <= seq <= summary.last_seq:
            return
        held = f"lines at seq {summary.first_seq}..{summary.last_seq}"
    else:
        at = ws.records(run=rid, since=max(seq, 0), limit=1) if seq >= 0 else []
        if at and at[0].seq == seq:
            return
        first = ws.records(run=rid, limit=1)
        held = f"lines from seq {first[0].seq}" if first else "no lines"
        if at:
            held += f"; the next after seq {seq} is seq {at[0].seq}"
    raise invalid_args(f"jump to seq {seq}", f"run {rid}", f"this run holds {held}; give a seq in that range")


def _ancestors(viewer: object, ws: object, head: fold_api.RunSummary) -> list[fold_api.RunSummary]:
    """`head` and the runs it came from, read from each one's first lines."""
    from runfold.api import Workspace
    from runfold.web.viewer import Viewer

    assert isinstance(viewer, Viewer) and isinstance(ws, Workspace)
    out = [head]
    seen = {head.run}
    cur = head
    while cur.origin is not None and cur.origin not in seen and len(out) < 64:
        seen.add(cur.origin)
        cur = viewer.run_head(ws, cur.origin)
        out.append(cur)
    return out
