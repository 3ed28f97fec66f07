"""Incremental validation: the grammar check of one run's successive request bodies in time
independent of history (DESIGN.md §6, §8).

Request n+1 extends request n, so an `IncrementalValidator` keeps its state after messages[0..k)
— each message's own violations, roles, calls and results by id, the tool-loop walk — and
continues over the messages that differ. `validate` stays the reference: both report the same
violations, in the same order, for every body (valid or not). Anthropic is incremental; the
OpenAI dialects fall back to the reference (their bodies are checked whole).
"""

from __future__ import annotations

import operator
from typing import Any

from runfold.core.validate import anthropic
from runfold.core.validate.rules import ANTHROPIC, Call, Report, Result, Violation, check_pairing


def _identical_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading messages are equal (normally: the same objects; C speed)."""
    m = min(len(old), len(new))
    head = new[:m]
    if head == old[:m]:
        return m
    return list(map(operator.eq, head, old[:m])).index(False)


def _block_position(path: str) -> int:
    return int(path[path.rindex("[") + 1 : -1])


class IncrementalValidator:
    """Validates the successive request bodies of one run (one dialect) incrementally.

    `validate(body)` returns what `runfold.core.validate.validate(dialect, body)` returns. A
    message of `body["messages"]` is reused from the previous call when it is the same object
    at the same index (the `IncrementalRenderer` builds a new object for every message it
    changes); the caller must not edit a validated message in place. Per call, only the
    messages from the first differing one (and the previous and the new last message, whose
    `final` exemption may change) are checked again. `checked` counts the messages checked so far
    (the complexity tests read it). Never raises on malformed bodies (like `validate`).
    """

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.checked = 0
        self.reset()

    def reset(self) -> None:
        """Forget every checked message (the next call checks all)."""
        self._msgs: list[Any] = []
        self._roles: list[str | None] = []
        self._blocks: list[list[dict[str, Any]]] = []
        self._own: list[list[Violation]] = []  # per message: its shape, then alternation
        self._after: list[list[Violation]] = []  # per message: results-first, thinking-first
        self._flagged: set[int] = set()  # indices whose `_own` is not empty
        self._calls: list[list[Call]] = []
        self._results: list[list[Result]] = []
        self._calls_by_id: dict[str, list[Call]] = {}
        self._results_by_id: dict[str, list[Result]] = {}
        self._pairing: dict[str, list[tuple[tuple[int, int, int], Violation]]] = {}
        self._walk: list[int] = []  # the tool-loop walk back from each index (anthropic.loop_start)

    def validate(self, body: Any) -> list[Violation]:
        """Every violation of the grammar in `body`, ordered like `validate`; `[]` when it passes."""
        from runfold.core.validate import validate

        if self.dialect != ANTHROPIC:
            return validate(self.dialect, body)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            self.reset()
            return validate(self.dialect, body)
        return self._anthropic(body, messages)

    def ensure_valid(self, body: Any) -> None:
        """`ensure_valid(dialect, body)` over `validate(body)`: raises `E_WIRE_MISMATCH` listing
        every violation when the body breaks the grammar (the request is never sent)."""
        from runfold.core.validate import refuse_violations

        refuse_violations(self.dialect, self.validate(body))

    def _anthropic(self, body: dict[str, Any], messages: list[Any]) -> list[Violation]:
        prev = len(self._msgs)
        n = len(messages)
        # the previous last and the new last message change their `final` exemption
        stable = min(max(prev - 1, 0), n - 1)
        k = _identical_prefix(self._msgs[:stable], messages[:stable])
        affected = self._truncate(k, prev)
        last = n - 1
        report = Report(ANTHROPIC)
        for i in range(k, n):
            self.checked += 1
            report.violations = []
            role, blocks = anthropic._check_message(report, i, f"messages[{i}]", messages[i], final=i == last)
            self._msgs.append(messages[i])
            self._roles.append(role)
            self._blocks.append(blocks)
            self._own.append(report.violations)
        roles, blocks_of = self._roles, self._blocks
        for i in range(k, n):
            report.violations = []
            role = roles[i]
            if i == 0 and role is not None and role != "user":
                report.add(
                    0, "first-message-user", "messages[0].role", f"the first message has role {role!r}"
                )
            if i > 0 and role is not None and role == roles[i - 1]:
                report.add(
                    i,
                    "roles-alternate",
                    f"messages[{i}].role",
                    f"message {i} has role {role!r} like message {i - 1} before it",
                )
            alternation = report.violations
            report.violations = []
            anthropic.results_first_at(report, i, roles, blocks_of)
            anthropic.thinking_first_at(report, i, roles, blocks_of)
            self._own[i].extend(alternation)
            self._after.append(report.violations)
            if self._own[i] or report.violations:
                self._flagged.add(i)
            self._walk.append(anthropic.loop_start(i, self._walk[i - 2] if i >= 2 else i, roles, blocks_of))
        # calls of message k-1 were removed too: their answer zone depends on message k
        for i in range(max(k - 1, 0), n):
            calls = []
            if roles[i] == "assistant":
                for j, block in enumerate(blocks_of[i]):
                    if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                        zone = frozenset({i + 1}) if i + 1 < n and roles[i + 1] == "user" else frozenset()
                        calls.append(Call(block["id"], i, f"messages[{i}].content[{j}]", zone))
            self._calls.append(calls)
            for call in calls:
                self._calls_by_id.setdefault(call.call_id, []).append(call)
                affected.add(call.call_id)
        for i in range(k, n):
            results = []
            if roles[i] == "user":
                for j, block in enumerate(blocks_of[i]):
                    if block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                        results.append(Result(block["tool_use_id"], i, f"messages[{i}].content[{j}]"))
            self._results.append(results)
            for res in results:
                self._results_by_id.setdefault(res.call_id, []).append(res)
                affected.add(res.call_id)
        for call_id in affected:
            self._pair(call_id)
        return self._collect(body, n)

    def _truncate(self, k: int, prev: int) -> set[str]:
        """Drop the state of messages k.. (and the calls of k-1); return the ids touched."""
        affected: set[str] = set()
        for i in range(prev - 1, max(k - 1, 0) - 1, -1):
            for call in reversed(self._calls[i]):
                self._calls_by_id[call.call_id].pop()
                affected.add(call.call_id)
        for i in range(prev - 1, k - 1, -1):
            for res in reversed(self._results[i]):
                self._results_by_id[res.call_id].pop()
                affected.add(res.call_id)
        del self._calls[max(k - 1, 0) :], self._results[k:]
        del self._msgs[k:], self._roles[k:], self._blocks[k:], self._own[k:], self._after[k:], self._walk[k:]
        self._flagged = {i for i in self._flagged if i < k}
        return affected

    def _pair(self, call_id: str) -> None:
        """The pairing violations of one id (pairing is decided id by id), with the sort key that
        puts them where `check_pairing` over the whole body emits them."""
        calls = self._calls_by_id.get(call_id, [])
        results = self._results_by_id.get(call_id, [])
        if not calls and not results:
            self._calls_by_id.pop(call_id, None)
            self._results_by_id.pop(call_id, None)
            self._pairing.pop(call_id, None)
            return
        report = Report(ANTHROPIC)
        check_pairing(report, calls, results, call_word="tool_use", result_word="tool_result")
        if not report.violations:
            self._pairing.pop(call_id, None)
            return
        call_paths = {c.path for c in calls}
        keyed = []
        for v in report.violations:
            phase = 2 if v.rule == "tool-call-answered" else 0 if v.path in call_paths else 1
            keyed.append(((v.index or 0, phase, _block_position(v.path)), v))
        self._pairing[call_id] = keyed

    def _collect(self, body: dict[str, Any], n: int) -> list[Violation]:
        pairing: dict[int, list[tuple[tuple[int, int, int], Violation]]] = {}
        for keyed in self._pairing.values():
            for key, v in keyed:
                pairing.setdefault(key[0], []).append((key, v))
        opener: Violation | None = None
        if anthropic.thinking_enabled(body):
            report = Report(ANTHROPIC)
            last = n - 1
            anthropic.check_opener(
                report, last, self._walk[last - 1] if last >= 1 else -1, self._roles, self._blocks
            )
            opener = report.violations[0] if report.violations else None
        indices = self._flagged | set(pairing)
        if opener is not None:
            indices.add(opener.index or 0)
        out: list[Violation] = []
        for i in sorted(indices):
            out.extend(self._own[i])
            out.extend(v for _, v in sorted(pairing.get(i, []), key=operator.itemgetter(0)))
            out.extend(self._after[i])
            if opener is not None and opener.index == i:
                out.append(opener)
        return out
