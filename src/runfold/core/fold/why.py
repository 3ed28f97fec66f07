"""Why the window looks the way it does (DESIGN.md §10): every part of a run's window at a seq
attributed to the ledger line that put it there and its cause, sized per region and per cause,
against the model's window and the budgets of `[context]`, and the changes between two points.

Sizes are bytes. Token figures say the method that produced them (`core.tokens`): `calibrated`
on the run's own billed calls when it has any, else the bytes/4 `estimate`; the CLI may add a
tokenizer count of the whole request. A change with no cause of its own (a prefix segment that
changed without a line saying why) is left unattributed (cause None), never labelled with a
neighbour's cause. The fold is pure: the config and the frozen prefix come from the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runfold.core.canonical import Json, content_hash, encode_json
from runfold.core.causes import CAUSES, Cause
from runfold.core.errors import RunfoldError
from runfold.core.fold.run import RunFold, fold_run
from runfold.core.kinds import Kind
from runfold.core.payloads import (
    ContextChanged,
    ModelCalled,
    ModelReturned,
    PromptAssembled,
    ResultOffloaded,
    RunStarted,
)
from runfold.core.records import Record
from runfold.core.regions import region_entries
from runfold.core.tokens import (
    Calibration,
    ModelLimits,
    TokenCount,
    calibrate,
    estimate,
    estimate_tokens,
    model_limits,
    window_tokens,
)
from runfold.core.window import REGIONS as BUDGET_REGIONS
from runfold.core.window import Budgets, ContextSettings, Region, budgets

REGIONS: tuple[str, ...] = ("system", "tools", "conversation")
"""The regions of the frozen prefix and the conversation, in window order; the notes, todo and
scratch regions (`core.regions`) follow, in the block at the request's end. `system` and `tools`
together are the budget region `system` of `core.window`."""
UNATTRIBUTED = "unattributed"
"""The label shown for a part or change with no cause of its own."""
TOKEN_ESTIMATE = "estimated: bytes/4 rounded up, not a tokenizer count"
SIZE_FIELDS: tuple[str, ...] = (
    "bytes_added",
    "bytes_removed",
    "tokens_added",
    "tokens_removed",
    "revision_before",
    "revision_after",
)
"""The integer sizes a `context_changed` line may record (read when present, never required)."""


@dataclass(frozen=True)
class Part:
    """One attributed part of the window.

    `region`: `system` | `tools` | `conversation` | `notes` | `todo` | `scratch`; `name`: the
    segment slot, `tool table`, `message i block j (kind)`, or a region entry (`region_entries`); `seq`: the line that put it there; `cause`: its §10 cause or None;
    `bytes`: its size (a segment's recorded `len`, the tool table's `bytes`, a block's canonical
    JSON in the internal model); `landed`: the seq at which it entered the window (for held
    steer text, later than `seq`).
    """

    region: str
    name: str
    seq: int | None
    cause: str | None
    bytes: int
    landed: int | None = None
    message: int | None = None
    role: str | None = None
    kind: str | None = None

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.bytes)

    def to_data(self) -> dict[str, object]:
        return {
            "region": self.region,
            "name": self.name,
            "seq": self.seq,
            "cause": self.cause,
            "bytes": self.bytes,
            "tokens_est": self.tokens,
            "landed": self.landed,
            "message": self.message,
            "role": self.role,
            "kind": self.kind,
        }


@dataclass(frozen=True)
class Change:
    """One change to the window: at `seq` the `region` changed by `bytes` (negative: removed),
    because of the line at `source_seq` with `cause` (None: unattributed); `what` says it in
    words. `sizes` holds the integer sizes the line itself recorded (`SIZE_FIELDS` of a
    `context_changed`, `bytes`/`head_bytes` of a `result_offloaded`), read as they are."""

    seq: int
    region: str
    cause: str | None
    source_seq: int | None
    what: str
    bytes: int
    sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def tokens(self) -> int:
        sign = -1 if self.bytes < 0 else 1
        return sign * estimate_tokens(abs(self.bytes))

    @property
    def recorded_tokens(self) -> int | None:
        """`tokens_added - tokens_removed` when the line recorded either, else None."""
        if "tokens_added" not in self.sizes and "tokens_removed" not in self.sizes:
            return None
        return self.sizes.get("tokens_added", 0) - self.sizes.get("tokens_removed", 0)

    def to_data(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "region": self.region,
            "cause": self.cause,
            "source_seq": self.source_seq,
            "what": self.what,
            "bytes": self.bytes,
            "tokens_est": self.tokens,
            "tokens_recorded": self.recorded_tokens,
            "sizes": dict(self.sizes),
        }


@dataclass(frozen=True)
class Window:
    """The model's window and how `[context]` shares it (DESIGN.md §10), in tokens.

    `model`: the run's model (None: the ledger names none); `limits`: its row of the model
    table (None: unknown model); `output`: the reply reserve and `output_from` where it came
    from (`the run's max_tokens`, `the model's max output`, `none`); `budgets`: the region
    budgets (None when `problem` says why: unknown model, or a frozen prefix that does not fit).
    """

    model: str | None
    limits: ModelLimits | None
    output: int
    output_from: str
    budgets: Budgets | None
    problem: str | None

    def to_data(self) -> dict[str, object]:
        limits = self.limits
        return {
            "model": self.model,
            "context_window": limits.context_window if limits is not None else None,
            "max_output_tokens": limits.max_output_tokens if limits is not None else None,
            "output": self.output,
            "output_from": self.output_from,
            "input": self.budgets.input if self.budgets is not None else None,
            "budgets": dict(self.budgets.regions) if self.budgets is not None else None,
            "problem": self.problem,
        }


@dataclass(frozen=True)
class RequestFigure:
    """The request the window at the cut renders to: its `dialect`, size in `bytes` and BLAKE3
    `hash` (as `model_called.request` records them), its token count `tokens` with the method
    that produced it, and `sent_at`: the seq of the run's `model_called` that sent exactly these
    bytes (None: no request after the cut had them)."""

    dialect: str
    bytes: int
    hash: str
    tokens: TokenCount
    sent_at: int | None

    def to_data(self) -> dict[str, object]:
        return {
            "dialect": self.dialect,
            "bytes": self.bytes,
            "hash": self.hash,
            "tokens": self.tokens.to_data(),
            "sent_at": self.sent_at,
        }


@dataclass(frozen=True)
class RegionUse:
    """One budget region (`core.window.REGIONS`) at the cut: its `bytes`, `tokens` (with their
    method), its `budget` in tokens (None without budgets), its share of the budget
    `budget_permille` setting, and `window_permille`: its tokens per mille of the model's
    window (None when the window is unknown)."""

    region: Region
    bytes: int
    tokens: TokenCount
    budget: int | None
    budget_permille: int | None
    window_permille: int | None

    def to_data(self) -> dict[str, object]:
        return {
            "region": self.region,
            "bytes": self.bytes,
            "tokens": self.tokens.to_data(),
            "budget": self.budget,
            "budget_permille": self.budget_permille,
            "window_permille": self.window_permille,
        }


@dataclass(frozen=True)
class Share:
    """Bytes and estimated tokens of a region or a cause."""

    bytes: int

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.bytes)

    def to_data(self) -> dict[str, int]:
        return {"bytes": self.bytes, "tokens_est": self.tokens}


@dataclass(frozen=True)
class WhyReport:
    """The window of `run` at `cut` (the last safe cut point ≤ `asked`, see `fold.run`): its
    parts, totals per region and per cause (key `unattributed` for None), and the changes in
    (`since`, `cut`] in seq order.

    `model`: the run's model as its lines name it; `calibration`: tokens per byte learnt from
    the billed calls of the lineage through the cut (None: no call billed input tokens);
    `next_request`: `(seq, hash)` of the run's first `model_called` after the cut. `window` and
    `request` are filled by `with_window` and `with_request` from what the caller read (the
    config, the frozen prefix); None until then. `prefix`/`prefix_seq`: the `prompt_assembled`
    in force at `asked` (for a request in flight, the one its turn assembled after the cut). `fold`: the run fold through the cut (with
    landing seqs) the parts were read from.
    """

    run: str
    asked: int
    cut: int
    moved: str | None
    since: int | None
    parts: tuple[Part, ...]
    changes: tuple[Change, ...]
    model: str | None = None
    calibration: Calibration | None = None
    next_request: tuple[int, str] | None = None
    settings: ContextSettings | None = None
    window: Window | None = None
    request: RequestFigure | None = None
    prefix: PromptAssembled | None = None
    prefix_seq: int | None = None
    fold: RunFold | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def total(self) -> Share:
        return Share(sum(p.bytes for p in self.parts))

    def by_region(self) -> dict[str, Share]:
        out = {r: 0 for r in REGIONS}
        for p in self.parts:
            out[p.region] = out.get(p.region, 0) + p.bytes
        return {r: Share(b) for r, b in out.items()}

    def by_cause(self) -> dict[str, Share]:
        out: dict[str, int] = {}
        for p in self.parts:
            key = str(p.cause) if p.cause else UNATTRIBUTED  # a plain str, also for a Cause
            out[key] = out.get(key, 0) + p.bytes
        return {c: Share(b) for c, b in out.items()}

    def tokens_of(self, n_bytes: int) -> TokenCount:
        """Tokens for `n_bytes` of this run's window: `calibrated` on its billed calls, else the
        bytes/4 `estimate` (`core.tokens.estimate`)."""
        return estimate(n_bytes, self.calibration)

    def region_bytes(self, region: Region) -> int:
        """Bytes of a budget region: `system` is the system segments and the tool table."""
        names = ("system", "tools") if region == "system" else (region,)
        return sum(p.bytes for p in self.parts if p.region in names)

    def with_window(
        self,
        settings: ContextSettings,
        models: Mapping[str, ModelLimits] | None = None,
        output: int | None = None,
    ) -> WhyReport:
        """This report with the model's window and the region budgets of `settings` (DESIGN.md
        §10): the window from `models` (default: runfold's table, `core.tokens.model_limits`),
        `output` tokens reserved for the reply (the run's max_tokens, at most the model's max output;
        None: the model's max output, else 0), budgets by
        `core.window.budgets` (the rule the run loop applies). An unknown model, a prefix the window
        cannot fit (no budgets) or a prefix larger than its system share (budgets, the
        difference taken from the conversation) is said in `Window.problem`, never raised: `why`
        explains a window, it does not refuse one."""
        limits = model_limits(self.model, models) if self.model else None
        cap = limits.max_output_tokens if limits is not None else None
        if output is not None and cap is not None and cap < output:
            reserve, reserve_from = cap, "the run's max_tokens, capped by the model's max output"
        elif output is not None:
            reserve, reserve_from = output, "the run's max_tokens"
        elif limits is not None and limits.max_output_tokens is not None:
            reserve, reserve_from = limits.max_output_tokens, "the model's max output"
        else:
            reserve, reserve_from = 0, "none"
        found: Budgets | None = None
        problem: str | None = None
        if limits is None:
            name = self.model or "?"
            problem = f'the model {name!r} is not in the model table; set [models."{name}"].context_window'
        else:
            prefix_tokens = self.tokens_of(self.region_bytes("system")).tokens
            try:
                found = budgets(settings, limits.context_window, reserve, prefix_tokens, self.model or "?")
                problem = found.prefix_over_share
            except RunfoldError as err:
                problem = err.recovery
        window = Window(self.model, limits, reserve, reserve_from, found, problem)
        return dataclasses.replace(self, settings=settings, window=window)

    def with_request(
        self, dialect: str, body: bytes, counted: TokenCount | None = None, fallback: str | None = None
    ) -> WhyReport:
        """This report with the request the window renders to: `body` (its exact bytes in
        `dialect`), counted by `counted` (a tokenizer or provider count) or else by `tokens_of`
        with `fallback` saying why no better count was made."""
        digest = content_hash(body)
        tokens = counted if counted is not None else estimate(len(body), self.calibration, fallback)
        sent = self.next_request[0] if self.next_request and self.next_request[1] == digest else None
        return dataclasses.replace(self, request=RequestFigure(dialect, len(body), digest, tokens, sent))

    def regions_used(self) -> list[RegionUse]:
        """Each budget region's bytes and tokens against its budget and the window (notes, todo
        and scratch: their entries' UTF-8 bytes and the block's envelope, `region_entries`)."""
        window = self.window
        limits = window.limits if window is not None else None
        out: list[RegionUse] = []
        for region in BUDGET_REGIONS:
            n_bytes = self.region_bytes(region)
            tokens = self.tokens_of(n_bytes)
            out.append(
                RegionUse(
                    region,
                    n_bytes,
                    tokens,
                    window.budgets.conversation
                    if region == "conversation" and window is not None and window.budgets is not None
                    else window.budgets.regions[region]
                    if window is not None and window.budgets is not None
                    else None,
                    self.settings.share(region) if self.settings is not None else None,
                    tokens.tokens * 1000 // limits.context_window if limits is not None else None,
                )
            )
        return out

    def to_data(self) -> dict[str, object]:
        cal = self.calibration
        return {
            "run": self.run,
            "asked": self.asked,
            "cut": self.cut,
            "moved": self.moved,
            "since": self.since,
            "model": self.model,
            "total": self.total.to_data(),
            "tokens": self.tokens_of(self.total.bytes).to_data(),
            "calibration": dataclasses.asdict(cal) if cal is not None else None,
            "window": self.window.to_data() if self.window is not None else None,
            "request": self.request.to_data() if self.request is not None else None,
            "usage": [u.to_data() for u in self.regions_used()],
            "regions": {r: s.to_data() for r, s in self.by_region().items()},
            "causes": {c: s.to_data() for c, s in self.by_cause().items()},
            "parts": [p.to_data() for p in self.parts],
            "changes": [c.to_data() for c in self.changes],
            "estimate": TOKEN_ESTIMATE,
        }


def _prefix_history(records: Sequence[Record]) -> tuple[list[Part], list[Change]]:
    """The prefix parts current at the end of `records` and every prefix change, from their
    `prompt_assembled` lines. A run's first assembly is `seed`; a later segment or tool table
    whose hash differs has no cause of its own (unattributed)."""
    current: dict[str, tuple[Part, str]] = {}
    changes: list[Change] = []
    seeded: set[str] = set()
    for rec in records:
        if not rec.known or rec.kind is not Kind.PROMPT_ASSEMBLED:
            continue
        p = rec.typed(PromptAssembled)
        cause = Cause.SEED if rec.run not in seeded else None
        seeded.add(rec.run)
        fresh: dict[str, tuple[Part, str]] = {}
        for seg in p.segments:
            fresh[f"system:{seg.slot}"] = (Part("system", seg.slot, rec.seq, cause, seg.len), seg.hash)
        if p.tools.hash or p.tools.bytes:
            fresh["tools"] = (Part("tools", "tool table", rec.seq, cause, p.tools.bytes), p.tools.hash)
        for key, (part, digest) in list(fresh.items()):
            old = current.get(key)
            if old is not None and old[1] == digest:
                fresh[key] = old  # unchanged: keeps the line and cause that put it there
                continue
            delta = part.bytes - (old[0].bytes if old is not None else 0)
            verb = "set" if old is None else "changed"
            changes.append(Change(rec.seq, part.region, part.cause, rec.seq, f"{verb} {part.name}", delta))
        for key, (old_part, _) in current.items():
            if key not in fresh:
                changes.append(
                    Change(
                        rec.seq, old_part.region, cause, rec.seq, f"dropped {old_part.name}", -old_part.bytes
                    )
                )
        current = fresh
    return [part for part, _ in current.values()], changes


PrefixOwners = tuple[dict[str, tuple[int | None, str | None]], tuple[int | None, str | None], tuple[int | None, str | None]]
"""`(segments by slot, tool table, envelope)`, each `(seq, cause)`; see `prefix_owners`."""


def prefix_owners(assembled: Sequence[Record], used: PromptAssembled | None) -> PrefixOwners:
    """Who put the frozen prefix into a request rendered with `used` (DESIGN.md §8, §10), from
    the lineage's `prompt_assembled` lines `assembled` through that request, in order: each
    system segment and the tool table as `why` attributes them (`seed` at the line that first
    held their current bytes, unattributed when they changed later without a cause); the
    envelope — the call settings the prefix document records and the body's own keys and
    punctuation — to the first line that assembled the same prefix document, `seed` when that
    line is its run's first assembly, else unattributed (a prefix that changed without a line
    saying why)."""
    parts, _ = _prefix_history(assembled)
    segments = {p.name: (p.seq, p.cause) for p in parts if p.region == "system"}
    table = next(((p.seq, p.cause) for p in parts if p.region == "tools"), (None, None))
    envelope: tuple[int | None, str | None] = (None, None)
    first_of_run: set[str] = set()
    for rec in assembled:
        if not rec.known or rec.kind is not Kind.PROMPT_ASSEMBLED:
            continue
        opens = rec.run not in first_of_run
        first_of_run.add(rec.run)
        if used is not None and rec.typed(PromptAssembled).prefix == used.prefix:
            envelope = (rec.seq, Cause.SEED if opens else None)
            break
    return segments, table, envelope


def _sizes(data: Mapping[str, Json], keys: Sequence[str]) -> dict[str, int]:
    """The integer fields `keys` of a payload that are present (others are not guessed)."""
    out: dict[str, int] = {}
    for key in keys:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    return out


def _region_changes(records: Sequence[Record]) -> list[Change]:
    """`context_changed` lines as changes, with their own cause (None when it is not a §10
    cause) and the sizes they record (`SIZE_FIELDS`; without `bytes_added`/`bytes_removed` the
    size is `token_delta` × 4, the older form); `result_offloaded` lines as the result they
    moved to the content store (cause `tool_result`, no change in bytes: the window only ever
    held the head)."""
    out: list[Change] = []
    result_seq: dict[str, int] = {}
    for rec in records:
        if not rec.known:
            continue
        if rec.kind is Kind.TOOL_RESULT:
            use_id = rec.env.data.get("tool_use_id")
            if isinstance(use_id, str):
                result_seq[use_id] = rec.seq
        elif rec.kind is Kind.RESULT_OFFLOADED:
            off = rec.typed(ResultOffloaded)
            sizes = {"bytes": off.bytes, "head_bytes": len(off.head.encode("utf-8"))}
            sizes |= _sizes(off.extra, ("head_bytes",))
            what = (
                f"offloaded the result of {off.tool_use_id}: {off.bytes} B to {off.locator}, "
                f"{sizes['head_bytes']} B head kept"
            )
            out.append(
                Change(
                    rec.seq,
                    "conversation",
                    Cause.TOOL_RESULT,
                    result_seq.get(off.tool_use_id),
                    what,
                    0,
                    sizes,
                )
            )
        elif rec.kind is Kind.CONTEXT_CHANGED:
            c = rec.typed(ContextChanged)
            cause = c.cause if c.cause in CAUSES else None
            sizes = _sizes(c.extra, SIZE_FIELDS)
            if "bytes_added" in sizes or "bytes_removed" in sizes:
                delta = sizes.get("bytes_added", 0) - sizes.get("bytes_removed", 0)
            else:
                delta = c.token_delta * 4
            strategy = c.extra.get("strategy")
            how = f" by {strategy}" if isinstance(strategy, str) else ""
            what = f"{c.region or 'region'}{how}: +{len(c.added)} / -{len(c.removed)} items"
            if "bytes_removed" in sizes or "bytes_added" in sizes:
                what += f", -{sizes.get('bytes_removed', 0)} B +{sizes.get('bytes_added', 0)} B"
            if "revision_before" in sizes and "revision_after" in sizes:
                what += f", revision {sizes['revision_before']}→{sizes['revision_after']}"
            out.append(Change(rec.seq, c.region or "region", cause, rec.seq, what, delta, sizes))
    return out


def _calls(
    records: Sequence[Record], run_lines: Sequence[Record], cut: int
) -> tuple[str | None, Calibration | None, tuple[int, str] | None]:
    """The run's model, the calibration of the lineage's billed calls through the cut (each
    `model_called.request.bytes` against its reply's billed prompt tokens,
    `core.tokens.window_tokens`), and `(seq, hash)` of the run's first request after the cut."""
    model: str | None = None
    pairs: list[tuple[int, int]] = []
    pending: dict[str, int] = {}
    for rec in records:
        if not rec.known:
            continue
        if rec.kind is Kind.MODEL_CALLED:
            called = rec.typed(ModelCalled)
            model = called.model or model
            pending[rec.run] = called.request.bytes
        elif rec.kind is Kind.MODEL_RETURNED and rec.run in pending:
            usage = rec.typed(ModelReturned).usage
            pairs.append((pending.pop(rec.run), window_tokens(usage or {})))
    following: tuple[int, str] | None = None
    for rec in run_lines:
        if rec.seq > cut and rec.known and rec.kind is Kind.MODEL_CALLED:
            called = rec.typed(ModelCalled)
            following = (rec.seq, called.request.hash)
            model = model or called.model or None
            break
    if model is None and run_lines and run_lines[0].known and run_lines[0].kind is Kind.RUN_STARTED:
        model = run_lines[0].typed(RunStarted).model
    return model, calibrate(pairs), following


