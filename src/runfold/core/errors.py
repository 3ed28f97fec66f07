"""The one error shape every user and model sees (DESIGN.md §11).

`RunfoldError` carries code, action, subject, nearby alternatives, a mandatory recovery sentence,
retry advice and an optional gate; `display()` is its only human form.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ErrorCode(enum.StrEnum):
    """Every error code runfold emits (DESIGN.md §11); wire names are the values.

    `E_INTERNAL` is runfold's own bug (a state its invariants rule out, an unexpected exception
    in the run loop); a mistake of the caller or the model is `E_INVALID_ARGS`. The CLI exits 4
    for `E_INTERNAL`, as for any other bug.
    """

    INVALID_ARGS = "E_INVALID_ARGS"
    PATH_NOT_FOUND = "E_PATH_NOT_FOUND"
    TOOL_UNKNOWN = "E_TOOL_UNKNOWN"
    TIMEOUT = "E_TIMEOUT"
    OUTSIDE_WRITE_DOMAIN = "E_OUTSIDE_WRITE_DOMAIN"
    GATE_DENIED = "E_GATE_DENIED"
    PROVIDER = "E_PROVIDER"
    TOOL_OUTCOME_UNKNOWN = "E_TOOL_OUTCOME_UNKNOWN"
    EVIDENCE_MISSING = "E_EVIDENCE_MISSING"
    LOOP_SUSPECTED = "E_LOOP_SUSPECTED"
    BUDGET_EXHAUSTED = "E_BUDGET_EXHAUSTED"
    CONFIG_INVALID = "E_CONFIG_INVALID"
    LEDGER_CORRUPT = "E_LEDGER_CORRUPT"
    STORAGE_FATAL = "E_STORAGE_FATAL"
    WIRE_MISMATCH = "E_WIRE_MISMATCH"
    LOG_VERSION_UNSUPPORTED = "E_LOG_VERSION_UNSUPPORTED"
    LEDGER_HELD = "E_LEDGER_HELD"
    INTERNAL = "E_INTERNAL"


LOAD_TIME_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.CONFIG_INVALID,
        ErrorCode.LEDGER_CORRUPT,
        ErrorCode.STORAGE_FATAL,
        ErrorCode.WIRE_MISMATCH,
        ErrorCode.LOG_VERSION_UNSUPPORTED,
        ErrorCode.LEDGER_HELD,
    }
)
"""Codes raised while opening or loading a workspace, before any run exists."""


class Retry(enum.StrEnum):
    """Whether repeating the same action may succeed."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Gate:
    """A refusal by a rule: the rule, how the action broke it, and an alternative that works."""

    rule: str
    violation: str
    alternative: str

    def to_data(self) -> dict[str, Any]:
        return {"alternative": self.alternative, "rule": self.rule, "violation": self.violation}


@dataclass(eq=False)
class RunfoldError(Exception):
    """An error with the DESIGN.md §11 shape.

    `recovery` is mandatory and must be one actionable sentence; constructing an error without
    one raises ValueError (a bug in runfold, not a user error).
    """

    code: ErrorCode
    action: str
    subject: str
    recovery: str
    nearby: tuple[str, ...] = field(default=())
    retry: Retry = Retry.NO
    retry_after_ms: int | None = None
    gate: Gate | None = None

    def __post_init__(self) -> None:
        if not self.recovery.strip():
            raise ValueError(f"{self.code}: an error needs a recovery sentence")
        Exception.__init__(self, self.display())

    def display(self) -> str:
        """`E_CODE: cannot <action> on <subject> — <recovery>` (DESIGN.md §11)."""
        return f"{self.code.value}: cannot {self.action} on {self.subject} — {self.recovery}"

    def __str__(self) -> str:
        return self.display()

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled by its fields, not its constructor's arguments: an error crosses a process
        # boundary (Ray, multiprocessing) as itself, subclasses with their own __init__ too
        state = dict(self.__dict__)
        for klass in type(self).__mro__:  # fields a subclass keeps in slots are not in __dict__
            slots = klass.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if name not in ("__dict__", "__weakref__") and hasattr(self, name):
                    state[name] = getattr(self, name)
        return (_unpickled, (type(self), state))

    def to_data(self) -> dict[str, Any]:
        """The error as a ledger payload object (keys sorted canonically later)."""
        data: dict[str, Any] = {
            "action": self.action,
            "code": self.code.value,
            "nearby": list(self.nearby),
            "recovery": self.recovery,
            "retry": self.retry.value,
            "subject": self.subject,
        }
        if self.retry_after_ms is not None:
            data["retry_after_ms"] = self.retry_after_ms
        if self.gate is not None:
            data["gate"] = self.gate.to_data()
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RunfoldError:
        """Rebuild an error from its payload; unknown codes raise ValueError."""
        gate = data.get("gate")
        return cls(
            code=ErrorCode(data["code"]),
            action=str(data.get("action", "")),
            subject=str(data.get("subject", "")),
            recovery=str(data.get("recovery", "")) or "see the ledger line for details",
            nearby=tuple(str(n) for n in data.get("nearby", [])),
            retry=Retry(data.get("retry", "no")),
            retry_after_ms=data.get("retry_after_ms"),
            gate=Gate(**gate) if isinstance(gate, dict) else None,
        )


def _unpickled(cls: type[RunfoldError], state: dict[str, Any]) -> RunfoldError:
    err = cls.__new__(cls)
    for name, value in state.items():
        object.__setattr__(err, name, value)
    Exception.__init__(err, err.display())
    return err


def internal(action: str, subject: str, recovery: str) -> RunfoldError:
    """Shorthand for an `E_INTERNAL` error (a runfold bug); `recovery` says how to carry on and
    what to report."""
    return RunfoldError(ErrorCode.INTERNAL, action, subject, recovery)


def invalid_args(action: str, subject: str, recovery: str, nearby: tuple[str, ...] = ()) -> RunfoldError:
    """Shorthand for an `E_INVALID_ARGS` error."""
    return RunfoldError(ErrorCode.INVALID_ARGS, action, subject, recovery, nearby)
