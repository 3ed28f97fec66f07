"""The runs fold: one summary per run (status, model, turns, tokens, cost, lineage) and the tree
of forks, delegations and successors (DESIGN.md §2, §4, §7).

`RunTally` is the one tally of a run's turns, tool calls, tokens and cost: the run loop feeds it
each line it writes (`RunOutcome`), `run_summaries` feeds it each line of the ledger (`runfold
runs`), and the cost report merges the tallies by run, model and tool (`runfold cost`), so all
three agree. The fold reads record-only lines too, so it is independent of the conversation fold.
Unknown token counts or costs stay unknown (None), never 0.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from runfold.core.canonical import encode_json
from runfold.core.compaction import is_compaction_call
from runfold.core.ids import WORKSPACE_RUN, short_run_ids
from runfold.core.kinds import Kind
from runfold.core.payloads import ModelCalled, ModelReturned, RunForked, RunFrozen, RunStarted, ToolResult
from runfold.core.records import Record

Status = Literal["running", "done", "limit", "cancelled", "not_started", "died"]
"""A run's status as the runs fold reads it: `done`, `limit`, `cancelled` from its `run_frozen`;
`not_started`, a fork that was never run (`resume.not_started`); `running`, no `run_frozen`
yet; `died`, no `run_frozen` and no live process holds the writer lock (`owner_gone`): the
process running it died and no writer has resumed the workspace since (DESIGN.md §7)."""
Relation = Literal["fork", "delegation", "successor", "import"]

TOKEN_KEYS: tuple[str, ...] = ("input", "output", "cache_read", "cache_write")
"""The `model_returned.usage` counters summed per run (tokens)."""

UNKNOWN_MODEL = "unknown"
"""The model a reply is counted under when no `model_called` of its run precedes it."""


class Pricing(Protocol):
    """A price table as the fold uses it: micro-USD for one reply of `model` with `tokens` (a
    mapping of each of TOKEN_KEYS to a count), None when the model's price is unknown."""

    def cost(self, model: str, tokens: Mapping[str, int]) -> int | None: ...

    def cache_savings(self, model: str, tokens: Mapping[str, int]) -> int | None:
        """What the reply's cache reads saved against the input price (micro-USD)."""
        ...


def tokens_of(usage: object) -> dict[str, int] | None:
    """`model_returned.usage` as a count per TOKEN_KEYS (missing or non-integer counts are 0);
    None when the reply recorded no usage."""
    if not isinstance(usage, dict):
        return None
    out: dict[str, int] = {}
    for key in TOKEN_KEYS:
        v = usage.get(key, 0)
        out[key] = v if isinstance(v, int) and not isinstance(v, bool) else 0
    return out


def reply_cost(
    model: str, tokens: Mapping[str, int] | None, billed: int | None, prices: Pricing | None
) -> tuple[int | None, int | None]:
    """The rule that prices one reply (DESIGN.md §3): `(cost, cache savings)` in micro-USD. The
    cost is the recorded `billed_usd_micros` when the line has one, else the price table's cost
    of its tokens; a reply that recorded no usage costs 0 on a free model (every token kind
    priced 0, e.g. the scripted and local models), else its cost is unknown; either figure is
    None when no price is known."""
    if prices is None:
        return billed, None
    if tokens is None:
        if billed is None and prices.cost(model, dict.fromkeys(TOKEN_KEYS, 1)) == 0:
            return 0, 0
        return billed, None
    return (billed if billed is not None else prices.cost(model, tokens)), prices.cache_savings(model, tokens)


def _plus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