def why_report(
    lines_by_run: Mapping[str, Sequence[Record]],
    run: str,
    at_seq: int | None = None,
    *,
    since: int | None = None,
    tail: int | None = None,
) -> WhyReport:
    """The window of `run` at the last safe cut point ≤ `at_seq` (default: the run's last line),
    every part attributed, and the changes after `since` (default: all) through the cut.

    Raises like `fold.run.fold_run` (`E_INVALID_ARGS` for a seq outside the run's lineage,
    `E_LEDGER_CORRUPT` for a line that cannot be folded).
    """
    fold = fold_run(lines_by_run, run, at_seq, tail=tail, track_landing=True)
    records = list(fold.lineage.records())
    # A turn the cut moved back from had already assembled its prefix: that is what its request
    # carried (the lines between the cut and `asked` are that turn's, of the run owning the cut).
    owner = fold.lineage.steps[-1].run
    assembled = [
        r
        for r in lines_by_run.get(owner, ())
        if fold.cut < r.seq <= fold.asked and r.known and r.kind is Kind.PROMPT_ASSEMBLED
    ]
    prefix_parts, changes = _prefix_history([*records, *assembled])
    prefix, prefix_seq = fold.prefix, fold.prefix_seq
    if assembled:
        prefix, prefix_seq = assembled[-1].typed(PromptAssembled), assembled[-1].seq
    changes += _region_changes(records)
    parts: list[Part] = list(prefix_parts)
    landed = fold.landed or ()
    flat = 0
    groups: list[tuple[int, int | None, str | None, int, int, str, list[str]]] = []
    for mi, (msg, srcs) in enumerate(zip(fold.messages, fold.sources, strict=True)):
        for bi, (block, src) in enumerate(zip(msg["content"], srcs, strict=True)):
            size = len(encode_json(block))
            at = landed[flat] if flat < len(landed) else src.seq
            flat += 1
            kind = block["kind"]
            parts.append(
                Part(
                    "conversation",
                    f"message {mi} block {bi} ({kind})",
                    src.seq,
                    src.cause,
                    size,
                    landed=at,
                    message=mi,
                    role=str(msg["role"]),
                    kind=kind,
                )
            )
            key = (at, src.seq, src.cause, mi)
            if groups and groups[-1][:4] == key:
                g = groups[-1]
                groups[-1] = (g[0], g[1], g[2], g[3], g[4] + size, g[5], [*g[6], kind])
            else:
                groups.append((at, src.seq, src.cause, mi, size, str(msg["role"]), [kind]))
    for at, src_seq, cause, mi, size, role, kinds in groups:
        counted = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
        changes.append(
            Change(at, "conversation", cause, src_seq, f"added {counted} to message {mi} ({role})", size)
        )
    for region, name, seq, size in region_entries(fold.regions):  # the context tools' edits
        parts.append(Part(region, name, seq, Cause.CONTEXT_TOOL, size, landed=seq))
    lower = -1 if since is None else since
    changes = sorted(
        (c for c in changes if lower < c.seq <= fold.cut),
        key=lambda c: (c.seq, REGIONS.index(c.region) if c.region in REGIONS else 3),
    )
    model, calibration, following = _calls(records, lines_by_run.get(run, ()), fold.cut)
    return WhyReport(
        run=run,
        asked=fold.asked,
        cut=fold.cut,
        moved=fold.moved,
        since=since,
        parts=tuple(parts),
        changes=tuple(changes),
        model=model,
        calibration=calibration,
        next_request=following,
        prefix=prefix,
        prefix_seq=prefix_seq,
        fold=fold,
    )
