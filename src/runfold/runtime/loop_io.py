"""What a run is given, what it reports to, and how it ended (DESIGN.md §5).

`RunOptions` says what the run is asked to do; `RunInputs` holds what the run loop needs (the
ledger writer, the model, the tools, the frozen prefix); `RunChannels` links it to its caller
(events out, cancel and steers in); `Stop` is why the turn loop ended, `RunOutcome` the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from runfold.core.errors import RunfoldError
from runfold.core.fold import ForkPlan
from runfold.core.fold.runs import RunTally
from runfold.core.payloads import Evidence, Payload, SkillRef
from runfold.core.records import Record
from runfold.core.secrets import Redactor
from runfold.core.tokens import ModelLimits
from runfold.core.window import ContextSettings
from runfold.providers.base import Provider, StreamCallback, Usage
from runfold.runtime.approvals import Ask
from runfold.runtime.control import RunControl, Steer
from runfold.runtime.cost import usage_of
from runfold.runtime.prefix import Prefix
from runfold.runtime.retry import RetryPolicy
from runfold.store.cas import Cas
from runfold.store.view import LedgerWriter
from runfold.tools import ToolContext, ToolRegistry

FAILED: Final = "failed"
"""`RunOutcome.completion` of a run frozen by an error (the ledger says `cancelled`, cause `error`)."""

Bill = Callable[[str, Usage], "int | None"]
"""`bill(model, usage) -> micro-USD or None when the price is unknown`."""


@dataclass(frozen=True)
class ModelWindow:
    """The window a run's model has: `window` (tokens), the `output` reserve (tokens) and
    `source`: where the window came from (`provider settings`, `models table`, or `default` —
    `DEFAULT_WINDOW`)."""

    window: int
    output: int
    source: str


@dataclass(frozen=True)
class RunOptions:
    """What a run is asked to do and how.

    - `task`: the person's words (the opening, `with_person`); `goal`: recorded and put in the
      `run` system segment;
    - `room`: the run's address (its write domain), None for the workspace root;
    - `max_turns`: the turn ceiling (model calls that got a reply), None for no ceiling;
    - `system`: replaces the default `workspace` system segment text;
    - `who`: the author of `run_started` (the person); `agent`: the author of the run's own
      lines (default: the room, or `agent`);
    - `retry`: the back-off policy; `tool_timeout_s`: ceiling per tool call in seconds;
    - `note`: the runtime's word written as the run's first `steer_received` (source `runtime`),
      e.g. why a successor continues its predecessor (DESIGN.md §7);
    - `context`: `[context]` of config.toml: when a tool result is offloaded, and what the turn
      boundary compacts and reminds by (DESIGN.md §10);
    - `window`: the model's window and output reserve (`runtime.compaction.ModelWindow`); None:
      the window is not managed (no compaction, no reminders).
    - `models`: the `[models]` table; the context tools' region budgets take the model's window
      from it when `window` is None (`runtime.regions`);
    - `approvals`: the approval policy per tool class (`core.approval`; a class not named is
      `allow`), recorded in `run_started.policy` when one is not `allow`;
    - `instructions`: the pins of the instruction files the prefix holds (`run_started.instructions`);
    - `opening`, `parent`, `dispatched_by`: what `run_started` records of where the task came
      from: `with_person` (the person's words), or for a run another run delegated, `inherited`
      (the words rendered escaped inside `<task>`, never as the person's) with the delegating
      run and its agent identity.
    """

    task: str
    goal: str = ""
    room: str | None = None
    max_turns: int | None = None
    system: str | None = None
    who: str = "person"
    agent: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    note: str | None = None
    context: ContextSettings = field(default_factory=ContextSettings)
    window: ModelWindow | None = None
    models: Mapping[str, ModelLimits] = field(default_factory=dict)
    approvals: Mapping[str, str] = field(default_factory=dict)
    instructions: Sequence[SkillRef] = ()
    opening: str = "with_person"
    parent: str | None = None
    dispatched_by: str | None = None


class EndpointLines(Protocol):
    """The tool servers of a run as ledger lines (`runfold.tools.mcp.Endpoints` is one):
    `lines(attached=True)` once at dispatch (`endpoint_attached`, then any `endpoint_lost`), then
    `lines(attached=False)` for the servers lost since the last call."""

    def lines(self, attached: bool) -> Sequence[Payload]: ...


class NoEndpoints:
    """A run without tool servers: no lines."""

    def lines(self, attached: bool) -> Sequence[Payload]:
        return ()


@dataclass(frozen=True)
class RunInputs:
    """What one run needs.

    `ledger`: the workspace's writer (shared by concurrent runs); `cas`: where the frozen prefix
    is stored; `provider`: the model; `registry`/`ctx`: the tools and their context; `prefix`:
    the frozen prefix (see `runtime.prefix.build_prefix`); `options`: what the run is asked;
    `run_id`: its id (None: a new one; a fork takes `fork.new_run`); `fork`: the plan when the run
    starts as a fork or successor (DESIGN.md §7); `bill` prices a reply (None: unpriced);
    `redactor` replaces secrets in every line the run writes (None: the secrets of this process's
    environment and the provider's credentials, `runtime.redaction.run_redactor`); `endpoints`:
    the run's tool servers, whose attachment and loss the run records.
    """

    ledger: LedgerWriter
    cas: Cas
    provider: Provider
    registry: ToolRegistry
    ctx: ToolContext
    prefix: Prefix
    options: RunOptions
    run_id: str | None = None
    fork: ForkPlan | None = None
    bill: Bill | None = None
    redactor: Redactor | None = None
    endpoints: EndpointLines = field(default_factory=NoEndpoints)


@dataclass(frozen=True)
class RunChannels:
    """What one run reports to and listens on (all optional).

    `on_event(record)` is called for every line as it is staged (final bytes; durable at the next
    flush); `on_delta` receives the streamed reply; `cancel` is checked at every safe point and
    aborts an in-flight model call, back-off or tool wave; `steers` (a queue of the person's
    words, or `Steer`s carrying a source and a control signal id) is drained at every safe point;
    `control` links the run to the workspace's control hub (signal ids of cancels, acks once
    recorded, DESIGN.md §5); `ask` is the terminal's approval prompt
    (`runtime.approvals.Ask`; None: headless, decisions come through the control inbox).
    """

    on_event: Callable[[Record], None] | None = None
    on_delta: StreamCallback | None = None
    cancel: asyncio.Event | None = None
    steers: asyncio.Queue[str | Steer] | None = None
    control: RunControl | None = None
    ask: Ask | None = None


@dataclass(frozen=True)
class Stop:
    """Why the run ends: `completion` (`done`, `limit`, `cancelled` or `failed`), a one-line
    `reason`, the `evidence` `done` cites, and the `error` that froze a failed run."""

    completion: str
    reason: str
    evidence: Sequence[Evidence] = ()
    error: RunfoldError | None = None

    @classmethod
    def failed(cls, error: RunfoldError) -> Stop:
        """The stop of a run an error froze."""
        return cls(FAILED, error.display(), error=error)


@dataclass
class RunOutcome:
    """How a run ended.

    - `run_id`; `completion`: `done`, `limit`, `cancelled` or `failed` (an error froze it; the
      ledger line says `cancelled` with `cause: error` and the error);
    - `error`: the error that froze it (None otherwise); `reason`: one line saying why it ended;
    - `tally`: the runs fold's tally of the lines the run wrote (`core.fold.runs.RunTally`, what
      `runfold runs` and `runfold cost` read too), whence `turns` (model calls that got a
      reply), `attempts` (every `model_called` line), `tool_calls` (`tool_called` lines),
      `usage` (token totals) and `billed_usd_micros` (total cost in micro-USD, None when a price
      was unknown — never 0 for unknown);
    - `evidence`: the lines `done` cites; `frozen_seq`: the seq of `run_frozen`;
    - `lines`, `ledger_bytes`: lines and bytes (newlines included) the run wrote;
    - `folder_feeds`: lines fed to the run fold: `inherited_lines` (a fork's lineage, folded once)
      plus `lines` — the run is never re-folded per turn.
    """

    run_id: str
    completion: str
    error: RunfoldError | None = None
    reason: str = ""
    tally: RunTally = field(default_factory=RunTally)
    evidence: list[Evidence] = field(default_factory=list)
    frozen_seq: int = -1
    lines: int = 0
    ledger_bytes: int = 0
    folder_feeds: int = 0
    inherited_lines: int = 0

    @property
    def ok(self) -> bool:
        return self.completion == "done"

    @property
    def turns(self) -> int:
        return self.tally.turns

    @property
    def attempts(self) -> int:
        return self.tally.attempts

    @property
    def tool_calls(self) -> int:
        return self.tally.tool_calls

    @property
    def usage(self) -> Usage:
        return usage_of(self.tally.replies.tokens)

    @property
    def billed_usd_micros(self) -> int | None:
        return self.tally.replies.cost_usd_micros
