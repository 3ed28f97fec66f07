"""Compaction of the conversation region, pure (DESIGN.md §6, §10): which old tool results a
`clear_tool_results` compaction clears, which leading exchanges a `summary` replaces, and the one
function that applies a recorded conversation `context_changed` — shared by the live run loop and
every fold, so replay, forks and resumes see exactly the window the live run sent.

A conversation is `[user, (assistant, user)*]`: message 0 holds the opening, each later pair is
one *exchange* (a reply and the user content answering it; a reply with calls and its results is
a *wave*, parallel calls included). Compaction works on whole exchanges only, so a wave is never
split and the retained tail never starts with a `tool_result` whose `tool_use` was dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from runfold.core.canonical import Json, encode_json
from runfold.core.causes import Cause
from runfold.core.conversation import BlockSource, Conversation
from runfold.core.errors import RunfoldError, invalid_args
from runfold.core.kinds import Kind
from runfold.core.messages import Block, Message, text_block
from runfold.core.payloads import ContextChanged, ModelCalled, SteerReceived
from runfold.core.records import Record
from runfold.core.speakers import Letter, Runtime, parse_source

CLEAR: Final = "clear_tool_results"
SUMMARY: Final = "summary"
COMPACTION_PURPOSE: Final = "compaction"
"""The `purpose` of a summary call's `model_called` (its reply is not a turn). Every compaction
line's cause is `Cause.COMPACTION` (DESIGN.md §10)."""

CLEARED_NOTE: Final = "tool result cleared by compaction; the ledger keeps it at this seq"

SUMMARY_HEAD: Final = (
    "Summary of the earlier part of this run, written at a compaction (the ledger keeps every "
    "original message):"
)

SUMMARY_ASK: Final = (
    "The conversation is about to be compacted. Write a concise summary of everything above: "
    "the task, what was done, what was found (names, paths, figures), and what remains. "
    "Answer with the summary text only; do not call a tool."
)
"""The runtime's request that closes a summary call's messages (rendered `runtime: …`)."""


def is_compaction_call(called: ModelCalled) -> bool:
    """True for a summary call's `model_called` (`purpose: compaction`): its request is not the
    run's conversation and its reply does not join it (DESIGN.md §10)."""
    return called.extra.get("purpose") == COMPACTION_PURPOSE


def cleared_content(seq: int) -> str:
    """The `tool_result` content that replaces a cleared result: compact canonical JSON
    `{"note", "seq"}` (seq: the `tool_result` line that holds the full result)."""
    return encode_json({"note": CLEARED_NOTE, "seq": seq}).decode("utf-8")


def summary_text(summary: str) -> str:
    """The text block a summary puts in the window: the runtime's voice (`runtime: …` on every
    line, `speakers.Runtime`), never the person's."""
    return Runtime().render(f"{SUMMARY_HEAD}\n{summary.strip()}")


def summary_request_messages(messages: Sequence[Message], through: int) -> list[Message]:
    """The messages of the summary call that replaces `messages[1:through]`: those
    `messages[:through]`, the last (a user message) extended with the runtime's `SUMMARY_ASK`."""
    head: list[Message] = [{"role": m["role"], "content": list(m["content"])} for m in messages[:through]]
    last: list[Block] = head[-1]["content"]
    last.append(text_block(Runtime().render(SUMMARY_ASK)))
    return head


def _is_cleared(block: Block) -> bool:
    return block["kind"] == "tool_result" and block["content"].startswith('{"note":"' + CLEARED_NOTE)


def _waves(messages: Sequence[Message]) -> list[int]:
    """Indices of the user messages that answer a wave (they hold tool_result blocks)."""
    return [
        i
        for i, m in enumerate(messages)
        if m["role"] == "user" and any(b["kind"] == "tool_result" for b in m["content"])
    ]


