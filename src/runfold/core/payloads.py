"""Typed payloads for every event kind (DESIGN.md §4), with a default for every field.

`PAYLOADS` maps each `Kind` to its class; a test enumerates it so that a new kind forces a
payload decision. Constructing a payload checks its JSON (floats are refused naming the path).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from runfold.core.canonical import Json, check_data
from runfold.core.errors import invalid_args
from runfold.core.kinds import Kind
from runfold.core.struct import Struct


@dataclasses.dataclass(kw_only=True)
class Payload(Struct):
    """A line's `data`. Subclasses set KIND."""

    KIND: ClassVar[Kind]

    def __post_init__(self) -> None:
        check_data(self.to_data())


# ---- small nested objects -------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class SkillRef(Struct):
    name: str = ""
    hash: str = ""


@dataclasses.dataclass(kw_only=True)
class Segment(Struct):
    """One system segment of the frozen prefix: its slot name, BLAKE3 of its text, length in bytes."""

    slot: str = ""
    hash: str = ""
    len: int = 0


@dataclasses.dataclass(kw_only=True)
class BytesRef(Struct):
    """A BLAKE3 hash of some bytes and their length (a request body, a tool table)."""

    hash: str = ""
    bytes: int = 0


@dataclasses.dataclass(kw_only=True)
class Evidence(Struct):
    kind: str = ""
    seq: int = 0


@dataclasses.dataclass(kw_only=True)
class ForkPoint(Struct):
    WIRE: ClassVar[dict[str, str]] = {}
    run: str = ""
    at_seq: int = 0


# ---- core kinds ------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class WorkspaceInitialized(Payload):
    KIND = Kind.WORKSPACE_INITIALIZED
    format: int = 2


@dataclasses.dataclass(kw_only=True)
class RunStarted(Payload):
    KIND = Kind.RUN_STARTED
    OPTIONAL = frozenset(
        {"job", "parent", "predecessor", "dispatched_by", "policy", "opening", "effort", "model", "imported", "instructions"}
    )
    task: str = ""
    goal: str = ""
    job: str | None = None
    parent: str | None = None
    predecessor: str | None = None
    skills: list[SkillRef] = dataclasses.field(default_factory=list)
    dispatched_by: str | None = None
    policy: dict[str, Json] | None = None
    opening: str | None = None
    effort: str | None = None
    model: str | None = None
    imported: dict[str, Json] | None = None
    """Provenance of a run imported from another tool's session file: `{format, source, session}`."""
    instructions: list[SkillRef] | None = None
    """The instruction files (`AGENTS.md`, `CLAUDE.md`) the run read into its prefix: `{name,
    hash}` each, the bytes in the content store; omitted when there were none."""


OPENINGS = ("from_job", "inherited", "with_person")


@dataclasses.dataclass(kw_only=True)
class RunForked(Payload):
    KIND = Kind.RUN_FORKED
    WIRE: ClassVar[dict[str, str]] = {"from_": "from"}
    from_: str = ""
    at_seq: int = 0


@dataclasses.dataclass(kw_only=True)
class SessionOpened(Payload):
    KIND = Kind.SESSION_OPENED
    OPTIONAL = frozenset({"from_"})
    WIRE: ClassVar[dict[str, str]] = {"from_": "from"}
    from_: ForkPoint | None = None
    carried: bool = False


@dataclasses.dataclass(kw_only=True)
class PromptAssembled(Payload):
    """The frozen prefix: system segments, the tool table, the cache breakpoints sent, and the
    CAS locator of the whole prefix document (so replay works after sources changed)."""

    KIND = Kind.PROMPT_ASSEMBLED
    OPTIONAL = frozenset({"prefix"})
    segments: list[Segment] = dataclasses.field(default_factory=list)
    tools: BytesRef = dataclasses.field(default_factory=BytesRef)
    breakpoints: list[str] = dataclasses.field(default_factory=list)
    prefix: str | None = None


@dataclasses.dataclass(kw_only=True)
class PromptShapeCompared(Payload):
    """What moved since the previous request; also where the conversation is marked sent (§6)."""

    KIND = Kind.PROMPT_SHAPE_COMPARED
    system_moved: list[str] = dataclasses.field(default_factory=list)
    tools_moved: bool = False
    conversation: str = "first"
    messages: int = 0
    request_bytes: int = 0


CONVERSATION_SHAPES = ("first", "extended", "reopened", "rewritten")


@dataclasses.dataclass(kw_only=True)
class ModelCalled(Payload):
    KIND = Kind.MODEL_CALLED
    OPTIONAL = frozenset({"attempt", "dialect"})
    model: str = ""
    request: BytesRef = dataclasses.field(default_factory=BytesRef)
    dialect: str | None = None
    attempt: int | None = None


