"""Why the window looks the way it does (DESIGN.md §10): every part of a run's window at a seq
attributed to the ledger line that put it there and its cause, sized per region and per cause,
and the changes between two points.

Sizes are bytes; tokens are an *estimate* (bytes / 4, rounded up), not a tokenizer count. A
change with no cause of its own (a prefix segment that changed without a line saying why) is left
unattributed (cause None), never labelled with a neighbour's cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runfold.core.canonical import encode_json
from runfold.core.conversation import CAUSES
from runfold.core.fold.run import fold_run
from runfold.core.kinds import Kind
from runfold.core.payloads import ContextChanged, PromptAssembled
from runfold.core.records import Record

REGIONS: tuple[str, ...] = ("system", "tools", "conversation")
"""The regions `why` sizes, in window order (pinned notes, todo and scratch regions are not built
yet; their `context_changed` lines appear as changes)."""
UNATTRIBUTED = "unattributed"
"""The label shown for a part or change with no cause of its own."""
TOKEN_ESTIMATE = "estimated: bytes/4 rounded up, not a tokenizer count"


def estimate_tokens(n_bytes: int) -> int:
    """Estimated tokens for `n_bytes` bytes: ceil(n_bytes / 4)."""
    return (n_bytes + 3) // 4


@dataclass(frozen=True)
class Part:
    """One attributed part of the window.

    `region`: `system` | `tools` | `conversation`; `name`: the segment slot, `tool table`, or
    `message i block j (kind)`; `seq`: the line that put it there; `cause`: its §10 cause or None;
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
    words."""

    seq: int
    region: str
    cause: str | None
    source_seq: int | None
    what: str
    bytes: int

    @property
    def tokens(self) -> int:
        sign = -1 if self.bytes < 0 else 1
        return sign * estimate_tokens(abs(self.bytes))

    def to_data(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "region": self.region,
            "cause": self.cause,
            "source_seq": self.source_seq,
            "what": self.what,
            "bytes": self.bytes,
            "tokens_est": self.tokens,
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
    (`since`, `cut`] in seq order."""

    run: str
    asked: int
    cut: int
    moved: str | None
    since: int | None
    parts: tuple[Part, ...]
    changes: tuple[Change, ...]

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
            key = p.cause or UNATTRIBUTED
            out[key] = out.get(key, 0) + p.bytes
        return {c: Share(b) for c, b in out.items()}

    def to_data(self) -> dict[str, object]:
        return {
            "run": self.run,
            "asked": self.asked,
            "cut": self.cut,
            "moved": self.moved,
            "since": self.since,
            "total": self.total.to_data(),
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
        cause = "seed" if rec.run not in seeded else None
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


def _region_changes(records: Sequence[Record]) -> list[Change]:
    """`context_changed` lines as changes, with their own cause (None when it is not a §10 cause)."""
    out: list[Change] = []
    for rec in records:
        if not rec.known or rec.kind is not Kind.CONTEXT_CHANGED:
            continue
        c = rec.typed(ContextChanged)
        cause = c.cause if c.cause in CAUSES else None
        what = f"{c.region or 'region'}: +{len(c.added)} / -{len(c.removed)} items"
        out.append(Change(rec.seq, c.region or "region", cause, rec.seq, what, c.token_delta * 4))
    return out


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
    prefix_parts, changes = _prefix_history(records)
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
    lower = -1 if since is None else since
    changes = sorted(
        (c for c in changes if lower < c.seq <= fold.cut),
        key=lambda c: (c.seq, REGIONS.index(c.region) if c.region in REGIONS else 3),
    )
    return WhyReport(
        run=run,
        asked=fold.asked,
        cut=fold.cut,
        moved=fold.moved,
        since=since,
        parts=tuple(parts),
        changes=tuple(changes),
    )