def plan_clear(messages: Sequence[Message], keep_waves: int) -> list[str]:
    """The `tool_use_id`s whose results a `clear_tool_results` compaction clears: every result
    not yet cleared in a wave older than the last `keep_waves` waves, in message order."""
    answered = _waves(messages)
    old = answered[: max(0, len(answered) - keep_waves)]
    return [
        b["tool_use_id"]
        for i in old
        for b in messages[i]["content"]
        if b["kind"] == "tool_result" and not _is_cleared(b)
    ]


def plan_summary(messages: Sequence[Message], keep_waves: int) -> int | None:
    """How many leading messages a `summary` compaction replaces (`through`): message 0 (kept,
    with the summary appended) and the exchanges before the last `max(1, keep_waves)`; the tail
    starts at an assistant message, so no wave is split. None when there is nothing to replace
    (fewer than two exchanges beyond those kept) or the shape is not `[user, (assistant, user)*]`."""
    n = len(messages)
    if n % 2 == 0 or any(m["role"] != ("user" if i % 2 == 0 else "assistant") for i, m in enumerate(messages)):
        return None
    exchanges = (n - 1) // 2
    replaced = exchanges - max(1, keep_waves)
    if replaced < 1:
        return None
    return 1 + 2 * replaced


@dataclass(frozen=True)
class Change:
    """A conversation change as `context_changed` carries it: `strategy`, the cleared ids or
    `through` and the `summary` text."""

    strategy: str
    cleared: tuple[str, ...] = ()
    through: int = 0
    summary: str = ""
    failed: str | None = None
    """Why a summary call left the window as it was (the line changes nothing)."""
    imported: bool = False
    """A compaction another runtime made, read from an imported session: `summary` is the text
    its model saw (put in the runtime's voice without runfold's head), `through` may be the
    whole window (every exchange replaced) and the window may end on a reply without calls."""
    keep_opening: bool = True
    """False (imported only) when the summary replaced message 0 as well: the window after it
    starts with the summary, as the source runtime's did."""

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Change:
        """Read a `context_changed` payload's conversation fields. Raises `E_INVALID_ARGS`
        naming the field for an unknown strategy or a field of the wrong type."""
        strategy = data.get("strategy")
        if strategy == CLEAR:
            cleared = data.get("cleared")
            if not isinstance(cleared, list) or not all(isinstance(c, str) for c in cleared) or not cleared:
                raise invalid_args("read a compaction", "data.cleared", "give the cleared tool_use ids")
            return cls(CLEAR, cleared=tuple(cleared))
        failed = data.get("failed")
        if strategy == SUMMARY and isinstance(failed, str):
            return cls(SUMMARY, failed=failed)
        if strategy == SUMMARY:
            through, summary = data.get("through"), data.get("summary")
            if isinstance(through, bool) or not isinstance(through, int) or not isinstance(summary, str):
                raise invalid_args("read a compaction", "data.through", "give through (int) and summary (text)")
            if not summary.strip():
                raise invalid_args("read a compaction", "data.summary", "a summary is never empty")
            imported, keep = data.get("imported", False), data.get("keep_opening", True)
            if not isinstance(imported, bool) or not isinstance(keep, bool) or (not keep and not imported):
                raise invalid_args(
                    "read a compaction",
                    "data.imported, data.keep_opening",
                    "give booleans; keep_opening false only on an imported compaction",
                )
            return cls(SUMMARY, through=through, summary=summary, imported=imported, keep_opening=keep)
        raise invalid_args(
            "read a compaction", "data.strategy", "use a known strategy", nearby=(CLEAR, SUMMARY)
        )


