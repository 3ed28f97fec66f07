"""The one place a run is assembled (DESIGN.md §5, §7, §8): from a `RunSpec`, the workspace's
typed config and its shared writer to a running `RunLoop`.

Defaults of config.toml (model, turn ceiling, tool set) are filled in here and only here; then
the provider, the tool registry, the frozen prefix, pricing, fork/continue planning, control
registration and the durability callback are wired, and the loop runs to its end.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runfold.core import fold as fold_api
from runfold.core.address import parse_address
from runfold.core.errors import invalid_args
from runfold.core.payloads import Payload, SessionOpened
from runfold.core.records import Record
from runfold.providers.base import Provider
from runfold.providers.registry import provider_from_spec
from runfold.runtime.compaction import model_window
from runfold.runtime.config import WorkspaceConfig, require_key
from runfold.runtime.delegation import InProcess, Member, Seat, desk_of, with_agent_tools
from runfold.runtime.executor import RunLoop
from runfold.runtime.instructions import read_instructions
from runfold.runtime.loop_io import EndpointLines, RunChannels, RunInputs, RunOptions, RunOutcome
from runfold.runtime.offload import with_paging
from runfold.runtime.prefix import build_prefix, tool_specs
from runfold.runtime.pricing import make_bill
from runfold.runtime.spec import RunHooks, RunSpec, new_run_id
from runfold.store.cas import Cas
from runfold.store.view import LedgerWriter
from runfold.tools import BUILTIN_NAMES, ToolContext, ToolRegistry, builtin_registry
from runfold.tools.builtin import AGENT_NAMES
from runfold.tools.mcp import Endpoints
from runfold.tools.mcp import started as mcp_started

if TYPE_CHECKING:
    from runfold.runtime.control import ControlHub


class RunHost(Protocol):
    """What a run needs of its workspace (`runfold.api.Workspace` is one): its root, run-prefix
    resolution, its lines, and the writer with the control hub shared by its live runs."""

    @property
    def root(self) -> Path: ...

    def resolve_run(self, prefix: str) -> str: ...

    def records(self, run: str | None = None, *, limit: int | None = None) -> list[Record]: ...

    def shared_writer(self) -> AbstractAsyncContextManager[tuple[LedgerWriter, ControlHub | None]]: ...


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A spec's defaults filled in from config.toml: `model` (a SPEC or the caller's provider),
    `max_turns` (None: no ceiling), `builtin_tools` (True, False or names)."""

    model: str | Provider
    max_turns: int | None
    builtin_tools: bool | Sequence[str]


def resolve_defaults(spec: RunSpec, config: WorkspaceConfig) -> Resolved:
    """`spec` with each field left None taken from `[defaults]` (model: else `local`; turns: else
    none; tools: else all built-ins), and with `spec.agents` the agent tools added to the set."""
    defaults = config.defaults
    tools = spec.builtin_tools
    if tools is None:
        tools = list(defaults.tools) if defaults.tools is not None else True
    if spec.agents:
        tools = with_agent_tools(tools, AGENT_NAMES, BUILTIN_NAMES)
    max_turns = spec.max_turns if spec.max_turns is not None else defaults.max_turns
    return Resolved(spec.model if spec.model is not None else config.model, max_turns, tools)


def session_provider(
    model: str | Provider | None, config: WorkspaceConfig, *, command_line: bool = False
) -> tuple[Provider, bool]:
    """The one provider several runs share (a chat, a probe): `model` as given, else
    `[defaults].model`, else `local`; a SPEC is built once (so a script plays on from run to run
    and a local model loads once). Returns it and whether the caller must close it. Raises
    `E_CONFIG_INVALID` for a missing API key (`command_line` only) or a provider not installed."""
    chosen = resolve_defaults(RunSpec("session", model=model), config).model
    if not isinstance(chosen, str):
        return chosen, False
    if command_line:
        require_key(chosen)
    return provider_from_spec(chosen, sections=config.providers, base_dir=Path.cwd()), True


