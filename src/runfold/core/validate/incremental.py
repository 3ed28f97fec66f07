"""Incremental validation: the grammar check of one run's successive request bodies in time
independent of history (DESIGN.md §6, §8).

Request n+1 extends request n, so an `IncrementalValidator` keeps its state after messages[0..k)
— each message's own violations, roles, calls and results by id, the tool-loop walk — and
continues over the messages that differ, re-deciding only what depends on them (the pairing of
the ids they touch, the answer zones of the wave before them). `validate` stays the reference:
both report the same violations, in the same order, for every body, valid or not.
"""

from __future__ import annotations

import operator
from typing import Any

from runfold.core.errors import invalid_args
from runfold.core.validate import anthropic, openai_chat, openai_responses
from runfold.core.validate.rules import (
    ANTHROPIC,
    DIALECTS,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    Call,
    Report,
    Result,
    Violation,
    check_pairing,
)

_CALL_WORDS = {
    ANTHROPIC: ("tool_use", "tool_result"),
    OPENAI_CHAT: ("tool call", "tool message"),
    OPENAI_RESPONSES: ("function_call", "function_call_output"),
}


def _identical_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading messages are equal (normally: the same objects; C speed)."""
    m = min(len(old), len(new))
    head = new[:m]
    if head == old[:m]:
        return m
    return list(map(operator.eq, head, old[:m])).index(False)


def _position(path: str) -> int:
    return int(path[path.rindex("[") + 1 : -1])


class IncrementalValidator:
    """Validates the successive request bodies of one run (one dialect) incrementally.

    `validate(body)` returns what `runfold.core.validate.validate(dialect, body)` returns. A
    message (Responses: input item) is reused from the previous call when it equals (normally:
    is) the one at that index then — the `IncrementalRenderer` builds a new object for every
    message it changes; the caller must not edit a validated message in place. Per call, the
    messages from the first differing one are checked (Anthropic: also the previous and the new
    last message, whose `final` exemption may change), plus what reads across the join: the
    answer zones of the wave just before it and (Responses) a trailing run of reasoning items.
    `checked` counts the messages checked so far (the complexity tests read it). Never raises on
    malformed bodies (like `validate`); raises `E_INVALID_ARGS` at construction for an unknown
    dialect.
    """

    def __init__(self, dialect: str) -> None:
        if dialect not in DIALECTS:
            raise invalid_args(
                "validate a request", f"dialect {dialect!r}", "use one of: " + ", ".join(DIALECTS), DIALECTS
            )
        self.dialect = dialect
        self.key = "input" if dialect == OPENAI_RESPONSES else "messages"
        self.checked = 0
        self.reset()

    def reset(self) -> None:
        """Forget every checked message (the next call checks all)."""
        self._items: list[Any] = []
        self._roles: list[str | None] = []  # Anthropic and Chat: the valid role of each message
        self._blocks: list[list[dict[str, Any]]] = []  # Anthropic: each message's well-formed blocks
        self._own: list[list[Violation]] = []  # per message: its own checks (+ Anthropic alternation)
        self._after: list[list[Violation]] = []  # per message: checks emitted after pairing
        self._flagged: set[int] = set()  # indices whose `_own` or `_after` is not empty
        self._calls: list[list[Call]] = []
        self._results: list[list[Result]] = []
        self._calls_by_id: dict[str, list[Call]] = {}
        self._results_by_id: dict[str, list[Result]] = {}
        self._pairing: dict[str, list[tuple[tuple[int, int, int], Violation]]] = {}
        self._walk: list[int] = []  # Anthropic: the tool-loop walk back from each index

    def validate(self, body: Any) -> list[Violation]:
        """Every violation of the grammar in `body`, ordered like `validate`; `[]` when it passes."""
        from runfold.core.validate import validate

        items = body.get(self.key) if isinstance(body, dict) else None
        if not isinstance(items, list) or not items:
            self.reset()
            return validate(self.dialect, body)
        return self._continue(body, items)

    def ensure_valid(self, body: Any) -> None:
        """`ensure_valid(dialect, body)` over `validate(body)`: raises `E_WIRE_MISMATCH` listing
        every violation when the body breaks the grammar (the request is never sent)."""
        from runfold.core.validate import refuse_violations

        refuse_violations(self.dialect, self.validate(body))

    # ---- the continuation ---------------------------------------------------------------------

    def _continue(self, body: dict[str, Any], items: list[Any]) -> list[Violation]:
        dialect = self.dialect
        prev, n = len(self._items), len(items)
        stable = min(prev, n)
        if dialect == ANTHROPIC:  # the previous and the new last message change their `final` exemption
            stable = min(max(prev - 1, 0), n - 1)
        k = _identical_prefix(self._items[:stable], items[:stable])
        c, a = self._calls_from(k), self._after_from(k)
        affected = self._truncate(k, c, a, prev)
        report = Report(dialect)
        roles = self._roles
        for i in range(k, n):
            self.checked += 1
            report.violations = []
            item = items[i]
            if dialect == ANTHROPIC:
                role, blocks = anthropic._check_message(report, i, f"messages[{i}]", item, final=i == n - 1)
                roles.append(role)
                self._blocks.append(blocks)
                anthropic.alternation_at(report, i, roles)
            elif dialect == OPENAI_CHAT:
                roles.append(openai_chat._check_message(report, i, f"messages[{i}]", item))
            else:
                openai_responses._check_item(report, i, f"input[{i}]", item)
            self._items.append(item)
            self._own.append(report.violations)
        for i in range(a, n):
            report.violations = []
            if dialect == ANTHROPIC:
                anthropic.results_first_at(report, i, roles, self._blocks)
                anthropic.thinking_first_at(report, i, roles, self._blocks)
            elif dialect == OPENAI_RESPONSES:
                openai_responses.reasoning_at(report, items, i)
            self._after.append(report.violations)
        for i in range(min(a, k), n):
            if self._own[i] or self._after[i]:
                self._flagged.add(i)
        if dialect == ANTHROPIC:
            walk = self._walk
            for i in range(k, n):
                walk.append(anthropic.loop_start(i, walk[i - 2] if i >= 2 else i, roles, self._blocks))
        found = openai_responses.calls_from(items, c) if dialect == OPENAI_RESPONSES else None
        for i in range(c, n):
            calls = found[i - c] if found is not None else self._calls_at(items, i)
            self._calls.append(calls)
            for call in calls:
                self._calls_by_id.setdefault(call.call_id, []).append(call)
                affected.add(call.call_id)
        for i in range(k, n):
            results = self._results_at(items, i)
            self._results.append(results)
            for res in results:
                self._results_by_id.setdefault(res.call_id, []).append(res)
                affected.add(res.call_id)
        for call_id in affected:
            self._pair(call_id)
        return self._collect(body, n)

    def _calls_from(self, k: int) -> int:
        """The first index whose calls depend on messages k.. (their answer zone reaches k)."""
        if self.dialect == ANTHROPIC:
            return max(k - 1, 0)
        j = k - 1
        if self.dialect == OPENAI_CHAT:
            while j >= 0 and self._roles[j] == "tool":
                j -= 1
            return max(j, 0)
        items = self._items
        while j >= 0 and openai_responses.item_type(items[j]) in openai_responses.OUTPUT_TYPES:
            j -= 1
        while j >= 0 and openai_responses._assistant_side(items[j]):
            j -= 1
        return j + 1

    def _after_from(self, k: int) -> int:
        """The first index whose after-pairing checks read messages k.. (Responses: a reasoning
        run reads up to the item after it)."""
        if self.dialect != OPENAI_RESPONSES:
            return k
        j = k - 1
        while j >= 0 and openai_responses.item_type(self._items[j]) == "reasoning":
            j -= 1
        return j + 1

    def _calls_at(self, items: list[Any], i: int) -> list[Call]:
        if self.dialect == ANTHROPIC:
            return anthropic.calls_at(i, self._roles, self._blocks)
        if self.dialect == OPENAI_CHAT:
            return openai_chat.calls_at(items, self._roles, i)
        return openai_responses.calls_at(items, i)

    def _results_at(self, items: list[Any], i: int) -> list[Result]:
        if self.dialect == ANTHROPIC:
            return anthropic.results_at(i, self._roles, self._blocks)
        if self.dialect == OPENAI_CHAT:
            return openai_chat.results_at(items, self._roles, i)
        return openai_responses.results_at(items, i)

    def _truncate(self, k: int, c: int, a: int, prev: int) -> set[str]:
        """Drop the state of messages k.. (calls from c, after-checks from a); return the ids
        whose pairing must be decided again."""
        affected: set[str] = set()
        for i in range(len(self._calls) - 1, c - 1, -1):
            for call in reversed(self._calls[i]):
                self._calls_by_id[call.call_id].pop()
                affected.add(call.call_id)
        for i in range(prev - 1, k - 1, -1):
            for res in reversed(self._results[i]):
                self._results_by_id[res.call_id].pop()
                affected.add(res.call_id)
        del self._calls[c:], self._results[k:], self._after[a:]
        del self._items[k:], self._roles[k:], self._blocks[k:], self._own[k:], self._walk[k:]
        low = min(k, a)
        self._flagged = {i for i in self._flagged if i < low}
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
        report = Report(self.dialect)
        call_word, result_word = _CALL_WORDS[self.dialect]
        check_pairing(
            report, calls, results, call_word=call_word, result_word=result_word, reuse=self.dialect == OPENAI_CHAT
        )
        if not report.violations:
            self._pairing.pop(call_id, None)
            return
        call_paths = {c.path for c in calls}
        keyed = []
        for v in report.violations:
            phase = 2 if v.rule == "tool-call-answered" else 0 if v.path in call_paths else 1
            keyed.append(((v.index or 0, phase, _position(v.path)), v))
        self._pairing[call_id] = keyed

    def _collect(self, body: dict[str, Any], n: int) -> list[Violation]:
        pairing: dict[int, list[tuple[tuple[int, int, int], Violation]]] = {}
        for keyed in self._pairing.values():
            for key, v in keyed:
                pairing.setdefault(key[0], []).append((key, v))
        opener: Violation | None = None
        if self.dialect == ANTHROPIC and anthropic.thinking_enabled(body):
            report = Report(ANTHROPIC)
            last = n - 1
            walked = self._walk[last - 1] if last >= 1 else -1
            anthropic.check_opener(report, last, walked, self._roles, self._blocks)
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
