"""What a run was asked for: `RunSpec`, frozen, exactly as `Workspace.arun` or the CLI received
it, before any default of config.toml is filled in (DESIGN.md §5), and `RunHooks`, the callbacks
that watch or steer it. `new_run_id` is the one place a run id is minted.

This module is light (no provider, executor or tool import) so the CLI can build a spec, and have
it checked, before anything heavy is loaded.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runfold.core.approval import parse_policies
from runfold.core.errors import invalid_args
from runfold.core.ids import RunId, is_run_id, run_id_v7
from runfold.core.payloads import SessionOpened
from runfold.core.records import Record
from runfold.store.ledger import now_ms

if TYPE_CHECKING:
    from runfold.providers.base import Provider, StreamCallback
    from runfold.runtime.approvals import Ask
    from runfold.runtime.retry import RetryPolicy
    from runfold.tools import Tool


def new_run_id() -> RunId:
    """A fresh run id: a UUIDv7 of the wall clock (ms) and 10 random bytes (`ids.run_id_v7`)."""
    return run_id_v7(now_ms(), os.urandom(10))


def _encodable(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (a lone surrogate, e.g. an undecodable byte of argv, does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Delegated:
    """Where a delegated run's task came from: `parent`, the run that delegated it (a full id,
    `run_started.parent`); `by`, that run's agent identity (`run_started.dispatched_by`);
    `detach`: True when the run keeps running once its parent is cancelled."""

    parent: str
    by: str
    detach: bool = False

    def to_data(self) -> dict[str, Any]:
        return {"parent": self.parent, "by": self.by, "detach": self.detach}

    @classmethod
    def from_data(cls, data: Any) -> Delegated:
        """From `to_data`'s object; raises `E_INVALID_ARGS` for another shape."""
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("parent"), str)
            or not is_run_id(data["parent"])
            or not isinstance(data.get("by"), str)
            or not isinstance(data.get("detach", False), bool)
        ):
            raise invalid_args(
                "read a delegation", "delegated", "give {parent: <run id>, by: <agent>, detach: bool}"
            )
        return cls(data["parent"], data["by"], data.get("detach", False))