async def drive_run(
    spec: RunSpec, config: WorkspaceConfig, host: RunHost, hooks: RunHooks | None = None
) -> RunOutcome:
    """Run `spec` on `host` to its end and return the outcome (DESIGN.md §5); `hooks` watch it.

    Raises `E_INVALID_ARGS` for a bad SPEC, room or tool, or `continues` naming a run still
    running; `E_CONFIG_INVALID` for a missing API key (`spec.command_line` only) or a provider
    that is not installed; `E_LEDGER_HELD` when another process writes the workspace;
    `E_STORAGE_FATAL` when the ledger cannot be written. Every other failure freezes the run and
    is in `outcome.error`; an error of `hooks.on_durable` is raised once the run is frozen.
    """
    hooks = hooks or RunHooks()
    chosen = resolve_defaults(spec, config)
    if spec.command_line and isinstance(chosen.model, str):
        require_key(chosen.model)
    mother = host.resolve_run(spec.origin) if spec.origin is not None else None
    room = spec.room
    if mother is not None and room in (".", ""):
        first = host.records(mother, limit=1)
        room = (first[0].env.addr or ".") if first else room  # a fork works where its mother did
    room_addr = None if room in (".", "") else room
    if room_addr is not None:
        parse_address(room_addr)
    if isinstance(chosen.model, str):
        provider = provider_from_spec(chosen.model, sections=config.providers, base_dir=Path.cwd())
    else:
        provider = chosen.model
    try:
        if spec.record is not None:
            from runfold.providers.recording import RecordingProvider

            if spec.command_line:
                Path(spec.record).unlink(missing_ok=True)  # a fresh recording per run
            provider = RecordingProvider(provider, spec.record)
        # the MCP servers start before any line is written (one that does not start refuses the
        # run) and stop once it is frozen
        async with mcp_started(config.mcp, host.root, host.root / ".runfold" / "logs") as endpoints:
            return await _drive(spec, chosen, config, host, hooks, provider, mother, room_addr, endpoints)
    finally:
        if isinstance(chosen.model, str):
            await provider.aclose()


def _registry(builtin: bool | Sequence[str], tools: Sequence[Any], mcp_tools: Sequence[Any] = ()) -> ToolRegistry:
    registry = (
        builtin_registry()
        if builtin is True
        else ToolRegistry()
        if builtin is False
        else builtin_registry(list(builtin))
    )
    for t in [*tools, *mcp_tools]:
        registry.add(t)
    return with_paging(registry)


async def _drive(
    spec: RunSpec,
    chosen: Resolved,
    config: WorkspaceConfig,
    host: RunHost,
    hooks: RunHooks,
    provider: Provider,
    mother: str | None,
    room_addr: str | None,
    endpoints: Endpoints,
) -> RunOutcome:
    registry = _registry(chosen.builtin_tools, spec.tools, endpoints.tools)
    run_id = spec.run_id or new_run_id()
    hubs: list[ControlHub | None] = [None]

    def messenger(to: str, text: str) -> dict[str, Any]:
        if hubs[0] is None:
            raise invalid_args("send a message", f"run {to!r}", "no run of this workspace is running here")
        return dict(hubs[0].send_letter(run_id, room_addr, to, text))

    agent = room_addr or "agent"
    seat = Seat(run_id, room_addr, agent, config.agents)
    ctx = ToolContext(
        workspace=host.root, room=room_addr, run_id=run_id, messenger=messenger, sandbox=config.exec, agents=seat
    )
    instructions = read_instructions(host.root, room_addr)
    prefix = build_prefix(
        dialect=provider.dialect,
        model=provider.model,
        tools=tool_specs(registry.tool_table()),
        room=room_addr,
        goal=spec.goal,
        system=spec.system,
        settings=provider.settings,
        instructions=[i.segment() for i in instructions],
    )
    bill = make_bill(config.prices)
    context = config.context
    window = model_window(config.models, provider) if context.compaction or context.reminders_permille else None
    options = RunOptions(
        task=spec.task,
        goal=spec.goal,
        room=room_addr,
        max_turns=chosen.max_turns,
        system=spec.system,
        context=config.context,
        window=window,
        models=config.models,
        approvals={**config.approvals, **(spec.approvals or {})},
        instructions=[i.pin() for i in instructions],
    )
    if spec.dispatched_by is not None:
        options = dataclasses.replace(options, dispatched_by=spec.dispatched_by, who=spec.dispatched_by)
    if spec.delegated is not None:  # the parent's words open the run escaped, never as the person's
        d = spec.delegated
        options = dataclasses.replace(options, opening="inherited", parent=d.parent, dispatched_by=d.by, who=d.by)
    if spec.retry is not None:
        options = dataclasses.replace(options, retry=spec.retry)
    cancel = hooks.cancel if hooks.cancel is not None else asyncio.Event()
    steers = hooks.steers if hooks.steers is not None else asyncio.Queue()
    async with host.shared_writer() as (ledger, hub):
        hubs[0] = hub
        cas = Cas(host.root)
        for i in instructions:
            cas.put(i.raw)  # the bytes the run read, found by their pin
        if room_addr is not None:
            ctx.ensure_room()  # under the writer lock: a refused run creates nothing
        plan = None
        if mother is not None:
            plan, note = _plan(spec, ledger, mother, run_id, provider.model)
            if note is not None:
                options = dataclasses.replace(options, note=note)
        control = hub.register(run_id, cancel, steers) if hub is not None else None
        desk = desk_of(ledger, hub) if hub is not None else None
        if desk is not None:
            dispatcher = desk.dispatcher or InProcess(desk, lambda child: drive_run(child, config, host))
            seat.bind(desk, Member(run_id, room_addr, agent, spec, steers, dispatcher))
        outcome: RunOutcome | None = None
        acknowledge, failed = _durable(run_id, hooks.on_durable)
        if hooks.on_durable is not None:
            ledger.on_durable.append(acknowledge)
        try:
            loop = RunLoop(
                RunInputs(
                    ledger,
                    cas,
                    provider,
                    registry,
                    ctx,
                    prefix,
                    options,
                    run_id=run_id,
                    fork=plan,
                    bill=bill,
                    endpoints=endpoints if spec.session is None else SessionFirst(spec.session, endpoints),
                ),
                RunChannels(
                    on_event=hooks.on_event,
                    on_delta=hooks.on_delta,
                    cancel=cancel,
                    steers=steers,
                    control=control,
                    ask=hooks.ask,
                ),
            )
            outcome = await loop.run()
        finally:
            if desk is not None:
                desk.leave(run_id, outcome)
            if hub is not None:
                hub.unregister(run_id)
            if acknowledge in ledger.on_durable:
                ledger.on_durable.remove(acknowledge)
        if failed:
            raise failed[0]
        assert outcome is not None  # loop.run() returned
        return outcome