@dataclass
class Tally:
    """Totals of some replies: `replies`, `tokens` (a sum per TOKEN_KEYS; a reply with no usage
    adds 0 and clears `tokens_known`), `cost_usd_micros` and `cache_savings_usd_micros` (None once
    one reply's is unknown), `models` (first-seen order) and `first_seq` (the first reply's seq)."""

    replies: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    tokens_known: bool = True
    cost_usd_micros: int | None = 0
    cache_savings_usd_micros: int | None = 0
    models: list[str] = field(default_factory=list)
    first_seq: int = -1

    def add(self, other: Tally) -> None:
        """Add `other`'s replies to these totals."""
        if other.replies == 0:
            return
        if self.replies == 0:
            self.first_seq = other.first_seq
        else:
            self.first_seq = min(self.first_seq, other.first_seq)
        self.replies += other.replies
        for key in TOKEN_KEYS:
            self.tokens[key] += other.tokens[key]
        self.tokens_known = self.tokens_known and other.tokens_known
        self.cost_usd_micros = _plus(self.cost_usd_micros, other.cost_usd_micros)
        self.cache_savings_usd_micros = _plus(self.cache_savings_usd_micros, other.cache_savings_usd_micros)
        self.models.extend(m for m in other.models if m not in self.models)

    def reply(
        self, seq: int, model: str, tokens: Mapping[str, int] | None, cost: int | None, saved: int | None
    ) -> None:
        """Count the reply at `seq` of `model` (`tokens` None: it recorded no usage)."""
        counted = dict(tokens) if tokens is not None else dict.fromkeys(TOKEN_KEYS, 0)
        self.add(Tally(1, counted, tokens is not None, cost, saved, [model], seq))


@dataclass
class ToolTally:
    """One tool: `calls` (results), `errors`, total `took_us` (µs), `result_bytes` (bytes of the
    compact JSON results/errors the model read) and `first_seq` (its first result's seq)."""

    name: str
    calls: int = 0
    errors: int = 0
    took_us: int = 0
    result_bytes: int = 0
    first_seq: int = -1

    def add(self, other: ToolTally) -> None:
        if self.calls == 0 or (other.calls and other.first_seq < self.first_seq):
            self.first_seq = other.first_seq
        self.calls += other.calls
        self.errors += other.errors
        self.took_us += other.took_us
        self.result_bytes += other.result_bytes


@dataclass
class RunTally:
    """The one tally of a run's lines (DESIGN.md §4): `turns` (`model_returned` lines but a
    summary call's, counted in `compactions`; its usage and cost count like any reply),
    `attempts` (`model_called`), `tool_calls` (`tool_called`), `asked` (the tool calls its replies
    asked for), the replies' totals (`replies`, and `by_model`), and `tools` (by name).

    Feed it the run's own lines in seq order (`feed`); a reply is counted under the model of the
    `model_called` before it and priced by `reply_cost` with `prices` (None: recorded bills only).
    """

    prices: Pricing | None = None
    turns: int = 0
    attempts: int = 0
    tool_calls: int = 0
    asked: int = 0
    replies: Tally = field(default_factory=Tally)
    by_model: dict[str, Tally] = field(default_factory=dict)
    tools: dict[str, ToolTally] = field(default_factory=dict)
    called_model: str | None = None
    compactions: int = 0
    """Summary calls (`model_called` marked `purpose: compaction`) that got a reply."""
    compacting: bool = False

    @property
    def tokens(self) -> dict[str, int] | None:
        """The token sums, None when a reply recorded no usage."""
        return dict(self.replies.tokens) if self.replies.tokens_known else None

    def feed(self, rec: Record) -> None:
        """Count one line (unknown kinds are skipped). Raises `E_LEDGER_CORRUPT` (from
        `Record.typed`) when its payload does not match its kind."""
        if not rec.known:
            return
        kind = rec.kind
        if kind is Kind.MODEL_CALLED:
            called = rec.typed(ModelCalled)
            self.attempts += 1
            self.called_model = called.model
            self.compacting = is_compaction_call(called)
        elif kind is Kind.MODEL_RETURNED:
            r = rec.typed(ModelReturned)
            if self.compacting:
                self.compactions += 1  # a summary call: billed and counted, not a turn (§10)
            else:
                self.turns += 1
            self.asked += r.calls
            model = self.called_model or UNKNOWN_MODEL
            tokens = tokens_of(r.usage)
            cost, saved = reply_cost(model, tokens, r.billed_usd_micros, self.prices)
            self.replies.reply(rec.seq, model, tokens, cost, saved)
            self.by_model.setdefault(model, Tally()).reply(rec.seq, model, tokens, cost, saved)
        elif kind is Kind.TOOL_CALLED:
            self.tool_calls += 1
        elif kind is Kind.TOOL_RESULT:
            res = rec.typed(ToolResult)
            body = res.error if res.error is not None else (res.result or {})
            self.tools.setdefault(res.name, ToolTally(res.name)).add(
                ToolTally(
                    res.name, 1, int(res.error is not None), res.took_us or 0, len(encode_json(body)), rec.seq
                )
            )


