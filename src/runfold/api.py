"""The public Python entry point of runfold: `Workspace` (DESIGN.md §2, §3, §13).

A `Workspace` is one directory with one ledger. It opens the ledger read-only for queries
(records, runs, verify) and hands out the single writer through `with ws.writer() as ledger:`.
The CLI is built on this class only, so everything a command does can be done from Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import os
import tomllib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runfold.core import fold as fold_api
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.kinds import KNOWN_KIND_NAMES
from runfold.core.records import Record
from runfold.providers.base import Provider, StreamCallback
from runfold.runtime.config import WorkspaceConfig, load_config, require_key
from runfold.runtime.control import ControlReceipt
from runfold.runtime.cost import CostReport
from runfold.runtime.executor import RetryPolicy, RunOutcome
from runfold.runtime.replay import ReplayReport
from runfold.runtime.resume import ResumeReport
from runfold.store.bare import BareLedger as _BareLedger
from runfold.store.bare import is_bare_ledger as _is_bare_ledger
from runfold.store.bare import segment_first_seq as _segment_first_seq
from runfold.store.layout import RUNFOLD_DIR, find_workspace
from runfold.store.ledger import Ledger
from runfold.store.verify import Progress, VerifyReport, verify_path
from runfold.tools import Tool

__all__ = [
    "ControlReceipt",
    "CostReport",
    "LinePosition",
    "ReplayReport",
    "ResumeReport",
    "RunOutcome",
    "VerifyReport",
    "Workspace",
    "WorkspaceConfig",
    "require_key",
    "verify",
]


_NEARBY_MAX = 8


@dataclass(frozen=True, slots=True)
class LinePosition:
    """Where a line sits in the chain: `line` is its 1-based line number in the whole ledger,
    `segment` the segment file holding it, `segment_line` its 1-based line number in that file,
    `lines` the number of lines in the ledger."""

    seq: int
    line: int
    segment: Path
    segment_line: int
    lines: int


def verify(path: Path, progress: Progress | None = None) -> VerifyReport:
    """Verify a workspace, a ledger directory or one segment file at `path` (DESIGN.md §3).

    Read-only. Returns the report (lines, seq range, head, bytes, seconds, format versions...).
    Raises `LineRefused` (a `RunfoldError`, code E_LEDGER_CORRUPT or E_LOG_VERSION_UNSUPPORTED)
    at the first bad line, naming its 1-based line number, seq and fault; E_LEDGER_CORRUPT when
    `path` holds no line at all (an empty file or only empty segments: not a ledger);
    `E_PATH_NOT_FOUND` when `path` does not exist.
    """
    return verify_path(path, progress=progress)


class Workspace:
    """One workspace: a directory holding `.runfold/` with one ledger (DESIGN.md §2–§3).

    Open with `Workspace.open()` (discovery like git) or create with `Workspace.init(path)`.
    Readers need no lock; `writer()` takes the one cross-process writer lock.
    """

    def __init__(self, root: Path, *, bare: bool = False) -> None:
        self._root = root
        self._bare = bare
        self._reader: Ledger | _BareLedger | None = None
        self._run_ledger: Ledger | None = None
        self._writer_users = 0
        self._hub: Any = None  # runtime.control.ControlHub while runs are driven (issue 5)
        self.last_resume: ResumeReport | None = None
        """What the resume of the last writer open did (None before any)."""

    # ---- opening -------------------------------------------------------------------------

    @classmethod
    def init(cls, path: Path) -> Workspace:
        """Create `path/.runfold/`, write the `workspace_initialized` line (seq 0) and the
        commented default `.runfold/config.toml` (`runfold.runtime.config.DEFAULT_CONFIG_TOML`).

        `path` is created when missing. Raises `E_INVALID_ARGS` when `path` already holds a
        workspace (nothing is changed) or is a file.
        """
        root = path.resolve()
        if (root / ".runfold").exists():
            raise invalid_args(
                "initialize a workspace",
                str(root),
                f"{root} already holds a workspace (.runfold/); use it as is (`runfold verify -w {root}`) "
                "or pick another directory",
            )
        if root.exists() and not root.is_dir():
            raise invalid_args("initialize a workspace", str(root), "give a directory, not a file")
        root.mkdir(parents=True, exist_ok=True)
        ledger = Ledger.create(root)
        ledger.close()
        from runfold.runtime.config import write_default_config

        write_default_config(root)  # the commented defaults (model, max_turns, tools, prices)
        return cls(root)

    @classmethod
    def open(cls, path: Path | None = None) -> Workspace:
        """Open the workspace at `path`, or found from the current directory upward (honouring
        `RUNFOLD_WORKSPACE`) when `path` is None.

        `path` may also be a ledger directory or one segment file (e.g. a foreign sprawling
        ledger, DESIGN.md §12): such a workspace is read-only (`writer()` refuses) and its lines
        are verified once, on first read, and kept in memory.
        Raises `E_PATH_NOT_FOUND` when no workspace or ledger is found.
        """
        if path is not None and _is_bare_ledger(Path(path)):
            return cls(Path(path).absolute(), bare=True)
        return cls(find_workspace(path))

    @property
    def root(self) -> Path:
        """The workspace directory (the one holding `.runfold/`), or the ledger directory or
        segment file a read-only workspace was opened on."""
        return self._root

    @property
    def read_only(self) -> bool:
        """True when opened on a bare ledger directory or segment file (no `.runfold/`)."""
        return self._bare

    def close(self) -> None:
        """Release the read handle (idempotent)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace({str(self._root)!r})"

    def _ledger(self) -> Ledger | _BareLedger:
        if self._reader is None:
            self._reader = _BareLedger(self._root) if self._bare else Ledger.open(self._root, writer=False)
        return self._reader

    # ---- the writer ----------------------------------------------------------------------

    @contextmanager
    def writer(self, *, resume: bool = True) -> Iterator[Ledger]:
        """The workspace's one writer: `with ws.writer() as ledger: ledger.append([...])`.

        Opening it resumes the ledger first (DESIGN.md §7; `last_resume` says what was closed
        and frozen): pass `resume=False` only to build a history by hand, line by line, across
        several opens. Raises `E_LEDGER_HELD` naming the holder's pid when another process holds
        it. The read view is refreshed when the block ends.
        """
        if self._bare:
            raise invalid_args(
                "write",
                str(self._root),
                "a bare ledger file or directory is read-only; `runfold init` a workspace to write",
            )
        ledger = self._open_writer(resume=resume)
        try:
            yield ledger
        finally:
            ledger.close()
            self.close()

    def _open_writer(self, *, resume: bool = True) -> Ledger:
        """Open the writer and resume the ledger (DESIGN.md §7: on every open by a writer)."""
        from runfold.runtime.control import resume_with_inbox

        ledger = Ledger.open(self._root, writer=True)
        if resume:
            try:
                self.last_resume = resume_with_inbox(self._root, ledger)
            except BaseException:
                ledger.close()
                raise
        return ledger

    def resume(self) -> ResumeReport:
        """Resume the workspace (DESIGN.md §7) with a full scan: close every `tool_called` left
        without a result by a dead process (`E_TOOL_OUTCOME_UNKNOWN`), freeze every run left
        without `run_frozen` (`cancelled`, `cause: process_died`). Idempotent. The caller verifies
        the chain first (`verify()`); `runfold resume` does.

        Returns the report (see `runfold.runtime.resume.ResumeReport`). Raises `E_LEDGER_HELD`
        when another process writes the workspace (it resumed the ledger when it opened it),
        `E_LEDGER_CORRUPT` for a damaged line, `E_INVALID_ARGS` on a read-only workspace.
        """
        from runfold.runtime.control import resume_with_inbox

        if self._bare:
            raise invalid_args(
                "resume", str(self._root), "a bare ledger is read-only; `runfold init` a workspace"
            )
        ledger = self._open_writer(resume=False)
        try:
            report = resume_with_inbox(self._root, ledger, full=True)
        finally:
            ledger.close()
            self.close()
        self.last_resume = report
        return report

    def waiting_runs(self) -> list[fold_api.RunSummary]:
        """Runs that ended without finishing (`cancelled` or `limit`, e.g. frozen by resume) and
        have no successor yet: each is waiting for the person to `continue` it or leave it."""
        summaries = self.run_summaries()
        continued = {s.predecessor for s in summaries if s.predecessor is not None}
        return [s for s in summaries if s.status in ("cancelled", "limit") and s.run not in continued]

    # ---- reading -------------------------------------------------------------------------

    def verify(self, progress: Progress | None = None) -> VerifyReport:
        """Verify this workspace's whole ledger; see `runfold.api.verify` for the errors."""
        return verify(self._root, progress=progress)

    def runs(self) -> list[str]:
        """Every run id in the ledger in order of first appearance, without the nil workspace run."""
        return list(self._ledger().runs())

    def resolve_run(self, prefix: str) -> str:
        """The one run whose id starts with `prefix` (hyphens optional, case-insensitive), like git.

        Raises `E_INVALID_ARGS` when no run matches (nearby: the ids closest to `prefix`) or more
        than one does (nearby: the candidates). The nil workspace run matches only `workspace`
        or its full id.
        """
        wanted = prefix.strip().lower()
        runs = self.runs()
        if wanted in ("workspace", WORKSPACE_RUN):
            return WORKSPACE_RUN
        if not wanted:
            raise invalid_args(
                "find run", repr(prefix), "give the start of a run id, e.g. from `runfold log`"
            )
        key = wanted.replace("-", "")
        matches = [r for r in runs if r != WORKSPACE_RUN and r.replace("-", "").startswith(key)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise invalid_args(
                f"pick one run for the prefix {prefix!r}",
                f"{len(matches)} runs whose ids start with it",
                "give more characters of the run id (`runfold runs` shows the shortest unique ones): "
                + ", ".join(matches[:_NEARBY_MAX]),
                nearby=tuple(matches),
            )
        nearby = _nearby_runs(key, [r for r in runs if r != WORKSPACE_RUN])
        if not nearby:
            hint = "the ledger holds no runs yet"
        elif _shared_prefix(nearby[0], key) == 0:
            hint = "`runfold runs` lists them"
        else:
            hint = "closest: " + ", ".join(nearby)
        raise invalid_args(
            f"find run {prefix!r}",
            str(self._root),
            f"no run id starts with {prefix!r}; {hint}",
            nearby=tuple(nearby),
        )

    def records(
        self,
        run: str | None = None,
        kind: str | Iterable[str] | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Verified lines in seq order, filtered.

        `run`: a run id or unique prefix (see `resolve_run`); `kind`: one kind name or several;
        `since`: only lines with seq ≥ since (past the tail gives []); `limit`: at most this many
        lines (the first ones after the other filters). Raises `E_INVALID_ARGS` for an unknown kind name (nearby: the
        closest names), a negative `since`/`limit`, or a run prefix that is unknown/ambiguous;
        `LineRefused` when a line fails verification while reading.
        """
        kinds = self._kinds(kind)
        if since is not None and since < 0:
            raise invalid_args("filter lines", f"since {since}", "give a seq ≥ 0")
        if limit is not None and limit < 0:
            raise invalid_args("filter lines", f"limit {limit}", "give a limit ≥ 0")
        if limit == 0:
            return []
        ledger = self._ledger()
        source: Iterable[Record]
        if run is not None:
            source = ledger.run_records(self.resolve_run(run))
        elif since is not None and since >= ledger.next_seq:
            source = ()  # past the tail: nothing yet (a filter, not an address)
        else:
            source = ledger.records(since=since or 0)
        out: list[Record] = []
        for record in source:
            if since is not None and record.seq < since:
                continue
            if kinds is not None and record.env.kind not in kinds:
                continue
            out.append(record)
            if limit is not None and len(out) >= limit:
                break
        return out

    def seq_range(self) -> range:
        """The seqs of the lines this ledger holds, `range(first, next)`: first is 0 for a
        workspace (a lone segment file may start later); empty when it holds no line."""
        ledger = self._ledger()
        first = ledger.first_seq if isinstance(ledger, _BareLedger) else 0
        return range(first, max(first, ledger.next_seq))

    def record_at(self, seq: int) -> Record:
        """The verified line at `seq`. Raises `E_INVALID_ARGS` naming the ledger's seq range when
        `seq` is outside it."""
        ledger = self._ledger()
        held = self.seq_range()
        if seq not in held:
            tail = f"seq {held.start}..{held.stop - 1}" if held else "no lines yet"
            raise invalid_args(
                f"read seq {seq}",
                str(self._root),
                f"the ledger holds {tail}; give a seq in that range",
            )
        return ledger.record_at(seq)

    def position(self, seq: int) -> LinePosition:
        """Where the line at `seq` sits: its 1-based line number in the ledger, its segment file
        and its line number in that file. Raises `E_INVALID_ARGS` like `record_at`."""
        self.record_at(seq)
        ledger = self._ledger()
        first = ledger.first_seq if isinstance(ledger, _BareLedger) else 0
        starts = [(_segment_first_seq(p, first), p) for p in ledger.segments()]
        seg_first, segment = max((s for s in starts if s[0] <= seq), key=lambda s: s[0])
        return LinePosition(
            seq=seq,
            line=seq - first + 1,
            segment=segment,
            segment_line=seq - seg_first + 1,
            lines=ledger.next_seq - first,
        )

    def _kinds(self, kind: str | Iterable[str] | None) -> frozenset[str] | None:
        if kind is None:
            return None
        names = [kind] if isinstance(kind, str) else list(kind)
        if not names:
            return None
        for name in names:
            if name not in KNOWN_KIND_NAMES:
                close = difflib.get_close_matches(name, sorted(KNOWN_KIND_NAMES), n=3, cutoff=0.5)
                hint = f"did you mean {', '.join(close)}?" if close else "see `runfold log --help` for kinds"
                raise invalid_args(
                    "filter by kind",
                    repr(name),
                    f"{name!r} is not an event kind; {hint}",
                    nearby=tuple(close),
                )
        return frozenset(names)

    # ---- folds (added by the folds work) ----
    # Conversation, fork, runs/tree and why (DESIGN.md §5–§7, §10); pure folds in core/fold.

    def lineage_lines(self, run: str) -> dict[str, list[Record]]:
        """The lines a fold of `run` reads: the run's and, for a fork, each mother's (recursively
        through `run_forked`), as run id → lines in seq order. `run` is an id or unique prefix.
        Raises `E_INVALID_ARGS` for an unknown/ambiguous run."""
        return _lineage_lines(self._ledger(), self.resolve_run(run))

    def fold(self, run: str, at: int | None = None) -> fold_api.RunFold:
        """The conversation of `run` (id or prefix) through the last safe cut point ≤ `at`
        (default: its last line), DESIGN.md §7. Raises `E_INVALID_ARGS` when `at` is not a line
        of the run's lineage (naming the range and the ledger's tail, never clamped),
        `E_LEDGER_CORRUPT` naming seq and field for a line that cannot be folded."""
        rid = self.resolve_run(run)
        ledger = self._ledger()
        return fold_api.fold_run(_lineage_lines(ledger, rid), rid, at, tail=ledger.next_seq - 1)

    def fork(
        self, run: str, at: int, task: str | None = None, who: str = "person", *, resume: bool = True
    ) -> fold_api.ForkPlan:
        """Fork `run` (id or prefix) at `at` (DESIGN.md §7): under the writer lock, append the new
        run's `run_started` (opening `inherited`, parent = mother) and `run_forked {from, at_seq:
        the cut used}`; the mother's lines are untouched. Returns the plan (new run id, cut, why
        the cut moved). The fork is not run: `arun(fork=(run, at))` forks and runs in one step;
        a fork left open is frozen by the next writer open (resume) and can then be continued.
        `resume` is passed to `writer()`. Raises `E_INVALID_ARGS` for a seq past the tail or
        outside the run's lineage (never clamped), `E_LEDGER_HELD` when another process holds
        the writer."""
        import os

        from runfold.core.ids import run_id_v7
        from runfold.store.ledger import now_ms

        rid = self.resolve_run(run)
        with self.writer(resume=resume) as ledger:
            lines = _lineage_lines(ledger, rid)
            new_run = run_id_v7(now_ms(), os.urandom(10))
            plan = fold_api.plan_fork(
                lines, rid, at, new_run=new_run, tail=ledger.next_seq - 1, task=task, who=who
            )
            ledger.append(list(plan.drafts))
        return plan

    def raw_prefix(self, run: str, at: int) -> bytes:
        """The ledger's lines 0..=`at`, byte-identical with their newlines, for a seq `at` of
        `run`'s lineage (DESIGN.md §7). Raises `E_INVALID_ARGS` when `at` is not such a seq."""
        rid = self.resolve_run(run)
        ledger = self._ledger()
        lin = fold_api.lineage(_lineage_lines(ledger, rid), rid)
        if at not in lin.seqs():
            raise fold_api.not_in_lineage(lin, at, ledger.next_seq - 1)
        return fold_api.raw_prefix([ledger.record_at(s) for s in range(at + 1)], at)

    def run_summaries(self) -> list[fold_api.RunSummary]:
        """One summary per run (status, model, turns, tokens, cost, lineage), by first seq."""
        return fold_api.run_summaries(self._ledger().records())

    def run_tree(self) -> list[fold_api.TreeNode]:
        """The runs arranged by fork, delegation and successor lineage (roots first)."""
        return fold_api.run_tree(self.run_summaries())

    def why(self, run: str, at: int | None = None, since: int | None = None) -> fold_api.WhyReport:
        """The window of `run` at the last safe cut point ≤ `at`, attributed per part, region and
        cause (DESIGN.md §10), and the changes after `since`. Raises like `fold`."""
        rid = self.resolve_run(run)
        ledger = self._ledger()
        return fold_api.why(_lineage_lines(ledger, rid), rid, at, since=since, tail=ledger.next_seq - 1)

    def request_at(self, run: str, at: int | None = None, dialect: str | None = None) -> ConversationView:
        """The conversation of `run` at the last safe cut point ≤ `at` rendered as the request
        body of `dialect` (`anthropic`, `openai-chat`, `openai-responses`; None: the run's own
        dialect from its frozen prefix, else `anthropic`), with the frozen prefix from the CAS when
        the run recorded one, and the validator's verdict for every dialect. Raises like `fold`,
        `E_INVALID_ARGS` for an unknown dialect, `E_PATH_NOT_FOUND` for a missing prefix object."""
        from runfold.core.locator import CasLocator, parse_locator
        from runfold.core.render import DIALECTS, RequestSpec, render
        from runfold.core.render.spec import check_dialect
        from runfold.core.validate import validate
        from runfold.runtime.prefix import Prefix
        from runfold.store.cas import Cas

        fold = self.fold(run, at)
        prefix: Prefix | None = None
        locator = fold.prefix.prefix if fold.prefix is not None else None
        if locator:
            loc = parse_locator(locator)
            if isinstance(loc, CasLocator):
                cas = Cas(self._root if not self._bare else self._root.parent)
                prefix = Prefix.load(
                    cas.get_locator(loc), f"{locator} (prompt_assembled at seq {fold.prefix_seq})"
                )
        chosen = check_dialect(dialect or (prefix.dialect if prefix is not None else "anthropic"))
        messages = fold.messages

        def body_for(d: str) -> dict[str, Any]:
            spec = prefix.spec(messages) if prefix is not None else RequestSpec(model="-", messages=messages)
            return render(d, spec)

        verdicts = {d: validate(d, body_for(d)) for d in DIALECTS}
        return ConversationView(fold, chosen, body_for(chosen), verdicts, prefix is not None)

    # ---- runs: execute, replay, cost (issue 4) ----
    # The executor lives in runfold.runtime; these methods wire a workspace's writer, CAS,
    # config and tools into it.

    def settings(self) -> WorkspaceConfig:
        """The checked `.runfold/config.toml` (defaults, prices, provider settings; all defaults
        when the file is absent). Raises `E_CONFIG_INVALID` naming the file and the key."""
        return load_config(self._root) if not self._bare else WorkspaceConfig()

    def config(self) -> dict[str, Any]:
        """The parsed `.runfold/config.toml` (`{}` when absent). Raises `E_CONFIG_INVALID`
        naming the file and position when it is not valid TOML."""
        return _read_config(self._root)

    async def arun(
        self,
        task: str,
        *,
        goal: str = "",
        model: str | Provider | None = None,
        room: str = ".",
        max_turns: int | None = None,
        tools: Sequence[Callable[..., Any] | Tool] = (),
        builtin_tools: bool | Sequence[str] | None = None,
        on_event: Callable[[Record], None] | None = None,
        on_delta: StreamCallback | None = None,
        cancel: asyncio.Event | None = None,
        system: str | None = None,
        retry: RetryPolicy | None = None,
        fork: tuple[str, int] | None = None,
        record: str | Path | None = None,
        steers: asyncio.Queue[Any] | None = None,
        continues: str | None = None,
        on_durable: Callable[[Record], None] | None = None,
    ) -> RunOutcome:
        """Run an agent on `task` to its end and return the outcome (DESIGN.md §5).

        - `model`: a SPEC string (`local`, `anthropic:<model>`, `openai:<model>`,
          `openai-responses:<model>`, `openai-compat:<model>@<url>`, `script:<file>[#dialect]`) or a
          `Provider`; None takes `[defaults].model` of config.toml, else `local`;
        - `room`: the run's address and write domain (`.` = the workspace root; a fork or a
          successor works in its mother's room unless another is given);
        - `max_turns`: the turn ceiling (None: `[defaults].max_turns`, else no ceiling);
        - `tools`: the user's own tools (typed Python functions, sync or async, or `Tool`s);
          `builtin_tools`: True (all six), False (none) or a list of built-in names (None:
          `[defaults].tools`, else all);
        - `on_event(record)`: every line of the run as it is written; `on_delta(kind, text)`:
          streamed text for live views; `cancel`: set it to cancel at the next safe point;
        - `system`: replaces the default system text; `retry`: the back-off policy;
        - `fork`: `(run, at_seq)` — start as a fork of that run (id or prefix) cut at the last
          safe point ≤ `at_seq` and continue it (DESIGN.md §7); `task` then replaces the
          mother's task when not empty;
        - `record`: append every answer of the provider (faults included) to this JSONL file as
          a scripted-model session with a header of the dialect, model and call settings, so
          `model="script:<file>"` replays the run to the same request hashes
          (`runfold.providers.recording`);
        - `steers`: put the person's words on this queue while the run goes; each is written as
          `steer_received` at the next safe point and reaches the model with the next request
          that may carry it (held while a request or a wave is in flight, DESIGN.md §6); items
          are strings (the person's words) or `runfold.runtime.control.Steer`s;
        - `continues`: a frozen run (id or prefix) to continue (DESIGN.md §7): the new run is its
          successor (`predecessor`), inherits its conversation through its tail (a fork at its
          last line) and starts with a `runtime:` note saying why it continues; `task` then
          replaces the old run's task when not empty. A run left running by a dead process is
          frozen by the resume of this writer open first. Any model may continue any run;
        - `on_durable(record)`: every line of the run once it is durable (after the fsync of its
          batch, in seq order) — the acknowledgement `runfold run --events` prints.

        While it runs, the run is reachable from other processes (`runfold steer`/`cancel`,
        `send_control`) through the workspace's control inbox; `builtin_tools=[..., "send_message"]`
        lets the agent send letters to other runs of this process.

        Many runs may be awaited concurrently on one Workspace: they share one writer. Raises
        `E_INVALID_ARGS` for a bad SPEC, room or tool, or for `continues` naming a run that is
        still running or together with `fork`; `E_LEDGER_HELD` when another process
        writes the workspace; `E_CONFIG_INVALID` for a bad config; `E_STORAGE_FATAL` when the
        ledger cannot be written. Every other failure freezes the run and is in `outcome.error`.
        """
        from runfold.core.address import parse_address
        from runfold.core.ids import run_id_v7
        from runfold.providers.registry import DEFAULT_SPEC, provider_from_spec
        from runfold.runtime import RunLoop, RunOptions, build_prefix, make_bill, parse_prices, tool_specs
        from runfold.store.cas import Cas
        from runfold.store.ledger import now_ms
        from runfold.tools import ToolContext, ToolRegistry, builtin_registry

        if self._bare:
            raise invalid_args("run an agent", str(self._root), "`runfold init` a workspace to run agents in")
        cfg = self.config()
        defaults = cfg.get("defaults", {}) if isinstance(cfg.get("defaults", {}), dict) else {}
        if continues is not None and fork is not None:
            raise invalid_args("continue a run", "fork", "give either `continues` or `fork`, not both")
        origin = continues if continues is not None else fork[0] if fork is not None else None
        if origin is not None and room in (".", ""):
            first = self.records(run=self.resolve_run(origin))[:1]
            room = (first[0].env.addr or ".") if first else room  # a fork works where its mother did
        room_addr: str | None = None if room in (".", "") else room
        if room_addr is not None:
            parse_address(room_addr)
        if max_turns is None and isinstance(defaults.get("max_turns"), int):
            max_turns = int(defaults["max_turns"])
        if max_turns is not None and max_turns < 1:
            raise invalid_args("run an agent", f"max_turns={max_turns}", "give a turn ceiling of at least 1")
        owns_provider = not (model is not None and not isinstance(model, str))
        provider: Provider
        if model is None or isinstance(model, str):
            spec = model or str(defaults.get("model") or DEFAULT_SPEC)
            provider = provider_from_spec(spec, workspace_config=cfg, base_dir=Path.cwd())
        else:
            provider = model
        if record is not None:
            from runfold.providers.recording import RecordingProvider

            provider = RecordingProvider(provider, record)
        if builtin_tools is None:
            names = defaults.get("tools")
            builtin_tools = list(names) if isinstance(names, list) else True
        registry = (
            builtin_registry()
            if builtin_tools is True
            else ToolRegistry()
            if builtin_tools is False
            else builtin_registry(list(builtin_tools))
        )
        for t in tools:
            registry.add(t)
        run_id = run_id_v7(now_ms(), os.urandom(10))

        def messenger(to: str, text: str) -> dict[str, Any]:
            if self._hub is None:
                raise invalid_args(
                    "send a message", f"run {to!r}", "no run of this workspace is running here"
                )
            return dict(self._hub.send_letter(run_id, room_addr, to, text))

        ctx = ToolContext(workspace=self._root, room=room_addr, run_id=run_id, messenger=messenger)
        if room_addr is not None:
            ctx.ensure_room()
        prefix = build_prefix(
            dialect=provider.dialect,
            model=provider.model,
            tools=tool_specs(registry.tool_table()),
            room=room_addr,
            goal=goal,
            system=system,
            max_tokens=int(getattr(provider, "max_tokens", 4096) or 4096),
            thinking=getattr(provider, "thinking", None),
            temperature_milli=getattr(provider, "temperature_milli", None),
            stream=bool(getattr(provider, "stream", False)),
        )
        prices = cfg.get("prices")
        bill = make_bill(parse_prices(prices) if isinstance(prices, dict) else None)
        options = RunOptions(task=task, goal=goal, room=room_addr, max_turns=max_turns, system=system)
        if retry is not None:
            options = dataclasses.replace(options, retry=retry)
        cancel = cancel if cancel is not None else asyncio.Event()
        steers = steers if steers is not None else asyncio.Queue()
        try:
            async with self._shared_writer() as ledger:
                plan = None
                if origin is not None:
                    mother = self.resolve_run(origin)
                    lines = _lineage_lines(ledger, mother)
                    at = fork[1] if fork is not None else lines[mother][-1].seq
                    if continues is not None:
                        note = fold_api.successor_note(mother, lines[mother])
                        if note is None:
                            raise invalid_args(
                                "continue a run",
                                f"run {mother}",
                                f"the run is still running in this process; cancel it (`runfold cancel {mother}`) "
                                "and continue it once it is frozen",
                            )
                        options = dataclasses.replace(options, note=note)
                    plan = fold_api.plan_fork(
                        lines,
                        mother,
                        at,
                        new_run=run_id,
                        tail=ledger.next_seq - 1,
                        task=task if task.strip() else None,
                        goal=goal if goal.strip() else None,
                        predecessor=mother if continues is not None else None,
                    )
                control = self._hub.register(run_id, cancel, steers) if self._hub is not None else None
                ack: list[Callable[[Record], None]] = [on_durable] if on_durable is not None else []
                failed: list[Exception] = []

                def acknowledge(batch: Sequence[Record]) -> None:
                    # a caller's callback must not fail the ledger's flush: stop calling it and
                    # raise its error once the run is frozen (as for on_event)
                    for rec in batch:
                        if ack and rec.env.run == run_id:
                            try:
                                ack[0](rec)
                            except Exception as exc:
                                failed.append(exc)
                                ack.clear()

                if ack:
                    ledger.on_durable.append(acknowledge)
                try:
                    loop = RunLoop(
                        ledger,
                        Cas(self._root),
                        provider,
                        registry,
                        ctx,
                        prefix,
                        options,
                        run_id=run_id,
                        on_event=on_event,
                        on_delta=on_delta,
                        cancel=cancel,
                        bill=bill,
                        fork=plan,
                        steers=steers,
                        control=control,
                    )
                    outcome = await loop.run()
                finally:
                    if self._hub is not None:
                        self._hub.unregister(run_id)
                    if acknowledge in ledger.on_durable:
                        ledger.on_durable.remove(acknowledge)
                if failed:
                    raise failed[0]
                return outcome
        finally:
            if owns_provider:
                await provider.aclose()

    async def run_events(self, task: str, **kwargs: Any) -> AsyncIterator[Record | RunOutcome]:
        """`arun` as an async iterator: yields every line of the run as it is written, then the
        `RunOutcome` last. Same arguments and errors as `arun` (an `on_event` given is called
        too). Leaving the loop early cancels the run at its next safe point (frozen cancelled)."""
        queue: asyncio.Queue[Record | None] = asyncio.Queue()
        user_cb = kwargs.pop("on_event", None)
        cancel = kwargs.pop("cancel", None) or asyncio.Event()

        def on_event(rec: Record) -> None:
            queue.put_nowait(rec)
            if user_cb is not None:
                user_cb(rec)

        runner = asyncio.ensure_future(self.arun(task, on_event=on_event, cancel=cancel, **kwargs))
        runner.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                yield item
            yield runner.result()
        finally:
            if not runner.done():
                cancel.set()
                with contextlib.suppress(Exception):
                    await runner

    def run(self, task: str, **kwargs: Any) -> RunOutcome:
        """`arun` from synchronous code (`asyncio.run`); same arguments, same outcome and errors.
        Ctrl-C cancels the run at the next safe point and freezes it as cancelled."""
        return asyncio.run(self.arun(task, **kwargs))

    async def acontinue(self, run: str, task: str = "", **kwargs: Any) -> RunOutcome:
        """Continue the frozen `run` (id or prefix) with a successor (DESIGN.md §7): `arun(task,
        continues=run, **kwargs)`; `task` empty keeps the run's own task. Same errors as `arun`."""
        return await self.arun(task, continues=run, **kwargs)

    def continue_run(self, run: str, task: str = "", **kwargs: Any) -> RunOutcome:
        """`acontinue` from synchronous code (`asyncio.run`)."""
        return asyncio.run(self.acontinue(run, task, **kwargs))

    @asynccontextmanager
    async def _shared_writer(self) -> AsyncIterator[Ledger]:
        """The one writer, shared by every run this Workspace object drives concurrently."""
        if self._writer_users == 0:
            from runfold.runtime.control import ControlHub

            self._run_ledger = self._open_writer()
            hub = ControlHub(self._root, self._run_ledger)
            try:
                hub.start()  # owns the workspace: steers and cancels from other processes
            except BaseException:
                self._run_ledger.close()
                self._run_ledger = None
                raise
            self._hub = hub
        self._writer_users += 1
        try:
            assert self._run_ledger is not None
            yield self._run_ledger
        finally:
            self._writer_users -= 1
            if self._writer_users == 0 and self._run_ledger is not None:
                if self._hub is not None:
                    await self._hub.stop()
                    self._hub = None
                self._run_ledger.close()
                self._run_ledger = None
                self.close()

    def send_control(
        self,
        run: str,
        type: str,
        text: str = "",
        *,
        source: str = "user",
        wait_s: float = 10.0,
        until_recorded: bool = False,
    ) -> ControlReceipt:
        """Steer (`type="steer"`, with `text`) or cancel (`type="cancel"`) the live run `run`
        (id or prefix) from any process, through the control inbox (issue 5, DESIGN.md §5–§6).
        `source` is the `steer_received.source` (`user`, or a letter built with
        `runfold.core.speakers.Letter(...).recorded()`).

        Waits up to `wait_s` s for the owner's ack; with `until_recorded`, until the run recorded
        it at a safe point (`receipt.seq`). Returns the receipt (`state` `accepted`, `recorded`,
        or `queued` when no ack came in time: the file stays in the inbox). Raises
        `E_INVALID_ARGS` without writing anything when no process runs this workspace, the run is
        frozen or unknown, the text is empty or the source unreadable; `E_INVALID_ARGS` with the
        owner's reason when it refused; `E_STORAGE_FATAL` when the request cannot be written.
        """
        from runfold.runtime.control import send_request

        if type not in ("steer", "cancel"):
            raise invalid_args("send a control request", repr(type), "use `steer` or `cancel`")
        if self._bare:
            raise invalid_args(
                "send a control request", str(self._root), "a bare ledger has no runs to control"
            )
        rid = self.resolve_run(run)
        return send_request(
            self._root,
            self._ledger(),
            rid,
            "steer" if type == "steer" else "cancel",
            text=text,
            source=source,
            wait_s=wait_s,
            until_recorded=until_recorded,
        )

    def replay(self, run: str) -> ReplayReport:
        """Rebuild the exact body of every `model_called` of `run` (id or prefix) from the
        ledger and the CAS and check each against its recorded hash (DESIGN.md §7). Never calls a
        model, never writes. Raises `E_INVALID_ARGS` for an unknown run, `E_LEDGER_CORRUPT` for
        a line the fold cannot place or a damaged prefix object, `E_PATH_NOT_FOUND` when a
        prefix object is missing from the CAS."""
        from runfold.runtime import replay_run
        from runfold.store.cas import Cas

        rid = self.resolve_run(run)
        ledger = self._ledger()
        root = self._root if not self._bare else self._root.parent
        cas = Cas(root)
        return replay_run(_lineage_lines(ledger, rid), rid, cas.get_locator)

    def cost(self, run: str | None = None) -> CostReport:
        """Tokens and micro-USD by run, model and tool, with prompt-cache savings, for one run
        (id or prefix) or the whole workspace. Unknown prices are None, never 0. Raises
        `E_INVALID_ARGS` for an unknown run, `E_CONFIG_INVALID` for a bad price table."""
        from runfold.runtime import cost_report, parse_prices, price_of

        prices_cfg = self.config().get("prices") if not self._bare else None
        overrides = parse_prices(prices_cfg) if isinstance(prices_cfg, dict) else None
        records = self.records(run=run) if run is not None else self.records()
        return cost_report(records, lambda model: price_of(model, overrides))


@dataclass(frozen=True)
class ConversationView:
    """`Workspace.request_at`: the fold, the dialect rendered, the request body (key order as
    sent), the validator's violations per dialect (`[]`: accepted), and whether the run's frozen
    prefix (system segments, tools) was found and rendered (else the body holds messages only)."""

    fold: fold_api.RunFold
    dialect: str
    body: dict[str, Any]
    verdicts: dict[str, list[Any]]
    with_prefix: bool


def _lineage_lines(ledger: Ledger | _BareLedger, run: str) -> dict[str, list[Record]]:
    """`run`'s lines and each mother's, following `run_forked` (used by the folds section)."""
    out: dict[str, list[Record]] = {}
    todo: str | None = run
    while todo is not None and todo not in out:
        lines = ledger.run_records(todo)
        out[todo] = lines
        point = fold_api.fork_point(lines)
        todo = point[0] if point is not None else None
    return out


def _shared_prefix(run: str, key: str) -> int:
    """How many leading characters of `run` (hyphens dropped) equal those of `key`."""
    n = 0
    for a, b in zip(run.replace("-", ""), key, strict=False):
        if a != b:
            break
        n += 1
    return n


def _nearby_runs(key: str, runs: list[str]) -> list[str]:
    """Run ids sharing the longest common prefix with `key`, most similar first."""

    def shared(run: str) -> int:
        return _shared_prefix(run, key)

    ranked = sorted(runs, key=lambda r: (-shared(r), r))
    best = shared(ranked[0]) if ranked else 0
    return [r for r in ranked if shared(r) == best][:_NEARBY_MAX] if ranked else []


def _read_config(root: Path) -> dict[str, Any]:
    """`<root>/.runfold/config.toml` parsed (`{}` when absent); `E_CONFIG_INVALID` naming the
    file and the TOML error otherwise."""
    path = root / RUNFOLD_DIR / "config.toml"
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
        from runfold.runtime.config import parse_config

        parse_config(data, str(path))  # E_CONFIG_INVALID naming the key
        return data
    except FileNotFoundError:
        return {}
    except NotADirectoryError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise RunfoldError(
            ErrorCode.CONFIG_INVALID,
            f"read the workspace config ({exc})",
            str(path),
            "fix the TOML syntax at the position named, or delete the file to use the defaults",
        ) from None