@dataclasses.dataclass(kw_only=True)
class ModelReturned(Payload):
    """A reply: `message` is the internal message `{content: [blocks]}` (DESIGN.md §8);
    `usage` holds token counts (input, output, cache_read, cache_write)."""

    KIND = Kind.MODEL_RETURNED
    OPTIONAL = frozenset({"stop", "usage", "billed_usd_micros", "first_at", "took_us"})
    message: dict[str, Json] = dataclasses.field(default_factory=dict)
    calls: int = 0
    stop: str | None = None
    usage: dict[str, Json] | None = None
    billed_usd_micros: int | None = None
    first_at: int | None = None
    took_us: int | None = None


@dataclasses.dataclass(kw_only=True)
class ToolCalled(Payload):
    """`args` is the model's arguments: an object, or their original JSON text as a string.
    `pgid` and `pstart` name the process group a command-running tool (`exec`) started, already
    waiting when the line is written: the group's id and its leader's start time (clock ticks
    since boot, `/proc/<pid>/stat` field 22), so resume can end a group that outlived its run
    without killing a process that reused the id."""

    KIND = Kind.TOOL_CALLED
    OPTIONAL = frozenset({"subject", "effect", "pgid", "pstart"})
    id: str = ""
    name: str = ""
    args: Json = dataclasses.field(default_factory=dict)
    subject: str | None = None
    effect: str | None = None
    pgid: int | None = None
    pstart: int | None = None


@dataclasses.dataclass(kw_only=True)
class ToolResult(Payload):
    """Exactly one of `result` (an object) or `error` (a §11 error object) is present; with
    neither given, `result` defaults to `{}`. Giving both raises `E_INVALID_ARGS`."""

    KIND = Kind.TOOL_RESULT
    OPTIONAL = frozenset({"took_us", "result", "error"})
    tool_use_id: str = ""
    name: str = ""
    took_us: int | None = None
    result: dict[str, Json] | None = None
    error: dict[str, Json] | None = None

    def __post_init__(self) -> None:
        if self.result is None and self.error is None and not self.absent:
            self.result = {}
        if (self.result is None) == (self.error is None):
            raise invalid_args(
                "build tool_result",
                f"data (tool_use_id {self.tool_use_id!r})",
                "give exactly one of result or error",
            )
        super().__post_init__()


@dataclasses.dataclass(kw_only=True)
class ResultOffloaded(Payload):
    """A large tool result moved to the CAS; the window keeps `head` plus the locator (§10).

    Written right before the `tool_result` it names, inside the same wave (so no safe cut lies
    between them). `bytes`: the size of the result's window content (UTF-8 bytes); `head`: its
    first bytes; `bytes_removed`: how many bytes fewer the window carries for it (`bytes` minus
    the size of the head-and-locator content that replaces it); 0 on lines that predate it."""

    KIND = Kind.RESULT_OFFLOADED
    tool_use_id: str = ""
    locator: str = ""
    head: str = ""
    bytes: int = 0
    bytes_removed: int = 0


@dataclasses.dataclass(kw_only=True)
class SteerReceived(Payload):
    """Words delivered into a running run (DESIGN.md §4, §6): `source` says who (`user`, `runtime`,
    or a letter's `@<address> …`), `text` the words; `signal` is the control request's id when
    the words came through the control inbox (`runfold steer`, `send_message`), so delivery is
    exactly-once across crashes (omitted otherwise)."""

    KIND = Kind.STEER_RECEIVED
    OPTIONAL = frozenset({"signal"})
    source: str = "user"
    text: str = ""
    signal: str | None = None


@dataclasses.dataclass(kw_only=True)
class SignalEnqueued(Payload):
    KIND = Kind.SIGNAL_ENQUEUED
    OPTIONAL = frozenset({"target"})
    signal: str = ""
    type: str = "steer"
    source: str = "user"
    text: str = ""
    target: str | None = None


@dataclasses.dataclass(kw_only=True)
class SignalConsumed(Payload):
    KIND = Kind.SIGNAL_CONSUMED
    signal: str = ""


@dataclasses.dataclass(kw_only=True)
class ContextChanged(Payload):
    """A change to a window region with its cause (DESIGN.md §10).

    Every change may record its sizes (in `extra`, integers): `bytes_added`, `bytes_removed`,
    `tokens_added`, `tokens_removed`, `revision_before`, `revision_after`. The conversation's
    compaction adds its strategy's fields (`core.compaction.Change`). An edit of the notes, todo
    or scratch region (cause `context_tool`, `core.regions.Edit`) adds `op` (`write`, `append`,
    `delete`, `add`, `done`), its fields `name?`, `text?`, `item?`, and `tool_use_id` of the
    context tool call that made it (the line lies between that call's `tool_called` and its
    `tool_result`); `added`/`removed` then list the entries' keys."""

    KIND = Kind.CONTEXT_CHANGED
    OPTIONAL = frozenset({"op", "name", "text", "item", "tool_use_id"})
    region: str = ""
    cause: str = ""
    added: list[Json] = dataclasses.field(default_factory=list)
    removed: list[Json] = dataclasses.field(default_factory=list)
    token_delta: int = 0
    op: str | None = None
    name: str | None = None
    text: str | None = None
    item: int | None = None
    tool_use_id: str | None = None