def first_line(text: str, width: int) -> str:
    """The first line of `text` (stripped), at most `width` characters; an ellipsis marks a cut."""
    head = text.strip().split("\n", 1)[0]
    return head if len(head) <= width else head[: width - 1] + "…"


@dataclass
class RunSummary:
    """One run as `runfold runs` shows it.

    `turns`, `calls`, `tokens` and `cost_usd_micros` come from its `tally`: `tokens` maps each of
    TOKEN_KEYS to a sum in tokens, or is None when a reply of the run has no `usage`;
    `cost_usd_micros` is the replies' cost in micro-USD (`reply_cost`: the recorded bill, else the
    price table's), or None when one is unknown (never shown as zero). A run with no reply has
    tokens and cost 0.
    `relation` says how `origin` (the run it came from) produced it: `fork` (it has `run_forked`),
    `successor` (`predecessor` set), `delegation` (`parent` set, no `run_forked`); or `import`
    for a run imported from another tool's session file (`imported` set, no origin run).
    """

    run: str
    first_seq: int
    last_seq: int
    started_ms: int | None = None
    ended_ms: int | None = None
    """The writer's clock at its `run_frozen` (UTC ms), None while it has none."""
    status: Status = "running"
    cause: str | None = None
    model: str | None = None
    tally: RunTally = field(default_factory=RunTally)
    """The run's turns, tool calls, tokens and cost (see `RunTally`)."""
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
    imported: Mapping[str, object] | None = None
    """Where an imported run came from (`run_started.imported`: `format`, `source`, `session`),
    else None."""

    @property
    def turns(self) -> int:
        """Model calls that got a reply (`model_returned` lines)."""
        return self.tally.turns

    @property
    def calls(self) -> int:
        """Tool calls the run's replies asked for."""
        return self.tally.asked

    @property
    def tokens(self) -> dict[str, int] | None:
        """A sum per TOKEN_KEYS, None when a reply of the run has no `usage`."""
        return self.tally.tokens

    @property
    def cost_usd_micros(self) -> int | None:
        """The replies' cost in micro-USD (`reply_cost`), None when one's is unknown."""
        return self.tally.replies.cost_usd_micros

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
        if self.imported is not None:
            return "import"
        return None

    @property
    def imported_from(self) -> str:
        """An imported run's source as one phrase (`claude-code session main of FILE`), else ""."""
        if self.imported is None:
            return ""
        got = self.imported
        session = f" session {got['session']}" if got.get("session") else ""
        return f"{got.get('format', '?')}{session} of {got.get('source', '?')}"

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
            "imported": dict(self.imported) if self.imported is not None else None,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "started_ms": self.started_ms,
            "ended_ms": self.ended_ms,
            "lines": self.lines,
        }


def handed_down(first: Record) -> bool:
    """Whether the run that `first` (its `run_started`) opens was handed its task by the runtime
    or by another run's agent — a handoff probe's question fork, a delegated child, an imported
    subagent (a child run of an imported session) — rather than started, forked or continued by
    the person. A command that defaults to the latest run (`Workspace.latest_run`) passes such
    runs over."""
    if first.kind is not Kind.RUN_STARTED:
        return False
    started = first.typed(RunStarted)
    if started.parent is None:
        return False
    return started.dispatched_by not in (None, "person") or started.imported is not None


def _summarize(s: RunSummary, rec: Record) -> None:
    s.tally.feed(rec)
    if not rec.known:
        return
    kind = rec.kind
    if kind is Kind.RUN_STARTED:
        p = rec.typed(RunStarted)
        s.task, s.goal, s.addr = p.task, p.goal, rec.env.addr
        s.who = p.dispatched_by or rec.env.who
        s.parent, s.predecessor = p.parent, p.predecessor
        s.imported = dict(p.imported) if p.imported is not None else None
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
    elif kind is Kind.RUN_FROZEN:
        frozen = rec.typed(RunFrozen)
        s.ended_ms = rec.env.t
        completion = frozen.completion
        s.status = completion if completion in ("done", "limit", "cancelled") else "cancelled"  # type: ignore[assignment]
        s.cause = frozen.cause
        code = frozen.error.get("code") if frozen.error is not None else None
        s.error_code = code if isinstance(code, str) else None