def apply_change(conv: Conversation, change: Change, seq: int) -> Conversation:
    """The conversation after `change`, recorded at `seq` (DESIGN.md §10): a new `Conversation`
    whose next `mark_sent` says `rewritten`; `conv` is not modified.

    Raises `E_INVALID_ARGS` when the conversation is not at a turn boundary with nothing held
    (not sendable, text held), a cleared id answers no result of the window, or `through` does not
    end on a whole exchange of at least one (an odd index past message 2, short of the end). An
    imported compaction (`Change.imported`) may also stand after a reply without calls and
    replace no exchange (`through` 1) or all of them (`through` = the number of messages)."""
    at_boundary = conv.is_sendable or (
        change.imported and len(conv) > 0 and not conv.open_calls
    )
    if not at_boundary or conv.held:
        raise invalid_args(
            "compact the conversation (not at a turn boundary)",
            f"seq {seq}",
            "compact only before a request is assembled, with every call answered and nothing held",
        )
    if change.failed is not None:
        return conv
    messages = conv.messages
    sources = conv.sources
    sent_before = conv.check_extends_last_sent() != "first"
    if change.strategy == CLEAR:
        todo = set(change.cleared)
        for msg, srcs in zip(messages, sources, strict=True):
            for j, b in enumerate(msg["content"]):
                if b["kind"] == "tool_result" and b["tool_use_id"] in todo:
                    todo.discard(b["tool_use_id"])
                    msg["content"][j] = {**b, "content": cleared_content(srcs[j].seq)}
        if todo:
            raise invalid_args(
                "clear tool results the window does not hold",
                f"seq {seq}",
                "name tool_use ids of results in the conversation",
                nearby=tuple(sorted(todo))[:4],
            )
        return Conversation.compacted_from(messages, sources, sent_before)
    k = change.through
    whole = change.imported and (k == len(messages) or (k >= 1 and k % 2 == 1 and k < len(messages)))
    if not whole and (k < 3 or k % 2 == 0 or k >= len(messages)):
        raise invalid_args(
            f"replace {k} leading messages by a summary",
            f"seq {seq}",
            f"replace whole exchanges: an odd count from 3 to {len(messages) - 2}",
        )
    source = BlockSource(seq, Cause.COMPACTION)
    kept = [
        (b, s)
        for b, s in zip(messages[0]["content"], sources[0], strict=True)
        if s.cause != Cause.COMPACTION and change.keep_opening
    ]
    said = Runtime().render(change.summary) if change.imported else summary_text(change.summary)
    first: Message = {"role": "user", "content": [b for b, _ in kept] + [text_block(said)]}
    return Conversation.compacted_from(
        [first, *messages[k:]], [[s for _, s in kept] + [source], *sources[k:]], sent_before
    )


def landings_after(before: Conversation, after: Conversation, landed: Sequence[int], seq: int) -> list[int]:
    """Where each block of `after` entered the window, given `landed` (one seq per block of
    `before`, in order) and the compaction line `seq`: a block the change kept keeps its landing
    (matched by its source line, cause and rank among that line's blocks, whatever object now
    holds it); a block the change wrote (a summary, a cleared marker) lands at `seq`."""

    def keys(conv: Conversation) -> list[tuple[int, str, int]]:
        seen: dict[tuple[int, str], int] = {}
        out = []
        for row in conv.sources:
            for src in row:
                n = seen[(src.seq, src.cause)] = seen.get((src.seq, src.cause), -1) + 1
                out.append((src.seq, src.cause, n))
        return out

    old = dict(zip(keys(before), landed, strict=True))
    return [old.get(key, seq) for key in keys(after)]


def change_data(change: Change) -> dict[str, Json]:
    """The strategy's own fields of a `context_changed` line (see `Change.of`)."""
    if change.strategy == CLEAR:
        return {"strategy": CLEAR, "cleared": list(change.cleared)}
    if change.failed is not None:
        return {"strategy": SUMMARY, "failed": change.failed}
    data: dict[str, Json] = {"strategy": SUMMARY, "through": change.through, "summary": change.summary}
    if change.imported:
        data["imported"] = True
    if not change.keep_opening:
        data["keep_opening"] = False
    return data


SUMMARY_BACKOFF_CAP: Final = 64
"""The most turns a run waits before it tries a summary again after failed ones."""


