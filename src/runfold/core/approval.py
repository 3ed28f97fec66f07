"""Approvals: which tool calls a person must allow first, and the error a refused call gets
(DESIGN.md §4 `approval_requested`/`approval_resolved`, §9, §11).

Every tool belongs to one class — `read`, `write`, `exec` or `mcp` — and each class has a
policy: `allow` (run it), `ask` (record `approval_requested`, wait for a person's decision) or
`deny` (refuse it). A refused call acts not; its result is an `E_GATE_DENIED` error carrying the
reason, which the model reads like any other tool error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from runfold.core.errors import ErrorCode, Gate, Retry, RunfoldError, invalid_args
from runfold.core.payloads import ToolResult
from runfold.core.tool_result import gate_rule

ApprovalClass = Literal["read", "write", "exec", "mcp"]
Policy = Literal["allow", "ask", "deny"]

CLASSES: Final[tuple[ApprovalClass, ...]] = ("read", "write", "exec", "mcp")
"""The tool classes a policy is set for: `read` (tools that change nothing), `write` (tools that
may change files or state, e.g. `write_file`, `edit_file`), `exec` (the `exec` tool), `mcp`
(every tool of an MCP server)."""
POLICIES: Final[tuple[Policy, ...]] = ("allow", "ask", "deny")
DECISIONS: Final = ("approved", "denied")
"""`approval_resolved.decision`."""

APPROVAL_RULE: Final = "a call of a class whose policy is `ask` runs only once a person approves it"
"""The gate rule of a call a person (or the runtime, for them) denied; `is_denial` recognizes it."""
POLICY_RULE: Final = "a call of a class whose policy is `deny` never runs"
"""The gate rule of a call its class's `deny` policy refused."""

DEFAULT_POLICY: Final[dict[str, Policy]] = {c: "allow" for c in CLASSES}
"""Every class `allow`: a workspace without `[approvals]` and a run without `--approve` ask nothing."""


def parse_policies(table: Mapping[str, object], where: str) -> dict[str, Policy]:
    """`{class: policy}` checked: every key a class of `CLASSES`, every value a policy of
    `POLICIES`. Raises `E_INVALID_ARGS` naming `where` and the key (the caller re-codes it for a
    config file)."""
    out: dict[str, Policy] = {}
    for key, value in table.items():
        if key not in CLASSES:
            raise invalid_args(
                "set an approval policy", f"{where} {key!r}", f"name one of the classes {', '.join(CLASSES)}", CLASSES
            )
        if value not in POLICIES:
            raise invalid_args(
                "set an approval policy",
                f"{where} {key} = {value!r}",
                f"give one of the policies {', '.join(POLICIES)}",
                POLICIES,
            )
        out[key] = value
    return out


def parse_flag(text: str) -> tuple[str, Policy]:
    """`CLASS=POLICY` (the `--approve` option) as a pair. Raises `E_INVALID_ARGS` naming it."""
    cls, sep, policy = text.partition("=")
    if not sep:
        raise invalid_args(
            "set an approval policy", f"--approve {text}", "write it as CLASS=POLICY, e.g. --approve exec=ask"
        )
    return next(iter(parse_policies({cls.strip(): policy.strip()}, "--approve").items()))


def denial_error(call_id: str, name: str, cls: str, by: str, reason: str | None) -> RunfoldError:
    """The §11 error of a call a person denied (`by` who; `reason` their words, if any): the model
    reads the reason in `action` and in the gate's `violation`."""
    why = f": {reason}" if reason else ""
    return RunfoldError(
        ErrorCode.GATE_DENIED,
        f"run tool `{name}` (denied by the {by}{why})",
        f"call {call_id}",
        "the call did not run; do what the reason asks, or try another way without this call",
        retry=Retry.NO,
        gate=Gate(
            rule=APPROVAL_RULE,
            violation=f"the {by} denied this {cls} call{why}",
            alternative="ask the person in your answer, or reach the goal with calls they allow",
        ),
    )


def policy_error(call_id: str, name: str, cls: str) -> RunfoldError:
    """The §11 error of a call its class's `deny` policy refused."""
    return RunfoldError(
        ErrorCode.GATE_DENIED,
        f"run tool `{name}` (the approval policy for {cls} tools is `deny`)",
        f"call {call_id}",
        f"the call did not run; {cls} tools are not allowed in this run, use another way",
        retry=Retry.NO,
        gate=Gate(
            rule=POLICY_RULE,
            violation=f"`{name}` is a {cls} tool and {cls} tools are denied",
            alternative="reach the goal with tools of an allowed class",
        ),
    )


def is_denial(result: ToolResult) -> bool:
    """Whether a `tool_result` payload is a person's denial (`denial_error`): its bytes in the
    window are then the person's interaction (cause `interaction`, DESIGN.md §10)."""
    return gate_rule(result) == APPROVAL_RULE