@dataclasses.dataclass(kw_only=True)
class RunPolicyChanged(Payload):
    KIND = Kind.RUN_POLICY_CHANGED
    policy: dict[str, Json] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True)
class CheckpointCommitted(Payload):
    KIND = Kind.CHECKPOINT_COMMITTED
    OPTIONAL = frozenset({"job"})
    job: str | None = None


@dataclasses.dataclass(kw_only=True)
class HandoffWritten(Payload):
    KIND = Kind.HANDOFF_WRITTEN
    must_read: list[str] = dataclasses.field(default_factory=list)
    overview: str = ""
    progress: str = ""
    context: str = ""
    next_step: str = ""


@dataclasses.dataclass(kw_only=True)
class CancelReceived(Payload):
    KIND = Kind.CANCEL_RECEIVED
    OPTIONAL = frozenset({"signal"})
    source: str = "user"
    signal: str | None = None


@dataclasses.dataclass(kw_only=True)
class WatchdogFired(Payload):
    """A retry or stall guard fired: `reason` (e.g. `http_429`, `stream_cut`, `connection_refused`,
    `repeat`, `malformed_reply`); `detail` what was wrong, when a reason has more to say (for
    `malformed_reply`: which block of the refused reply, and why)."""

    KIND = Kind.WATCHDOG_FIRED
    OPTIONAL = frozenset({"status", "delay_ms", "detail"})
    reason: str = ""
    attempt: int = 0
    status: int | None = None
    delay_ms: int | None = None
    detail: str | None = None


@dataclasses.dataclass(kw_only=True)
class BudgetLimit(Payload):
    KIND = Kind.BUDGET_LIMIT
    budget: str = ""
    used: int = 0
    limit: int = 0


@dataclasses.dataclass(kw_only=True)
class ProviderDegraded(Payload):
    KIND = Kind.PROVIDER_DEGRADED
    provider: str = ""
    detail: str = ""


@dataclasses.dataclass(kw_only=True)
class GateDenied(Payload):
    KIND = Kind.GATE_DENIED
    OPTIONAL = frozenset({"tool_use_id"})
    rule: str = ""
    violation: str = ""
    alternative: str = ""
    tool_use_id: str | None = None


@dataclasses.dataclass(kw_only=True)
class RunFrozen(Payload):
    KIND = Kind.RUN_FROZEN
    OPTIONAL = frozenset({"evidence", "cause", "error"})
    completion: str = "done"
    evidence: list[Evidence] | None = None
    cause: str | None = None
    error: dict[str, Json] | None = None


COMPLETIONS = ("done", "limit", "cancelled")


@dataclasses.dataclass(kw_only=True)
class LogTruncated(Payload):
    """Bytes after the last valid line were taken out of the ledger: a torn append cut on open
    (`dropped_bytes` only), or a garbage tail moved aside by `runfold repair --quarantine`
    (`dropped_hash`: `b3-<hex64>` of the bytes; `quarantine`: where they are, relative to the
    workspace's `.runfold/`; `segment` and `offset`: where they were)."""

    KIND = Kind.LOG_TRUNCATED
    OPTIONAL = frozenset({"dropped_hash", "quarantine", "segment", "offset"})
    dropped_bytes: int = 0
    dropped_hash: str | None = None
    quarantine: str | None = None
    segment: str | None = None
    offset: int | None = None


@dataclasses.dataclass(kw_only=True)
class EvalRun(Payload):
    KIND = Kind.EVAL_RUN
    probe: str = ""
    version: int = 0
    predecessor: str = ""
    kept: int = 0
    lost: list[int] = dataclasses.field(default_factory=list)
    before: list[str] = dataclasses.field(default_factory=list)
    after: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True)
class CacheRenewed(Payload):
    KIND = Kind.CACHE_RENEWED
    reason: str = ""


@dataclasses.dataclass(kw_only=True)
class SecretCaptured(Payload):
    """Secrets were replaced in the run's next line, or in its `run_started` just before (nothing
    of a run precedes that) (DESIGN.md §4): `where` the fields
    (`tool_result.result.stdout`), `count` replacements, `names` what was replaced (variable
    names or key formats) — never a value."""

    KIND = Kind.SECRET_CAPTURED
    where: list[str] = dataclasses.field(default_factory=list)
    count: int = 0
    names: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True)