class SessionFirst:
    """The lines a run writes at dispatch (`EndpointLines`) when it opens a session: its
    `session_opened` line first, then the tool servers' own lines."""

    def __init__(self, session: SessionOpened, endpoints: EndpointLines) -> None:
        self.pending: list[Payload] = [session]
        self.endpoints = endpoints

    def lines(self, attached: bool) -> Sequence[Payload]:
        first, self.pending = self.pending, []
        return [*first, *self.endpoints.lines(attached)]


def _plan(
    spec: RunSpec, ledger: LedgerWriter, mother: str, run_id: str, model: str
) -> tuple[fold_api.ForkPlan, str | None]:
    """The fork plan of a fork or successor of `mother` (DESIGN.md §7) whose `run_started`
    records `model`, the model it calls, and a successor's note."""
    lines = fold_api.lineage_lines(ledger.run_records, mother)
    at = spec.fork[1] if spec.fork is not None else lines[mother][-1].seq
    note = None
    if spec.continues is not None:
        note = fold_api.successor_note(mother, lines[mother])
        if note is None:
            raise invalid_args(
                "continue a run",
                f"run {mother}",
                f"the run is still running in this process; cancel it (`runfold cancel {mother}`) "
                "and continue it once it is frozen",
            )
    plan = fold_api.plan_fork(
        lines,
        mother,
        at,
        new_run=run_id,
        tail=ledger.next_seq - 1,
        task=spec.task if spec.task.strip() else None,
        goal=spec.goal if spec.goal.strip() else None,
        predecessor=mother if spec.continues is not None else None,
        model=model,
        who=spec.dispatched_by or "person",
    )
    return plan, note


def _durable(
    run_id: str, on_durable: Callable[[Record], None] | None
) -> tuple[Callable[[Sequence[Record]], None], list[Exception]]:
    """The ledger's durability callback for `on_durable` (the run's lines only) and the list
    its first error lands in: a caller's callback must not fail the ledger's flush, so it is not
    called again and its error is raised once the run is frozen (as for `on_event`)."""
    ack = [on_durable] if on_durable is not None else []
    failed: list[Exception] = []

    def acknowledge(batch: Sequence[Record]) -> None:
        for rec in batch:
            if ack and rec.env.run == run_id:
                try:
                    ack[0](rec)
                except Exception as exc:
                    failed.append(exc)
                    ack.clear()

    return acknowledge, failed