@dataclass(frozen=True)
class RunSpec:
    """One run as asked for; None means "not given: take the workspace default".

    - `task`: the person's words (for a fork or successor: replaces the mother's when not empty);
      `goal`: what done looks like (the run's system segment);
    - `model`: a SPEC string (`local`, `anthropic:<model>`, `openai:<model>`,
      `openai-responses:<model>`, `openai-compat:<model>@<url>`, `script:<file>[#dialect]`) or a
      `Provider` (used as is, not closed); None: `[defaults].model` of config.toml, else `local`;
    - `room`: the run's address and write domain (`.` = the workspace root; a fork or a successor
      works in its mother's room unless another is given);
    - `max_turns`: the turn ceiling ≥ 1 (None: `[defaults].max_turns`, else no ceiling);
    - `tools`: the user's own tools (typed Python functions, sync or async, or `Tool`s);
      `builtin_tools`: True (all six), False (none) or built-in names (None: `[defaults].tools`,
      else all);
    - `system`: replaces the default system text; `retry`: the back-off policy (None: default);
    - `record`: append every answer of the provider (faults included) to this JSONL file as a
      scripted-model session with a header of the dialect, model and call settings, so
      `model="script:<file>"` replays the run to the same request hashes;
    - `fork`: `(run, at_seq)`, start as a fork of that run (id or prefix) cut at the last safe
      point ≤ `at_seq` (DESIGN.md §7); `continues`: a frozen run (id or prefix) this run is the
      successor of (a fork at its last line, with a `runtime:` note saying why it continues);
    - `approvals`: approval policies per tool class (`read`, `write`, `exec`, `mcp` →
      `allow`|`ask`|`deny`) laid over `[approvals]` of config.toml (None: the config's alone);
    - `command_line`: asked on the command line: the model's API key is required before the run
      starts (`require_key`), `record` starts a fresh file, and errors name the command's
      options (`--max-turns`);
    - `run_id`: the id the run will have (None: minted when it starts); an owner that queues a
      run names it when it accepts it, so a dispatch that survives a crash is never run twice;
    - `session`: the `session_opened` line (DESIGN.md §4) of the interactive session this run
      opens (`runfold chat`'s first turn), written by the runtime right after the run's start;
      None for a run that opens no session.
    - `agents`: add the agent tools (`send_message`, `delegate`, `wait_for_reply`) to the run's
      tool set; `delegated`: the run was delegated by another run (`Delegated`): its task opens
      the run `inherited` (escaped, handed down by the parent), never as the person's words;
    - `dispatched_by`: who hands the run its task when it is not the person — the author of its
      `run_started` and its `dispatched_by` (`runtime` for the handoff probe's question forks,
      which `Workspace.latest_run` passes over); None: the person.

    Raises `E_INVALID_ARGS` for `fork` together with `continues`, for `max_turns` < 1, a `run_id`
    that is not a lowercase UUID, and for a
    `task`, `goal` or `room` that is not valid Unicode (a lone surrogate: nothing is created).
    """

    task: str
    goal: str = ""
    model: str | Provider | None = None
    room: str = "."
    max_turns: int | None = None
    tools: Sequence[Callable[..., Any] | Tool] = ()
    builtin_tools: bool | Sequence[str] | None = None
    system: str | None = None
    retry: RetryPolicy | None = None
    record: str | Path | None = None
    fork: tuple[str, int] | None = None
    continues: str | None = None
    command_line: bool = False
    run_id: str | None = None
    approvals: Mapping[str, str] | None = None
    session: SessionOpened | None = None
    agents: bool = False
    delegated: Delegated | None = None
    dispatched_by: str | None = None

    def __post_init__(self) -> None:
        _check_types(self)
        for name, flag, text in (("task", "TASK", self.task), ("goal", "--goal", self.goal), ("room", "--room", self.room)):
            if not _encodable(text):
                given = flag if self.command_line else name
                raise invalid_args(
                    "run an agent", given, f"give {given} as text that is valid Unicode (it holds undecodable bytes)"
                )
        if self.continues is not None and self.fork is not None:
            raise invalid_args("continue a run", "fork", "give either `continues` or `fork`, not both")
        if self.max_turns is not None and self.max_turns < 1:
            action = "continue a run" if self.continues is not None else "run an agent"
            given = f"--max-turns {self.max_turns}" if self.command_line else f"max_turns={self.max_turns}"
            ceiling = f"a ceiling of {self.max_turns} turns ({given})"
            raise invalid_args(action, ceiling, "give a turn ceiling of at least 1")
        if self.approvals is not None:
            parse_policies(self.approvals, "--approve" if self.command_line else "approvals")

    @property
    def origin(self) -> str | None:
        """The run (id or prefix) this one forks or continues, None for a fresh run."""
        return self.continues if self.continues is not None else self.fork[0] if self.fork else None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_SHAPES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("task", lambda v: isinstance(v, str), "a string"),
    ("goal", lambda v: isinstance(v, str), "a string"),
    ("model", lambda v: v is None or isinstance(v, str) or hasattr(v, "complete"), "a SPEC string or a Provider"),
    ("room", lambda v: isinstance(v, str), "a room address string such as '.'"),
    ("max_turns", lambda v: v is None or _is_int(v), "a whole number ≥ 1"),
    ("tools", lambda v: isinstance(v, Sequence) and not isinstance(v, str), "a list of functions or Tools"),
    (
        "builtin_tools",
        lambda v: v is None
        or isinstance(v, bool)
        or (isinstance(v, Sequence) and not isinstance(v, str) and all(isinstance(n, str) for n in v)),
        "True, False or a list of built-in tool names",
    ),
    ("system", lambda v: v is None or isinstance(v, str), "a string"),
    ("record", lambda v: v is None or isinstance(v, str | Path), "a file path"),
    (
        "fork",
        lambda v: v is None or (isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and _is_int(v[1])),
        "a (run, at_seq) pair",
    ),
    ("continues", lambda v: v is None or isinstance(v, str), "a run id or prefix"),
    ("run_id", lambda v: v is None or (isinstance(v, str) and is_run_id(v)), "a lowercase UUID"),
    ("approvals", lambda v: v is None or isinstance(v, Mapping), "a mapping of tool class to policy"),
    ("session", lambda v: v is None or isinstance(v, SessionOpened), "a SessionOpened payload"),
    ("agents", lambda v: isinstance(v, bool), "True or False"),
    ("delegated", lambda v: v is None or isinstance(v, Delegated), "a Delegated"),
    ("dispatched_by", lambda v: v is None or (isinstance(v, str) and v.strip() != ""), "a non-blank name"),
)


def _check_types(spec: RunSpec) -> None:
    """Refuse a field of the wrong type with `E_INVALID_ARGS` naming it and the type it takes,
    before a deeper layer fails on it with a bare TypeError."""
    for name, fits, shape in _SHAPES:
        value = getattr(spec, name)
        if not fits(value):
            raise invalid_args(
                "run an agent", f"{name}={value!r:.80}", f"give {name} as {shape} (given: {type(value).__name__})"
            )


@dataclass(frozen=True)
class RunHooks:
    """The callbacks of one run (none changes what the run is):

    - `on_event(record)`: every line of the run as it is written; `on_delta(kind, text)`:
      streamed text for live views; `cancel`: set it to cancel at the next safe point;
    - `steers`: the person's words put on this queue while the run goes are written as
      `steer_received` at the next safe point (strings or `runfold.runtime.control.Steer`s,
      DESIGN.md §6);
    - `on_durable(record)`: every line of the run once it is durable (after the fsync of its
      batch, in seq order);
    - `ask(request)`: the terminal's approval prompt for a call whose class's policy is `ask`
      (`runfold.runtime.approvals.Ask`); None: the run waits for `runfold approve`/`deny`.
    """

    on_event: Callable[[Record], None] | None = None
    on_delta: StreamCallback | None = None
    cancel: asyncio.Event | None = None
    steers: asyncio.Queue[Any] | None = None
    on_durable: Callable[[Record], None] | None = None
    ask: Ask | None = None