class SessionImported(Payload):
    """A run imported from another tool's session file (written right after its `run_started`):
    the source `format` (`runfold.importers.FORMATS`), the file's name `source`, its BLAKE3
    `hash` and length `bytes`, the `session` inside it this run holds (the main session, a
    subagent, a task), `map` the CAS locator of the JSON document that maps every source
    position (`line N`, `event N`, `messages[N]`) to the seqs it became, and `facts`
    (provenance strings the source carries: session id, tool version, fork origin)."""

    KIND = Kind.SESSION_IMPORTED
    format: str = ""
    source: str = ""
    hash: str = ""
    bytes: int = 0
    session: str = ""
    map: str = ""
    facts: dict[str, Json] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True)
class EndpointAttached(Payload):
    """A tool endpoint started with the run: `kind` (`mcp`), the server's configured `name`, its
    `transport` (`stdio` or `http`) and the tool-table names of its tools, in table order."""

    KIND = Kind.ENDPOINT_ATTACHED
    kind: str = "mcp"
    name: str = ""
    transport: str = ""
    tools: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True)
class EndpointLost(Payload):
    """A tool endpoint stopped answering during the run: its `name` and why (`reason`)."""

    KIND = Kind.ENDPOINT_LOST
    name: str = ""
    reason: str = ""


@dataclasses.dataclass(kw_only=True)
class ApprovalRequested(Payload):
    """A recorded call waits for a person's decision: `tool_use_id`, the `tool` name, its approval
    `class` (`read`, `write`, `exec`, `mcp`) and the `preview` shown (a diff, a command, the call)."""

    KIND = Kind.APPROVAL_REQUESTED
    WIRE: ClassVar[dict[str, str]] = {"class_": "class"}
    tool_use_id: str = ""
    tool: str = ""
    class_: str = ""
    preview: str = ""


@dataclasses.dataclass(kw_only=True)
class ApprovalResolved(Payload):
    """The decision on an `approval_requested`: `decision` (`approved` or `denied`), `by` whom
    (`person`, or `runtime` for a call a cancel or a dead process left waiting), an optional
    `reason`, `via` (`terminal` or `inbox`) and the control `signal` id of an inbox decision."""

    KIND = Kind.APPROVAL_RESOLVED
    OPTIONAL = frozenset({"reason", "via", "signal"})
    tool_use_id: str = ""
    decision: str = ""
    by: str = ""
    reason: str | None = None
    via: str | None = None
    signal: str | None = None


@dataclasses.dataclass(kw_only=True)
class SignalWaitStarted(Payload):
    """A run began waiting for letters of kind `reply` (the `wait_for_reply` tool, written
    between its `tool_called` and its `tool_result`): `for` the runs whose replies it waits for,
    in the order given, and `timeout_ms`, how long it waits at most."""

    KIND = Kind.SIGNAL_WAIT_STARTED
    WIRE: ClassVar[dict[str, str]] = {"for_": "for"}
    for_: list[str] = dataclasses.field(default_factory=list)
    timeout_ms: int = 0


WAIT_OUTCOMES = ("replied", "timeout", "cancelled")
"""How a wait ends: every reply arrived, the timeout ran out, or the run was cancelled."""


@dataclasses.dataclass(kw_only=True)
class SignalWaitEnded(Payload):
    """The wait of the last `signal_wait_started` of the run ended: `outcome` (one of
    `WAIT_OUTCOMES`), the runs that `replied` and those still `pending`, and `waited_ms`."""

    KIND = Kind.SIGNAL_WAIT_ENDED
    outcome: str = "replied"
    replied: list[str] = dataclasses.field(default_factory=list)
    pending: list[str] = dataclasses.field(default_factory=list)
    waited_ms: int = 0


PAYLOADS: dict[Kind, type[Payload]] = {
    cls.KIND: cls
    for cls in (
        WorkspaceInitialized,
        RunStarted,
        RunForked,
        SessionOpened,
        PromptAssembled,
        PromptShapeCompared,
        ModelCalled,
        ModelReturned,
        ToolCalled,
        ToolResult,
        ResultOffloaded,
        SteerReceived,
        SignalEnqueued,
        SignalConsumed,
        ContextChanged,
        RunPolicyChanged,
        CheckpointCommitted,
        HandoffWritten,
        CancelReceived,
        WatchdogFired,
        BudgetLimit,
        ProviderDegraded,
        GateDenied,
        RunFrozen,
        LogTruncated,
        EvalRun,
        CacheRenewed,
        SecretCaptured,
        SessionImported,
        EndpointAttached,
        EndpointLost,
        ApprovalRequested,
        ApprovalResolved,
        SignalWaitStarted,
        SignalWaitEnded,
    )
}


def read_payload(kind: Kind, data: Json) -> Payload:
    """The typed payload of a line of `kind`. Raises `E_INVALID_ARGS` naming the field."""
    return PAYLOADS[kind].from_data(data)
