"""The rule table of the provider-grammar validator and the `Violation` it reports (DESIGN.md §8).

Every rule has a fixed wire name, a statement in runfold's words and, per dialect, the provider's
own wording of the refusal where the provider enforces it. A dialect listed in `dialects` without
provider wording is a rule runfold demands on top of the provider (the validator must be at least
as strict as the providers, never looser); the pairing checker shared by the three dialects lives
here too, so that "every call answered, every result preceded by its call" means the same thing
everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ANTHROPIC = "anthropic"
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"
DIALECTS: tuple[str, ...] = (ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES)
"""The dialects the validator knows, by their wire names (`--dialect` values)."""

_ALL = DIALECTS


@dataclass(frozen=True)
class Violation:
    """One broken rule in a request body.

    `index` is the message index (`messages[i]`; for OpenAI Responses the `input[i]` item index),
    or None for a fault of the body itself; `rule` is a name from `RULE_NAMES`; `message` says
    what is wrong, where, and quotes the provider's wording of the rule; `path` is the JSON path
    of the offending value, e.g. `messages[2].content[0]`.
    """

    index: int | None
    rule: str
    message: str
    path: str

    def display(self) -> str:
        """One line: `message 2 [rule] messages[2].content[0]: what is wrong`."""
        where = "request" if self.index is None else f"message {self.index}"
        return f"{where} [{self.rule}] {self.path}: {self.message}"

    def to_data(self) -> dict[str, Any]:
        """The violation as a JSON object (keys sorted)."""
        return {"index": self.index, "message": self.message, "path": self.path, "rule": self.rule}


@dataclass(frozen=True)
class Rule:
    """A rule of the grammar: `name` (wire name), `statement` (runfold's words), `dialects` it
    applies to, and `provider` (dialect → the provider's own wording where the provider refuses
    a request that breaks it; a dialect without wording is runfold's additional demand)."""

    name: str
    statement: str
    dialects: tuple[str, ...]
    provider: Mapping[str, str] = field(default_factory=dict)

    def wording(self, dialect: str) -> str:
        """The provider's wording for `dialect`, or `runfold requires: <statement>`."""
        quoted = self.provider.get(dialect)
        return f"provider says: {quoted}" if quoted else f"runfold requires: {self.statement}"


RULES: tuple[Rule, ...] = (
    Rule(
        "body-shape",
        "the body is a JSON object with a non-empty `messages` array (`input` for Responses)",
        _ALL,
        {ANTHROPIC: "messages: Field required", OPENAI_CHAT: "Missing required parameter: 'messages'"},
    ),
    Rule(
        "role-valid",
        "every message has a role the dialect knows",
        _ALL,
        {
            ANTHROPIC: 'messages: Unexpected role; use the top-level `system` parameter, not a "system" message',
            OPENAI_CHAT: "Invalid value for 'role'",
            OPENAI_RESPONSES: "Invalid value for 'role'",
        },
    ),
    Rule(
        "content-shape",
        "content, blocks and items have a type the dialect knows and their required fields",
        _ALL,
        {
            ANTHROPIC: "Input tag found using 'type' does not match any of the expected tags / Field required",
            OPENAI_CHAT: "Invalid type / Missing required parameter",
            OPENAI_RESPONSES: "Invalid type / Missing required parameter",
        },
    ),
    Rule(
        "first-message-user",
        "the first message is a user message (runfold's conversation always opens with the user)",
        (ANTHROPIC,),
        {ANTHROPIC: 'messages: first message must use the "user" role'},
    ),
    Rule(
        "roles-alternate",
        "user and assistant messages alternate: all user content joins the open user message "
        "(DESIGN §6); Anthropic merges consecutive same-role turns today, runfold never sends them",
        (ANTHROPIC,),
    ),
    Rule(
        "content-not-empty",
        "every message has content (an assistant message in Chat may instead carry tool_calls)",
        _ALL,
        {
            ANTHROPIC: "all messages must have non-empty content except for the optional final assistant message",
            OPENAI_CHAT: "Invalid value for 'content': expected a string, got null / empty array",
        },
    ),
    Rule(
        "text-not-empty",
        "text content is non-empty and not whitespace only",
        _ALL,
        {ANTHROPIC: "text content blocks must contain non-whitespace text"},
    ),
    Rule(
        "final-assistant-trailing-whitespace",
        "a final (prefill) assistant message does not end with whitespace",
        (ANTHROPIC,),
        {ANTHROPIC: "final assistant content cannot end with trailing whitespace"},
    ),
    Rule(
        "tool-call-answered",
        "every tool call is answered by its result right after the message that made it",
        _ALL,
        {
            ANTHROPIC: "`tool_use` ids were found without `tool_result` blocks immediately after. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            OPENAI_CHAT: "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'.",
            OPENAI_RESPONSES: "No tool output found for function call.",
        },
    ),
    Rule(
        "tool-result-has-call",
        "every tool result answers a call of the assistant message right before it",
        _ALL,
        {
            ANTHROPIC: "unexpected `tool_use_id` found in `tool_result` blocks. Each `tool_result` "
            "block must have a corresponding `tool_use` block in the previous message.",
            OPENAI_CHAT: "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
            OPENAI_RESPONSES: "No tool call found for function call output with call_id.",
        },
    ),
    Rule(
        "wave-answered-together",
        "all results of one wave (the calls of one reply) come together right after it, before anything else",
        _ALL,
        {
            ANTHROPIC: "`tool_use` ids were found without `tool_result` blocks immediately after",
            OPENAI_CHAT: "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'.",
        },
    ),
    Rule(
        "tool-results-first",
        "the tool_result blocks come first in the user message that answers a wave; text follows them",
        (ANTHROPIC,),
        {
            ANTHROPIC: "Messages following `tool_use` blocks must begin with a matching number of "
            "`tool_result` blocks."
        },
    ),
    Rule(
        "tool-call-id-unique",
        "a tool-call id names one call and is answered once within a request",
        _ALL,
        {
            ANTHROPIC: "`tool_use` ids must be unique",
            OPENAI_CHAT: "Duplicate value for 'tool_call_id'",
            OPENAI_RESPONSES: "Duplicate item found with id",
        },
    ),
    Rule(
        "assistant-tool-form",
        "tool calls take the dialect's form: Anthropic `tool_use` blocks in the content list; "
        "Chat a non-empty `tool_calls` array with `content` null or omitted when there is no text; "
        "Responses separate `function_call` items",
        _ALL,
        {OPENAI_CHAT: "Invalid 'tool_calls': empty array. Expected an array with minimum length 1"},
    ),
    Rule(
        "thinking-first",
        "thinking blocks come first in their assistant message; with thinking enabled, the assistant "
        "message that opened the current tool loop starts with one",
        (ANTHROPIC,),
        {
            ANTHROPIC: "Expected `thinking` or `redacted_thinking`. When `thinking` is enabled, a final "
            "`assistant` message must start with a thinking block (preceeding the lastmost set of "
            "`tool_use` and `tool_result` blocks)."
        },
    ),
    Rule(
        "thinking-signed",
        "thinking blocks are sent back unmodified: `thinking` with its signature, "
        "`redacted_thinking` with its data",
        (ANTHROPIC,),
        {
            ANTHROPIC: "thinking.signature: Field required / `thinking` or `redacted_thinking` blocks "
            "in the latest assistant message cannot be modified"
        },
    ),
    Rule(
        "reasoning-adjacent",
        "a reasoning item is immediately followed by the item it produced (a call or an assistant "
        "message), never by another reasoning item",
        (OPENAI_RESPONSES,),
        {OPENAI_RESPONSES: "Item of type 'reasoning' was provided without its required following item."},
    ),
)
"""Every rule, in reporting order."""

RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)
"""The fixed list of rule names a `Violation.rule` may hold."""

RULES_BY_NAME: Mapping[str, Rule] = {r.name: r for r in RULES}


class Report:
    """Collects the violations of one body for one dialect (internal helper of the checkers)."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.violations: list[Violation] = []

    def add(self, index: int | None, rule: str, path: str, detail: str) -> None:
        """Record `detail` (what is wrong here) followed by the rule's provider wording."""
        known = RULES_BY_NAME[rule]
        self.violations.append(Violation(index, rule, f"{detail} ({known.wording(self.dialect)})", path))

    def sorted(self) -> list[Violation]:
        """Violations ordered by message index (body-level first), stable otherwise."""
        return sorted(self.violations, key=lambda v: -1 if v.index is None else v.index)


@dataclass(frozen=True)
class Call:
    """A tool call found in the body: its id, the message index, the JSON path, and the indices
    where its results may stand (the answer zone right after the message that made it, a range
    of indices: its size never costs memory or time)."""

    call_id: str
    index: int
    path: str
    zone: range


@dataclass(frozen=True)
class Result:
    """A tool result found in the body: the id it answers, its message index and JSON path."""

    call_id: str
    index: int
    path: str


def check_pairing(
    report: Report,
    calls: Sequence[Call],
    results: Sequence[Result],
    *,
    call_word: str,
    result_word: str,
    reuse: bool = False,
) -> None:
    """Check calls and results pair up in both directions (DESIGN §8).

    - a second call with an id already used → `tool-call-id-unique` (with `reuse`: only when
      the same message made both; a later turn may use the id again, as Chat Completions accepts,
      and a result then answers the latest call of that id before it);
    - a result with no call anywhere, or standing before its call → `tool-result-has-call`;
    - a result outside its call's answer zone → `wave-answered-together`;
    - a second result for one call → `tool-call-id-unique`;
    - a call with no result at all → `tool-call-answered`.
    """
    made: dict[str, list[Call]] = {}
    accepted: list[Call] = []
    for call in calls:
        prior = made.get(call.call_id)
        if prior and (not reuse or prior[-1].index == call.index):
            report.add(
                call.index,
                "tool-call-id-unique",
                call.path,
                f"{call_word} id {call.call_id!r} is already used by the call at {prior[-1 if reuse else 0].path}",
            )
            continue
        made.setdefault(call.call_id, []).append(call)
        accepted.append(call)
    answered: dict[tuple[str, int], Result] = {}
    for res in results:
        same = made.get(res.call_id)
        if not same:
            report.add(
                res.index,
                "tool-result-has-call",
                res.path,
                f"{result_word} for {res.call_id!r} answers no {call_word} in this request",
            )
            continue
        before = [c for c in same if c.index < res.index]
        if not before:
            report.add(
                res.index,
                "tool-result-has-call",
                res.path,
                f"{result_word} for {res.call_id!r} stands before its {call_word} at {same[0].path}",
            )
            continue
        call = before[-1]
        key = (call.call_id, call.index)
        if key in answered:
            report.add(
                res.index,
                "tool-call-id-unique",
                res.path,
                f"{call_word} {res.call_id!r} is answered a second time (first at {answered[key].path})",
            )
            continue
        answered[key] = res
        if res.index not in call.zone:
            lo, hi = (call.zone[0], call.zone[-1]) if call.zone else (call.index + 1, call.index + 1)
            expected = f"message {lo}" if lo == hi else f"messages {lo}..{hi}"
            report.add(
                res.index,
                "wave-answered-together",
                res.path,
                f"{result_word} for {res.call_id!r} (called in message {call.index}) stands in message "
                f"{res.index}, not with the rest of its wave in {expected}",
            )
    for call in accepted:
        if (call.call_id, call.index) not in answered:
            report.add(
                call.index,
                "tool-call-answered",
                call.path,
                f"{call_word} {call.call_id!r} has no {result_word} right after message {call.index}",
            )


def body_object(report: Report, body: Any) -> dict[str, Any] | None:
    """`body` when it is a JSON object; else a `body-shape` violation at `$` and None."""
    if isinstance(body, dict):
        return body
    report.add(None, "body-shape", "$", f"the request body is a JSON {type_name(body)}, not an object")
    return None


def entries_of(report: Report, body: dict[str, Any], key: str, must_be: str, empty: str) -> list[Any] | None:
    """`body[key]` when it is a non-empty array; else a `body-shape` violation naming `key`
    (missing, of another type: "it must be `must_be`"; empty: the `empty` sentence) and None."""
    value = body.get(key)
    if not isinstance(value, list):
        detail = f"`{key}` is missing" if value is None else f"`{key}` is a {type_name(value)}"
        report.add(None, "body-shape", key, f"{detail}; it must be {must_be}")
        return None
    if not value:
        report.add(None, "body-shape", key, empty)
        return None
    return value


def is_blank(text: str) -> bool:
    """True for an empty or whitespace-only string."""
    return not text.strip()


def type_name(value: object) -> str:
    """The JSON type name of a parsed value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
