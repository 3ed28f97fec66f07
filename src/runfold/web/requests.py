"""The request and window pages: the exact bytes a model call sent (step through the run's model
calls) with the validator's verdict per dialect and the replay hash check; the window at any seq
by region and by cause with each change and its cause (`runfold why`); a diff between two
requests of a run, and between two runs aligned on their common prefix.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from runfold.api import Workspace
from runfold.core.errors import invalid_args
from runfold.core.fold.why import REGIONS
from runfold.web.charts import share_bar
from runfold.web.site import Site, friendly

DIFF_CONTEXT = 3
_PREVIEW = 160


def _pretty(body: bytes) -> list[str]:
    return json.dumps(json.loads(body), indent=1, ensure_ascii=False).splitlines()


def _run_range(site: Site, ws: Workspace, rid: str, seq: int) -> None:
    """Refuse a seq the run does not hold, naming the run's range."""
    summaries, _ = site.viewer.summaries(ws)
    s = next((x for x in summaries if x.run == rid), None)
    if s is None or not s.first_seq <= seq <= s.last_seq:
        held = f"seq {s.first_seq}..{s.last_seq}" if s is not None else "no lines"
        raise invalid_args(f"show seq {seq}", f"run {rid}", f"this run holds lines at {held}; give a seq in that range")


def _preview(block: dict[str, Any]) -> str:
    kind = block.get("kind", "?")
    text = {
        "text": block.get("text", ""),
        "tool_use": f"{block.get('name', '')} {block.get('input', '')}",
        "tool_result": block.get("content", ""),
        "thinking": block.get("thinking", ""),
    }.get(kind, "")
    flat = " ".join(str(text).split())
    return f"{kind}: {flat[:_PREVIEW]}{'…' if len(flat) > _PREVIEW else ''}"


def add_routes(router: APIRouter, site: Site) -> None:
    """Add the request, window and diff pages to `router`."""
    viewer = site.viewer

    def model_calls(ws: Workspace, rid: str) -> list[int]:
        return [r.seq for r in viewer.run_lines_of_kind(ws, rid, "model_called")]

    @router.get("/runs/{run}/request", name="request")
    @friendly(site)
    def request_page(request: Request, run: str, at: int | None = None) -> Response:
        with viewer.open() as ws:
            rid = ws.resolve_run(run)
            calls = model_calls(ws, rid)
            if not calls:
                raise invalid_args("show a request", f"run {rid}", "this run made no model call yet; open its timeline")
            if at is None:
                chosen = calls[-1]
            else:
                _run_range(site, ws, rid, at)
                before = [c for c in calls if c <= at]
                chosen = before[-1] if before else calls[0]
            sent = ws.sent_request(rid, chosen)
            view = ws.request_at(rid, chosen)
        i = calls.index(chosen)
        verdicts = {d: [v.display() for v in vs] for d, vs in view.verdicts.items()}
        return site.render(
            request,
            "request.html",
            title=f"request at seq {chosen}",
            run=rid,
            asked=at,
            sent=sent,
            body=sent.body.decode("utf-8"),
            pretty=_pretty(sent.body),
            calls=calls,
            index=i,
            prev=calls[i - 1] if i > 0 else None,
            next=calls[i + 1] if i + 1 < len(calls) else None,
            verdicts=verdicts,
        )

    @router.get("/runs/{run}/request.json", name="request_bytes")
    @friendly(site)
    def request_bytes(request: Request, run: str, at: int) -> Response:
        with viewer.open() as ws:
            sent = ws.sent_request(ws.resolve_run(run), at)
        return Response(sent.body, media_type="application/json")

    @router.get("/runs/{run}/window", name="window")
    @friendly(site)
    def window_page(request: Request, run: str, at: int | None = None) -> Response:
        with viewer.open() as ws:
            rid = ws.resolve_run(run)
            report = ws.why(rid, at)
        data = report.to_data()
        regions = {r: s.bytes for r, s in report.by_region().items()}
        causes = {c: s.bytes for c, s in report.by_cause().items()}
        return site.render(
            request,
            "window.html",
            title=f"window at seq {report.cut}",
            run=rid,
            report=report,
            data=data,
            region_chart=share_bar("region", regions, [r for r in REGIONS if r in regions] + [r for r in regions if r not in REGIONS]),
            cause_chart=share_bar("cause", causes),
            regions=regions,
            causes=causes,
            at=at,
        )

    @router.get("/runs/{run}/diff", name="request_diff")
    @friendly(site)
    def request_diff(request: Request, run: str, a: int, b: int) -> Response:
        with viewer.open() as ws:
            rid = ws.resolve_run(run)
            left, right = ws.sent_request(rid, a), ws.sent_request(rid, b)
        common = 0
        for x, y in zip(left.body, right.body, strict=False):
            if x != y:
                break
            common += 1
        diff = list(
            difflib.unified_diff(
                _pretty(left.body), _pretty(right.body), f"seq {a}", f"seq {b}", n=DIFF_CONTEXT, lineterm=""
            )
        )
        return site.render(
            request,
            "request_diff.html",
            title=f"requests {a} → {b}",
            run=rid,
            a=left,
            b=right,
            common=common,
            diff=diff,
        )

    @router.get("/diff", name="runs_diff")
    @friendly(site)
    def runs_diff(request: Request, a: str, b: str) -> Response:
        with viewer.open() as ws:
            ra, rb = ws.resolve_run(a), ws.resolve_run(b)
            fa, fb = ws.fold(ra), ws.fold(rb)
        ma, mb = fa.messages, fb.messages
        common = 0
        for x, y in zip(ma, mb, strict=False):
            if json.dumps(x, sort_keys=True) != json.dumps(y, sort_keys=True):
                break
            common += 1

        def rows(fold: Any, messages: Any) -> list[dict[str, Any]]:
            out = []
            for i in range(common, len(messages)):
                msg = messages[i]
                out.append(
                    {
                        "index": i,
                        "role": msg["role"],
                        "blocks": [
                            {"text": _preview(blk), "seq": src.seq, "cause": src.cause}
                            for blk, src in zip(msg["content"], fold.sources[i], strict=True)
                        ],
                    }
                )
            return out

        return site.render(
            request,
            "runs_diff.html",
            title="compare runs",
            a=ra,
            b=rb,
            fa=fa,
            fb=fb,
            common=common,
            shared=[{"index": i, "role": ma[i]["role"], "blocks": len(ma[i]["content"])} for i in range(common)],
            left=rows(fa, ma),
            right=rows(fb, mb),
        )