@dataclass
class SummaryBackoff:
    """Failed summaries in a row and the run's model calls since the last one, folded from a
    lineage in ledger order (so a fork or successor waits as its mother would have): after the
    k-th failure in a row the `summary` strategy waits `2**(k-1)` turns (at most
    `SUMMARY_BACKOFF_CAP`) before it is tried again, so a model that cannot summarise is not
    asked at every boundary (DESIGN.md §10: the run goes on under the cheaper strategies). A
    summary that changes the window resets it. Feed every line, inherited ones first; the live
    loop counts a turn with `turn()`."""

    failures: int = 0
    turns_since: int = 0

    def feed(self, rec: Record) -> None:
        if not rec.known:
            return
        if rec.kind is Kind.MODEL_CALLED:
            if not is_compaction_call(rec.typed(ModelCalled)):
                self.turn()
        elif rec.kind is Kind.CONTEXT_CHANGED:
            changed = rec.typed(ContextChanged)
            if changed.region == "conversation" and changed.extra.get("strategy") == SUMMARY:
                if isinstance(changed.extra.get("failed"), str):
                    self.failures += 1
                    self.turns_since = 0
                else:
                    self.failures = 0

    def turn(self) -> None:
        """One model call of the run's own turns (not a summary call)."""
        self.turns_since += 1

    def ready(self) -> bool:
        """Whether the summary strategy may be tried at this boundary."""
        return self.failures == 0 or self.turns_since >= min(2 ** (self.failures - 1), SUMMARY_BACKOFF_CAP)


# ---- reminders ------------------------------------------------------------------------------

REMINDER_THRESHOLDS: Final = "thresholds"
"""The `steer_received` field of a runtime reminder: the `reminders_permille` thresholds it
answers (every threshold at or above the share of the budget left when it was written)."""


def is_reminder(steer: SteerReceived) -> bool:
    """True for a runtime reminder of the budget left: a `runtime` steer whose `cause` is
    `framework` (DESIGN.md §10: the runtime's own addition, delivered through the steer door)."""
    return steer.source == "runtime" and steer.extra.get("cause") == Cause.FRAMEWORK.value


def is_reply_letter(steer: SteerReceived) -> bool:
    """True for a letter of kind `reply` (`@<address> … kind=reply …`): a delegated child's
    answer gathered back into its parent's window."""
    if not steer.source.startswith("@"):
        return False
    try:
        speaker = parse_source(steer.source)
    except RunfoldError:
        return False
    return isinstance(speaker, Letter) and speaker.kind == "reply"


def steer_cause(steer: SteerReceived) -> Cause:
    """The cause of the text a `steer_received` line puts in the window: `framework` for a
    runtime reminder (`is_reminder`), `fan_out` for a delegated child's reply letter
    (`is_reply_letter`), else `message` (DESIGN.md §10)."""
    if is_reminder(steer):
        return Cause.FRAMEWORK
    return Cause.FAN_OUT if is_reply_letter(steer) else Cause.MESSAGE


@dataclass
class Reminded:
    """The thresholds already reminded in the current compaction cycle, folded from a run's
    lineage in ledger order (so a fork or a successor knows them without process memory): a
    reminder adds its `thresholds`; a conversation compaction that changed the window starts a
    new cycle (clears them). Feed every line, inherited ones first."""

    thresholds: set[int] = field(default_factory=set)

    def feed(self, rec: Record) -> None:
        if not rec.known:
            return
        if rec.kind is Kind.STEER_RECEIVED:
            steer = rec.typed(SteerReceived)
            given = steer.extra.get(REMINDER_THRESHOLDS)
            if is_reminder(steer) and isinstance(given, list):
                self.thresholds.update(t for t in given if isinstance(t, int) and not isinstance(t, bool))
        elif rec.kind is Kind.CONTEXT_CHANGED:
            changed = rec.typed(ContextChanged)
            if changed.region == "conversation" and not isinstance(changed.extra.get("failed"), str):
                self.thresholds.clear()