class RunSummaries:
    """`run_summaries` fed line by line: `feed` each line in seq order (several calls may each
    feed the lines written since the last), `summaries()` at any point. It keeps one
    `RunSummary` per run, never a line, so a viewer can follow a growing ledger."""

    def __init__(self, prices: Pricing | None = None) -> None:
        self.prices = prices
        """The price table replies with no recorded bill are priced with (None: unknown)."""
        self._by_run: dict[str, RunSummary] = {}
        self.next_seq = 0
        """The seq after the last line fed (0 before any)."""

    def feed(self, rec: Record) -> None:
        """Add one line (its seq must follow the last one fed). Raises like `run_summaries`."""
        self.next_seq = rec.seq + 1
        if rec.run == WORKSPACE_RUN:
            return
        s = self._by_run.get(rec.run)
        if s is None:
            s = self._by_run[rec.run] = RunSummary(
                run=rec.run, first_seq=rec.seq, last_seq=rec.seq, tally=RunTally(self.prices)
            )
        s.last_seq = rec.seq
        s.lines += 1
        _summarize(s, rec)

    def summaries(self) -> list[RunSummary]:
        """The runs so far, by first seq, as copies (changing one changes nothing kept here)."""
        out: list[RunSummary] = []
        for kept in sorted(self._by_run.values(), key=lambda s: s.first_seq):
            s = replace(kept)
            if s.status == "running" and s.lines == 2 and s.forked_from is not None:
                s.status = "not_started"  # run_started and run_forked only (resume.not_started)
            out.append(s)
        return out


def run_summaries(records: Iterable[Record], prices: Pricing | None = None) -> list[RunSummary]:
    """Summarize every run of `records` (any order of runs, lines in seq order), in the order of
    their first line; replies with no recorded bill are priced with `prices` (None: unknown).
    Workspace-level lines (the nil run) are not a run. Raises `E_LEDGER_CORRUPT` (from
    `Record.payload`) when a line's payload does not match its kind."""
    acc = RunSummaries(prices)
    for rec in records:
        acc.feed(rec)
    return acc.summaries()


def owner_gone(summaries: Sequence[RunSummary]) -> None:
    """Mark every `running` run of `summaries` as `died`: call it when no live process holds
    the workspace's writer lock, so no run can still be running (DESIGN.md §7: the next writer
    freezes them as `cancelled`, `process_died`)."""
    for s in summaries:
        if s.status == "running":
            s.status = "died"


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
    """`done`, `limit`, `cancelled (process_died)`, `running`, `not started`, `died, not yet
    resumed`, or `failed (E_CODE)` for a run an error froze (the ledger says `cancelled` with
    `cause: error`, DESIGN.md §4 has no `failed`)."""
    if s.cause == "error":
        return f"failed ({s.error_code or 'error'})"
    if s.status == "not_started":
        return "not started"
    if s.status == "died":
        return "died, not yet resumed"
    return f"{s.status} ({s.cause})" if s.cause else s.status


def render_tree(
    roots: Sequence[TreeNode],
    *,
    full_ids: bool = False,
    names: Mapping[str, str] | None = None,
    held: Collection[str] = (),
) -> list[str]:
    """Lines of the tree: each run as `<id> <status> <model> <task head>`, children below with
    box-drawing guides and the edge (`fork@<seq>`, `successor`, `delegation`). Runs are named by
    `names` (`short_run_ids` over every run of the ledger: a part of the tree must not name a run
    by a prefix other runs share), else by prefixes unique among the tree's runs. A root that
    came from another run names it, saying it is not in this ledger unless `held` (the ledger's
    run ids, for one run's subtree) holds it."""
    out: list[str] = []
    if names is None:
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
            text += f"  ({s.relation} of {origin})" if s.origin in held else f"  ({s.relation} of {origin}, not in this ledger)"
        elif root and s.relation == "import":
            text += f"  (imported: {s.imported_from})"
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
