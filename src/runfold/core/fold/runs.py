"""The runs fold: one summary per run (status, model, turns, tokens, cost, lineage) and the tree
of forks, delegations and successors (DESIGN.md §2, §4, §7).

`runfold runs` and `runfold tree` print these; the fold reads record-only lines too, so it is
independent of the conversation fold. Unknown token counts or costs stay unknown (None), never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from runfold.core.ids import WORKSPACE_RUN, short_run_ids
from runfold.core.kinds import Kind
from runfold.core.payloads import ModelCalled, ModelReturned, RunForked, RunFrozen, RunStarted
from runfold.core.records import Record

Status = Literal["running", "done", "limit", "cancelled"]
Relation = Literal["fork", "delegation", "successor"]

TOKEN_KEYS: tuple[str, ...] = ("input", "output", "cache_read", "cache_write")
"""The `model_returned.usage` counters summed per run (tokens)."""


def first_line(text: str, width: int) -> str:
    """The first line of `text` (stripped), at most `width` characters; an ellipsis marks a cut."""
    head = text.strip().split("\n", 1)[0]
    return head if len(head) <= width else head[: width - 1] + "…"


@dataclass
class RunSummary:
    """One run as `runfold runs` shows it.

    `tokens` maps each of TOKEN_KEYS to a sum in tokens, or is None when a reply of the run has no
    `usage`; `cost_usd_micros` is the sum of `billed_usd_micros` in micro-USD, or None when a reply
    has no bill (unknown, never shown as zero). A run with no reply has tokens and cost 0.
    `relation` says how `origin` (the run it came from) produced it: `fork` (it has `run_forked`),
    `successor` (`predecessor` set), `delegation` (`parent` set, no `run_forked`).
    """

    run: str
    first_seq: int
    last_seq: int
    started_ms: int | None = None
    status: Status = "running"
    cause: str | None = None
    model: str | None = None
    turns: int = 0
    calls: int = 0
    tokens: dict[str, int] | None = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    cost_usd_micros: int | None = 0
    task: str = ""
    goal: str = ""
    addr: str | None = None
    who: str | None = None
    parent: str | None = None
    predecessor: str | None = None
    forked_from: str | None = None
    forked_at: int | None = None
    lines: int = 0
    error_code: str | None = None
    """The `E_…` code of the error that froze the run (`run_frozen.error`), else None."""

    @property
    def task_head(self) -> str:
        """The first line of the task, at most 72 characters (an ellipsis marks a cut)."""
        return first_line(self.task, 72)

    @property
    def relation(self) -> Relation | None:
        if self.predecessor is not None:
            return "successor"
        if self.forked_from is not None:
            return "fork"
        if self.parent is not None:
            return "delegation"
        return None

    @property
    def origin(self) -> str | None:
        """The run this one came from (predecessor, else the forked-from mother, else parent)."""
        return self.predecessor or self.forked_from or self.parent

    def to_data(self) -> dict[str, object]:
        """A JSON object for `runfold runs --json` (tokens and cost null when unknown)."""
        return {
            "run": self.run,
            "status": self.status,
            "cause": self.cause,
            "error_code": self.error_code,
            "model": self.model,
            "turns": self.turns,
            "calls": self.calls,
            "tokens": self.tokens,
            "cost_usd_micros": self.cost_usd_micros,
            "task": self.task_head,
            "addr": self.addr,
            "parent": self.parent,
            "predecessor": self.predecessor,
            "forked_from": self.forked_from,
            "forked_at": self.forked_at,
            "relation": self.relation,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "started_ms": self.started_ms,
            "lines": self.lines,
        }


def _tally(s: RunSummary, rec: Record) -> None:
    if not rec.known:
        return
    kind = rec.kind
    if kind is Kind.RUN_STARTED:
        p = rec.typed(RunStarted)
        s.task, s.goal, s.addr = p.task, p.goal, rec.env.addr
        s.who = p.dispatched_by or rec.env.who
        s.parent, s.predecessor = p.parent, p.predecessor
        s.started_ms = rec.env.t
        if p.model:
            s.model = p.model
    elif kind is Kind.RUN_FORKED:
        f = rec.typed(RunForked)
        s.forked_from, s.forked_at = f.from_, f.at_seq
    elif kind is Kind.MODEL_CALLED:
        model = rec.typed(ModelCalled).model
        if model:
            s.model = model
    elif kind is Kind.MODEL_RETURNED:
        r = rec.typed(ModelReturned)
        s.turns += 1
        s.calls += r.calls
        if r.usage is None or s.tokens is None:
            s.tokens = None
        else:
            for key in TOKEN_KEYS:
                value = r.usage.get(key, 0)
                s.tokens[key] += value if isinstance(value, int) and not isinstance(value, bool) else 0
        if r.billed_usd_micros is None or s.cost_usd_micros is None:
            s.cost_usd_micros = None
        else:
            s.cost_usd_micros += r.billed_usd_micros
    elif kind is Kind.RUN_FROZEN:
        frozen = rec.typed(RunFrozen)
        completion = frozen.completion
        s.status = completion if completion in ("done", "limit", "cancelled") else "cancelled"  # type: ignore[assignment]
        s.cause = frozen.cause
        code = frozen.error.get("code") if frozen.error is not None else None
        s.error_code = code if isinstance(code, str) else None


def run_summaries(records: Iterable[Record]) -> list[RunSummary]:
    """Summarize every run of `records` (any order of runs, lines in seq order), in the order of
    their first line. Workspace-level lines (the nil run) are not a run. Raises `E_LEDGER_CORRUPT`
    (from `Record.payload`) when a line's payload does not match its kind."""
    by_run: dict[str, RunSummary] = {}
    for rec in records:
        if rec.run == WORKSPACE_RUN:
            continue
        s = by_run.get(rec.run)
        if s is None:
            s = by_run[rec.run] = RunSummary(run=rec.run, first_seq=rec.seq, last_seq=rec.seq)
        s.last_seq = rec.seq
        s.lines += 1
        _tally(s, rec)
    return sorted(by_run.values(), key=lambda s: s.first_seq)


