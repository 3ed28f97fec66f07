"""The context window of a run at a seq, as `runfold why` and `runfold context` show it
(DESIGN.md §10): the pure `why` fold, completed with what only this layer can read — the frozen
prefix from the CAS, the model table and `[context]` of the typed config, and an offline
tokenizer count of the request the window renders to.

Nothing here calls a model or the network, and nothing writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from runfold.core import fold as fold_api
from runfold.core.fold.why import prefix_owners
from runfold.core.kinds import Kind
from runfold.core.regions import regions_text, with_regions, with_regions_owned
from runfold.core.render import render_request, request_bytes
from runfold.core.render.attribution import Attributed, attribute_request
from runfold.core.tokens import TokenCount
from runfold.providers.base import Request
from runfold.providers.tokens import count_offline
from runfold.runtime.prefix import Prefix, stored_prefix

if TYPE_CHECKING:
    from runfold.core.records import Record
    from runfold.runtime.config import WorkspaceConfig
    from runfold.store.cas import Cas


@dataclass(frozen=True)
class WindowView:
    """A run's window at a cut: `report` (the `why` fold with the model's window, the budgets and
    the request's token count), `fold` (the conversation through the cut) and `prefix` (the
    frozen prefix from the CAS; None when the run stored none, then the system region has sizes
    but no text and no request can be rebuilt)."""

    report: fold_api.WhyReport
    fold: fold_api.RunFold
    prefix: Prefix | None

    def attributed(self) -> Attributed | None:
        """The request this window renders to in the run's dialect, every byte attributed to the
        line and cause that put it there (`core.render.attribution.attribute_request`: the
        conversation's blocks by their sources, the prefix as `why` attributes it, the envelope
        by `core.fold.why.prefix_owners`). None when the run stored no prefix."""
        if self.prefix is None:
            return None
        report, fold = self.report, self.fold
        assembled = [r for r in fold.lineage.records() if r.known and r.kind is Kind.PROMPT_ASSEMBLED]
        segments, tools, envelope = prefix_owners(assembled, report.prefix)
        sources = [[(s.seq, s.cause) for s in row] for row in fold.sources]
        messages, owned, uncached = with_regions_owned(fold.messages, sources, fold.regions)
        spec = self.prefix.spec(messages, uncached_tail=uncached)
        return attribute_request(
            self.prefix.dialect, spec, owned, segments=segments, tools=tools, envelope=envelope
        )

    def to_data(self) -> dict[str, Any]:
        """`runfold context --json`: the window region by region, exactly (see DESIGN.md §10).

        Keys: `run`, `asked`, `cut`, `moved`, `model`, `dialect`, `with_prefix`, `window`
        (`Window.to_data`), `request` (`RequestFigure.to_data` or None), `calibration`,
        `settings` (the prefix's call settings: max_tokens, thinking, cache_key,
        temperature_milli, stream), and `regions`: one object per budget region with `region`,
        `bytes`, `tokens`, `budget`, `budget_permille`, `window_permille` and its content —
        `system`: `segments` [{slot, text, edge, bytes, seq, cause}] and `tools` {bytes, seq,
        cause, table: [{name, description, input_schema, strict?}]}; `conversation`:
        `messages` [{index, role, blocks: [{seq, cause, landed, bytes, block}]}] and `held`
        [{seq, text}]; notes, todo and scratch: `parts` [{name, seq, cause, bytes}] (the
        entries, then the block's envelope, `core.regions.region_entries`). `regions_block`: the
        text of the regions block as the request carries it (None when every region is empty)."""
        report, prefix = self.report, self.prefix
        doc: dict[str, Any] = orjson.loads(prefix.document()) if prefix is not None else {}
        parts = report.parts
        texts = {s.slot: (s.text, s.edge) for s in prefix.system} if prefix is not None else {}
        segments = [
            {
                "slot": p.name,
                "text": texts[p.name][0] if p.name in texts else None,
                "edge": texts[p.name][1] if p.name in texts else None,
                "bytes": p.bytes,
                "seq": p.seq,
                "cause": p.cause,
            }
            for p in parts
            if p.region == "system"
        ]
        table = next((p for p in parts if p.region == "tools"), None)
        tools = {
            "bytes": table.bytes if table is not None else 0,
            "seq": table.seq if table is not None else None,
            "cause": table.cause if table is not None else None,
            "table": doc.get("tools", []),
        }
        conv = [p for p in parts if p.region == "conversation"]
        messages: list[dict[str, Any]] = []
        flat = iter(conv)
        for index, msg in enumerate(self.fold.messages):
            blocks = []
            for block in msg["content"]:
                part = next(flat)
                blocks.append(
                    {
                        "seq": part.seq,
                        "cause": part.cause,
                        "landed": part.landed,
                        "bytes": part.bytes,
                        "block": block,
                    }
                )
            messages.append({"index": index, "role": msg["role"], "blocks": blocks})
        held = [{"seq": h.source.seq, "text": h.block["text"]} for h in self.fold.conversation.held]
        regions: list[dict[str, Any]] = []
        for use in report.regions_used():
            entry: dict[str, Any] = use.to_data()
            if use.region == "system":
                entry |= {"segments": segments, "tools": tools}
            elif use.region == "conversation":
                entry |= {"messages": messages, "held": held}
            else:
                entry["parts"] = [
                    {"name": p.name, "seq": p.seq, "cause": p.cause, "bytes": p.bytes}
                    for p in parts
                    if p.region == use.region
                ]
            regions.append(entry)
        cal = report.to_data()["calibration"]
        return {
            "run": report.run,
            "asked": report.asked,
            "cut": report.cut,
            "moved": report.moved,
            "model": report.model,
            "dialect": prefix.dialect if prefix is not None else None,
            "with_prefix": prefix is not None,
            "window": report.window.to_data() if report.window is not None else None,
            "request": report.request.to_data() if report.request is not None else None,
            "calibration": cal,
            "settings": {k: doc[k] for k in SETTINGS} if prefix is not None else None,
            "regions": regions,
            "regions_block": regions_text(self.fold.regions),
        }


SETTINGS: tuple[str, ...] = ("max_tokens", "thinking", "cache_key", "temperature_milli", "stream")
"""The call settings of the prefix document that `context --json` shows."""


def window_view(
    lines_by_run: Mapping[str, Sequence[Record]],
    run: str,
    at: int | None,
    *,
    cas: Cas,
    config: WorkspaceConfig,
    since: int | None = None,
    tail: int | None = None,
) -> WindowView:
    """The window of `run` at the last safe cut point ≤ `at` (see `fold.why`), with:

    - the model's window from `config.models` and the budgets of `config.context`
      (`WhyReport.with_window`; the reply reserve is the run's `max_tokens` when its prefix is
      stored, else the model's max output);
    - the request the window renders to in the run's dialect, its BLAKE3 and size, and its
      tokens by `providers.tokens.count_offline` (an OpenAI encoding when one applies, else the
      run's calibration or bytes/4, the method named; `WhyReport.with_request`).

    Raises like `fold.why` (`E_INVALID_ARGS` for a seq outside the run's lineage, naming its
    range), `E_PATH_NOT_FOUND` / `E_LEDGER_CORRUPT` for a missing or damaged prefix object."""
    report = fold_api.why_report(lines_by_run, run, at, since=since, tail=tail)
    fold = report.fold
    assert fold is not None
    prefix = stored_prefix(report.prefix, report.prefix_seq, cas)
    report = report.with_window(
        config.context, config.models, prefix.max_tokens if prefix is not None else None
    )
    if prefix is not None:
        messages, uncached = with_regions(fold.messages, fold.regions)
        rendered = render_request(prefix.dialect, prefix.spec(messages, uncached_tail=uncached))
        body = request_bytes(rendered.body)
        request = Request(prefix.dialect, prefix.model, rendered.body, body, prefix.stream)
        counted: TokenCount = count_offline(request, calibration=report.calibration, models=config.models)
        report = report.with_request(prefix.dialect, body, counted)
    return WindowView(report, fold, prefix)
