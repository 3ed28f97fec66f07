"""The part of `runfold.api.Workspace` that writes the ledger and drives runs: resume, fork,
the shared writer, `arun` and its sync/iterator forms, control requests, and the views that need
the CAS and the typed config: replay, the context window (`why`, `context`) and cost
(DESIGN.md §5, §7, §10).

`Workspace` inherits it; each method hands the workspace's writer and typed config to the
runtime, imported when first called (`runfold.runtime.assemble` assembles every run), so opening
and reading a workspace never loads the runtime or the providers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runfold.core import fold as fold_api
from runfold.core.errors import invalid_args
from runfold.core.records import Record
from runfold.store.backend import open_ledger
from runfold.store.cas import Cas
from runfold.store.view import LedgerWriter

if TYPE_CHECKING:
    import asyncio

    from runfold.core.probe import Probe
    from runfold.providers.base import Provider, StreamCallback
    from runfold.runtime.approvals import Ask
    from runfold.runtime.config import WorkspaceConfig
    from runfold.runtime.control import ControlHub, ControlReceipt
    from runfold.runtime.cost import CostReport
    from runfold.runtime.executor import RetryPolicy, RunOutcome
    from runfold.runtime.replay import ReplayReport, SentRequest
    from runfold.runtime.resume import ResumeReport
    from runfold.runtime.spec import RunHooks, RunSpec
    from runfold.runtime.window_view import WindowView
    from runfold.store.bare import BareLedger
    from runfold.tools import Tool
    from runfold.tools.mcp import Listing as McpListing


class WorkspaceRuns:
    """Writing and running, for `Workspace` (see the module docstring)."""

    _root: Path
    _bare: bool
    _hub: ControlHub | None
    _run_ledger: LedgerWriter | None
    _writer_users: int
    last_resume: ResumeReport | None

    if TYPE_CHECKING:  # what Workspace defines

        @property
        def root(self) -> Path: ...
        def resolve_run(self, prefix: str) -> str: ...
        def records(
            self,
            run: str | None = None,
            kind: str | Iterable[str] | None = None,
            since: int | None = None,
            limit: int | None = None,
        ) -> list[Record]: ...
        def close(self) -> None: ...
        def run_summaries(self) -> list[fold_api.RunSummary]: ...
        def _ledger(self) -> LedgerWriter | BareLedger: ...
        def writer(self, *, resume: bool = True) -> AbstractContextManager[LedgerWriter]: ...

    def _writable(self, action: str, recovery: str) -> None:
        """Raise `E_INVALID_ARGS` for `action` on a read-only (bare ledger) workspace."""
        if self._bare:
            raise invalid_args(action, str(self._root), recovery)

    def _open_writer(self, *, resume: bool = True) -> LedgerWriter:
        """Open the writer and resume the ledger (DESIGN.md §7: on every open by a writer)."""
        from runfold.runtime.control import resume_with_inbox

        ledger = open_ledger(self._root, writer=True)
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

        self._writable("resume", "a bare ledger is read-only; `runfold init` a workspace")
        ledger = self._open_writer(resume=False)
        try:
            report = resume_with_inbox(self._root, ledger, full=True)
        finally:
            ledger.close()
            self.close()
        self.last_resume = report
        return report

    def fork(
        self, run: str, at: int, task: str | None = None, who: str = "person", *, resume: bool = True
    ) -> fold_api.ForkPlan:
        """Fork `run` (id or prefix) at `at` (DESIGN.md §7): under the writer lock, append the new
        run's `run_started` (opening `inherited`, parent = mother) and `run_forked {from, at_seq:
        the cut used}`; the mother's lines are untouched. Returns the plan (new run id, cut, why
        the cut moved). The fork is not run: `arun(fork=(run, at))` forks and runs in one step;
        a fork never run reads `not_started` (resume leaves it as it is) and can be continued.
        `resume` is passed to `writer()`. Raises `E_INVALID_ARGS` for a seq past the tail or
        outside the run's lineage (never clamped), `E_LEDGER_HELD` when another process holds
        the writer, `E_STORAGE_FATAL` naming the locator when an offloaded result it inherits is
        missing from the CAS (nothing is written)."""
        rid = self.resolve_run(run)
        with self.writer(resume=resume) as ledger:
            plan = self.plan_fork_on(ledger, rid, at, task, who)
            ledger.append(list(plan.drafts))
        return plan

    def plan_fork_on(
        self, ledger: LedgerWriter, run: str, at: int, task: str | None = None, who: str = "person"
    ) -> fold_api.ForkPlan:
        """The plan of a fork of the full run id `run` at `at` on the open writer `ledger`, its
        drafts not written (`fork` appends them; an owner that hosts runs commits them with its
        other lines). Raises as `fork` does, writing nothing."""
        from runfold.runtime.offload import check_lineage
        from runfold.runtime.spec import new_run_id

        lines = fold_api.lineage_lines(ledger.run_records, run)
        plan = fold_api.plan_fork(
            lines, run, at, new_run=new_run_id(), tail=ledger.next_seq - 1, task=task, who=who
        )
        check_lineage(plan.inherited.lineage.records(), Cas(self._root))  # offloaded results present
        return plan

    def waiting_runs(self) -> list[fold_api.RunSummary]:
        """Runs that ended without finishing (`cancelled` or `limit`, e.g. frozen by resume), and
        forks never run (`not_started`), that have no successor yet: each is waiting for the
        person to `continue` it or leave it."""
        summaries = self.run_summaries()
        continued = {s.predecessor for s in summaries if s.predecessor is not None}
        waiting = ("cancelled", "limit", "not_started")
        return [s for s in summaries if s.status in waiting and s.run not in continued]

    def settings(self) -> WorkspaceConfig:
        """The checked `.runfold/config.toml` (defaults, prices, typed provider sections; all
        defaults when the file is absent or the workspace is a bare ledger). Raises
        `E_CONFIG_INVALID` naming the file and the TOML position or the key."""
        from runfold.runtime.config import WorkspaceConfig, load_config

        return load_config(self._root) if not self._bare else WorkspaceConfig()

    def mcp_servers(self) -> list[McpListing]:
        """The `[mcp.<name>]` servers of config.toml, each started, asked for its tools and
        stopped (`runfold.tools.mcp.Listing`: the tools under their tool-table names, or the
        error that kept the server from starting). Raises `E_CONFIG_INVALID` for a bad config."""
        import asyncio

        from runfold.tools.mcp import list_servers

        servers = self.settings().mcp
        return asyncio.run(list_servers(servers, self._root, self._root / ".runfold" / "logs"))

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
        approvals: Mapping[str, str] | None = None,
        ask: Ask | None = None,
    ) -> RunOutcome:
        """Run an agent on `task` to its end and return the outcome (DESIGN.md §5).

        What the run is: `goal`, `model`, `room`, `max_turns`, `tools`, `builtin_tools`,
        `system`, `retry`, `record`, `fork`, `continues`, `approvals`, as the fields of
        `runfold.runtime.spec.RunSpec` say (None: the `[defaults]` of config.toml); how it is
        watched: `on_event`, `on_delta`, `cancel`, `steers`, `on_durable`, `ask`, as `RunHooks`
        says. A call waiting for approval (policy `ask`) without an `ask` prompt waits for
        `send_control(run, "approve"|"deny", call=...)` from any process.
        While it runs, the run is reachable from other processes (`runfold steer`/`cancel`,
        `send_control`) through the workspace's control inbox; `builtin_tools=[...,
        "send_message"]` lets the agent send letters to other runs of this process. Many runs
        may be awaited concurrently on one Workspace: they share one writer.

        Raises `E_INVALID_ARGS` for a bad SPEC, room or tool, or for `continues` naming a run
        that is still running or together with `fork`; `E_LEDGER_HELD` when another process
        writes the workspace; `E_CONFIG_INVALID` for a bad config; `E_STORAGE_FATAL` when the
        ledger cannot be written. Every other failure freezes the run and is in `outcome.error`.
        """
        from runfold.runtime.spec import RunHooks, RunSpec

        spec = RunSpec(
            task, goal, model, room, max_turns, tools, builtin_tools, system, retry, record, fork, continues,
            approvals=approvals,
        )
        return await self.arun_spec(spec, RunHooks(on_event, on_delta, cancel, steers, on_durable, ask))

    async def arun_spec(self, spec: RunSpec, hooks: RunHooks | None = None) -> RunOutcome:
        """Run `spec` (`runfold.runtime.spec.RunSpec`) watched by `hooks`: `arun` with the run
        already described. Same outcome and errors."""
        from runfold.runtime.assemble import drive_run

        self._writable("run an agent", "`runfold init` a workspace to run agents in")
        return await drive_run(spec, self.settings(), self, hooks)

    async def run_events(self, task: str, **kwargs: Any) -> AsyncIterator[Record | RunOutcome]:
        """`arun` as an async iterator: yields every line of the run as it is written, then the
        `RunOutcome` last. Same arguments and errors as `arun` (an `on_event` given is called
        too). Leaving the loop early cancels the run at its next safe point (frozen cancelled)."""
        import asyncio

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

    def run(
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
        approvals: Mapping[str, str] | None = None,
        ask: Ask | None = None,
    ) -> RunOutcome:
        """`arun` from synchronous code (`asyncio.run`); the same arguments, outcome and errors
        (a wrong type of argument is `E_INVALID_ARGS` naming it). Ctrl-C cancels the run at the
        next safe point and freezes it as cancelled."""
        import asyncio

        from runfold.runtime.spec import RunHooks, RunSpec

        spec = RunSpec(
            task, goal, model, room, max_turns, tools, builtin_tools, system, retry, record, fork, continues,
            approvals=approvals,
        )
        return asyncio.run(self.arun_spec(spec, RunHooks(on_event, on_delta, cancel, steers, on_durable, ask)))

    async def acontinue(
        self,
        run: str,
        task: str = "",
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
        record: str | Path | None = None,
        steers: asyncio.Queue[Any] | None = None,
        on_durable: Callable[[Record], None] | None = None,
    ) -> RunOutcome:
        """Continue the frozen `run` (id or prefix) with a successor (DESIGN.md §7): `arun` with
        `continues=run` and the same keyword arguments; `task` empty keeps the run's own task.
        Same outcome and errors as `arun`."""
        from runfold.runtime.spec import RunHooks, RunSpec

        spec = RunSpec(
            task, goal, model, room, max_turns, tools, builtin_tools, system, retry, record, continues=run
        )
        return await self.arun_spec(spec, RunHooks(on_event, on_delta, cancel, steers, on_durable))

    def continue_run(
        self,
        run: str,
        task: str = "",
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
        record: str | Path | None = None,
        steers: asyncio.Queue[Any] | None = None,
        on_durable: Callable[[Record], None] | None = None,
    ) -> RunOutcome:
        """`acontinue` from synchronous code (`asyncio.run`); the same arguments, outcome and errors."""
        import asyncio

        from runfold.runtime.spec import RunHooks, RunSpec

        spec = RunSpec(
            task, goal, model, room, max_turns, tools, builtin_tools, system, retry, record, continues=run
        )
        return asyncio.run(self.arun_spec(spec, RunHooks(on_event, on_delta, cancel, steers, on_durable)))

    async def aprobe(self, probe: Path | Probe, successor: str, *, model: str | Provider | None = None) -> Record:
        """The handoff probe (DESIGN.md §4 `eval_run`): ask `probe` (a `Probe`, or the path of
        its JSON file, see `runfold.core.probe.parse_probe`) of the last state of `successor`'s
        predecessor and of `successor`'s own — each question a one-turn fork without tools, run
        by `model` (default as for `arun`; built once for every question) — and append the
        `eval_run` line (answers, kept, lost) to `successor`; returns that line. Raises
        `E_INVALID_ARGS` for a bad probe file or a run that continues none, and a run's errors."""
        from runfold.core.probe import Probe, parse_probe
        from runfold.runtime.assemble import session_provider
        from runfold.runtime.probe import probe_handoff

        self._writable("probe a handoff", "`runfold init` a workspace to run agents in")
        if not isinstance(probe, Probe):
            try:
                raw = Path(probe).read_bytes()
            except OSError as exc:
                raise invalid_args("read the probe", str(probe), f"give the path of a probe JSON file ({exc.strerror})") from None
            probe = parse_probe(raw, str(probe))
        provider, owned = session_provider(model, self.settings())
        try:
            return await probe_handoff(self, probe, successor, provider)
        finally:
            if owned:
                await provider.aclose()

    @asynccontextmanager
    async def shared_writer(self) -> AsyncIterator[tuple[LedgerWriter, ControlHub | None]]:
        """The one writer and the control hub, shared by every run this Workspace object drives
        concurrently: opened (with resume, DESIGN.md §7) for the first, closed after the last."""
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
            yield self._run_ledger, self._hub
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
        call: str = "",
        wait_s: float = 10.0,
        until_recorded: bool = False,
    ) -> ControlReceipt:
        """Steer (`type="steer"`, with `text`) or cancel (`type="cancel"`) the live run `run`
        (id or prefix) from any process, through the control inbox (DESIGN.md §5–§6); or decide
        the call `call` (its `tool_use_id`) that waits for approval: `type="approve"`, or
        `type="deny"` with the reason in `text`.
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

        if type not in ("steer", "cancel", "approve", "deny"):
            raise invalid_args("send a control request", repr(type), "use `steer`, `cancel`, `approve` or `deny`")
        self._writable("send a control request", "a bare ledger has no runs to control")
        rid = self.resolve_run(run)
        return send_request(
            self._root,
            self._ledger(),
            rid,
            type,  # type: ignore[arg-type]
            text=text,
            source=source,
            call=call,
            wait_s=wait_s,
            until_recorded=until_recorded,
        )

    def replay(self, run: str) -> ReplayReport:
        """Rebuild the exact body of every `model_called` of `run` (id or prefix) from the
        ledger and the CAS and check each against its recorded hash (DESIGN.md §7). Never calls a
        model, never writes. Raises `E_INVALID_ARGS` for an unknown run, `E_LEDGER_CORRUPT` for
        a line the fold cannot place or a damaged prefix object, `E_PATH_NOT_FOUND` when a
        prefix object is missing from the CAS."""
        from runfold.runtime.replay import replay_run

        rid = self.resolve_run(run)
        ledger = self._ledger()
        root = self._root if not self._bare else self._root.parent
        cas = Cas(root)
        return replay_run(fold_api.lineage_lines(ledger.run_records, rid), rid, cas.get_locator)

    def sent_request(self, run: str, seq: int) -> SentRequest:
        """The exact body the `model_called` at `seq` of `run` (id or prefix) sent, rebuilt from
        the ledger and the CAS as `replay` rebuilds it, with the recorded and rebuilt BLAKE3
        (`runfold.runtime.replay.SentRequest`). Never calls a model, never writes. Raises
        `E_INVALID_ARGS` when `seq` is no `model_called` of the run with a recorded hash and a
        stored prefix (nearby: the run's model calls), and like `replay` otherwise."""
        from runfold.core.kinds import Kind
        from runfold.runtime.replay import sent_request

        rid = self.resolve_run(run)
        lines = fold_api.lineage_lines(self._ledger().run_records, rid)
        root = self._root if not self._bare else self._root.parent
        found = sent_request(lines, rid, seq, Cas(root).get_locator)
        if found is None:
            calls = [r.seq for r in lines.get(rid, ()) if r.known and r.kind is Kind.MODEL_CALLED]
            shown = ", ".join(map(str, calls[:12])) + (" …" if len(calls) > 12 else "")
            raise invalid_args(
                f"rebuild the request sent at seq {seq}",
                f"run {rid}",
                f"seq {seq} is not a model call of this run that can be rebuilt; its model calls are at seq {shown}"
                if calls
                else "the run made no model call",
                nearby=tuple(str(c) for c in calls[:12]),
            )
        return found

    def context(self, run: str, at: int | None = None) -> WindowView:
        """The window of `run` (id or prefix) at the last safe cut point ≤ `at`, region by region
        as the model saw it: the system segments and the tool table from the frozen prefix in the
        CAS, the conversation block by block with its seq and cause, tokens per region against
        the budgets of `[context]` and the model's window of `[models]` (DESIGN.md §10). Raises
        like `fold`, and `E_CONFIG_INVALID` for a bad config.toml."""
        return self._window(run, at, None)

    def why(self, run: str, at: int | None = None, since: int | None = None) -> fold_api.WhyReport:
        """The window of `run` at the last safe cut point ≤ `at`, attributed per part, region and
        cause, with budgets and token counts (see `context`), and the changes after `since`
        (DESIGN.md §10). Raises like `context`."""
        return self._window(run, at, since).report

    def _window(self, run: str, at: int | None, since: int | None) -> WindowView:
        from runfold.runtime.window_view import window_view

        rid = self.resolve_run(run)
        ledger = self._ledger()
        lines = fold_api.lineage_lines(ledger.run_records, rid)
        cas = Cas(self._root if not self._bare else self._root.parent)
        return window_view(lines, rid, at, cas=cas, config=self.settings(), since=since, tail=ledger.next_seq - 1)

    def cost(self, run: str | None = None) -> CostReport:
        """Tokens and micro-USD by run, model and tool, with prompt-cache savings, for one run
        (id or prefix) or the whole workspace. Unknown prices are None, never 0. Raises
        `E_INVALID_ARGS` for an unknown run, `E_CONFIG_INVALID` for a bad price table."""
        from runfold.runtime.cost import cost_report, workspace_pricing

        pricing = workspace_pricing(self.settings().prices)
        records = self.records(run=run) if run is not None else self.records()
        return cost_report(records, pricing.price_of)