# ---- the tree -------------------------------------------------------------------------------


@dataclass
class TreeNode:
    """A run and the runs that came from it (forks, delegations, successors) in seq order."""

    summary: RunSummary
    children: list[TreeNode] = field(default_factory=list)

    def to_data(self) -> dict[str, object]:
        data = self.summary.to_data()
        data["children"] = [c.to_data() for c in self.children]
        return data


def run_tree(summaries: Sequence[RunSummary]) -> list[TreeNode]:
    """Arrange runs by origin (DESIGN.md §7): roots are runs with no origin or whose origin is not
    in `summaries`; children are ordered by their first seq. A cycle (impossible in a ledger written
    by runfold, since a run names only earlier runs) is broken by treating the run as a root."""
    nodes = {s.run: TreeNode(s) for s in summaries}
    roots: list[TreeNode] = []
    for s in sorted(summaries, key=lambda s: s.first_seq):
        origin = s.origin
        node = nodes[s.run]
        if origin is not None and origin in nodes and nodes[origin].summary.first_seq < s.first_seq:
            nodes[origin].children.append(node)
        else:
            roots.append(node)
    return roots


def short_id(run: str, names: Mapping[str, str] | None = None) -> str:
    """How a run is shown: its entry in `names` (from `core.ids.short_run_ids` over the
    workspace's runs: unique prefixes), else its first 8 characters."""
    if names is not None and run in names:
        return names[run]
    return run[:8] if len(run) == 36 else run


def _tree_runs(nodes: Sequence[TreeNode]) -> list[str]:
    runs: list[str] = []
    for node in nodes:
        runs.append(node.summary.run)
        if node.summary.origin is not None:
            runs.append(node.summary.origin)
        runs.extend(_tree_runs(node.children))
    return runs


def status_text(s: RunSummary) -> str:
    """`done`, `limit`, `cancelled (process_died)`, `running`, or `failed (E_CODE)` for a run an
    error froze (the ledger says `cancelled` with `cause: error`, DESIGN.md §4 has no `failed`)."""
    if s.cause == "error":
        return f"failed ({s.error_code or 'error'})"
    return f"{s.status} ({s.cause})" if s.cause else s.status


def cost_text(micros: int | None) -> str:
    """Micro-USD as `$0.001234`, or `unknown`."""
    if micros is None:
        return "unknown"
    return f"${micros // 1_000_000}.{micros % 1_000_000:06d}"


def render_tree(roots: Sequence[TreeNode], *, full_ids: bool = False) -> list[str]:
    """Lines of the tree: each run as `<id> <status> <model> <task head>`, children below with
    box-drawing guides and the edge (`fork@<seq>`, `successor`, `delegation`)."""
    out: list[str] = []
    names = short_run_ids(_tree_runs(roots))

    def label(node: TreeNode, root: bool) -> str:
        s = node.summary
        rid = s.run if full_ids else short_id(s.run, names)
        edge = ""
        if root:
            pass
        elif s.relation == "fork":
            edge = f"fork@{s.forked_at} "
        elif s.relation is not None:
            edge = f"{s.relation} "
        model = s.model or "-"
        text = f"{edge}{rid}  {status_text(s)}  {model}  {s.task_head}".rstrip()
        if root and s.origin is not None:
            origin = s.origin if full_ids else short_id(s.origin, names)
            text += f"  ({s.relation} of {origin}, not in this ledger)"
        return text

    def walk(node: TreeNode, prefix: str, last: bool, root: bool) -> None:
        if root:
            out.append(label(node, True))
            child_prefix = ""
        else:
            out.append(f"{prefix}{'└─ ' if last else '├─ '}{label(node, False)}")
            child_prefix = prefix + ("   " if last else "│  ")
        for i, child in enumerate(node.children):
            walk(child, child_prefix, i == len(node.children) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    return out
