"""The conversation: the volatile half of every request, folded forward turn by turn (DESIGN.md §6).

One invariant is enforced at every entrance: all user content (opening, steers, reminders, tool
results) joins the open user message, so two adjacent user messages never exist; and a message
already sent is never edited, so request n+1 extends request n and the prompt cache holds. Every
block carries a `BlockSource` (the ledger line that put it there and its cause, §10) in a
structure parallel to the messages, for the `why` fold.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from runfold.core.causes import CAUSES as CAUSES  # the §10 wire names, one source
from runfold.core.errors import ErrorCode, RunfoldError, invalid_args
from runfold.core.messages import (
    Block,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    check_block,
    is_blank_text,
    text_block,
)
from runfold.core.speakers import parse_source

Shape = Literal["first", "extended", "reopened", "rewritten"]
"""How a request's conversation relates to the previous request's (`prompt_shape_compared`)."""

Placement = Literal["joined", "opened", "held"]
"""Where user text went: joined the open user message, opened a new one, or was held."""


@dataclass(frozen=True, slots=True)
class BlockSource:
    """Who put a block into the window: the ledger `seq` of the line and its §10 `cause`.

    Raises `E_INVALID_ARGS` for a negative seq or a cause that is not a DESIGN.md §10 wire name.
    """

    seq: int
    cause: str

    def __post_init__(self) -> None:
        if self.seq < 0:
            raise invalid_args("attribute block", f"seq {self.seq}", "give the seq of a ledger line (≥ 0)")
        if self.cause not in CAUSES:
            raise invalid_args(
                f"attribute block to cause {self.cause!r}",
                f"seq {self.seq}",
                "use one of the DESIGN.md §10 causes",
                nearby=CAUSES,
            )


@dataclass(frozen=True, slots=True)
class HeldText:
    """User text waiting for a place: its text block and where it came from."""

    block: TextBlock
    source: BlockSource


def _copy_message(msg: Message) -> Message:
    return {"role": msg["role"], "content": [b.copy() for b in msg["content"]]}


def _tool_use_ids(content: Sequence[Block]) -> list[str]:
    return [b["id"] for b in content if b["kind"] == "tool_use"]


class Conversation:
    """The messages of a run's requests, with the parallel block sources (DESIGN.md §6).

    States: *sendable* (`sendable_problem() is None`): at least one message, the first and the
    last are user messages, no tool call is unanswered. After `mark_sent()` the messages present
    are *sent*: user text that arrives while the last (user) message is sent, or while the last
    reply's tool calls are unanswered, is *held* and lands after the next tool results (or via
    `flush_held()` when the reply asked for no tools). Text blocks are never blank: blank user
    text is refused at its entrance, blank text in a model reply is dropped (providers refuse
    empty text; the ledger keeps the reply as it came). Methods that refuse raise `RunfoldError`
    `E_INVALID_ARGS` naming the seq of the offending line; a refused call changes nothing.
    """

    __slots__ = (
        "_compacted",
        "_counts",
        "_held",
        "_ids",
        "_messages",
        "_open_calls",
        "_replied",
        "_sent",
        "_sent_counts",
        "_sources",
    )

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._counts: list[int] = []  # blocks per message, kept at every change (not rescanned)
        self._ids: set[str] = set()  # every tool_use id in the messages (kept, not rescanned)
        self._sources: list[list[BlockSource]] = []
        self._sent = 0
        self._sent_counts: list[int] | None = None
        self._held: list[HeldText] = []
        self._open_calls: list[str] = []
        self._replied = False
        self._compacted = False

    # ---- views -----------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """A copy of the messages: `[{role: user|assistant, content: [block, ...]}, ...]`."""
        return [_copy_message(m) for m in self._messages]

    def messages_view(self) -> tuple[Message, ...]:
        """The messages themselves, not copies (O(messages) at C speed; no block is copied).

        Read-only by contract: the caller must not edit them. A message object stays the same
        while the conversation lives; later calls may show it with blocks appended (the open
        last message) — blocks already present are never edited or replaced, which is what
        lets the incremental renderer reuse what it rendered (DESIGN.md §6).
        """
        return tuple(self._messages)

    @property
    def sources(self) -> list[list[BlockSource]]:
        """A copy of the block sources, parallel to `messages` (one per block)."""
        return [list(s) for s in self._sources]

    @property
    def block_count(self) -> int:
        """How many blocks the messages hold (from the counts kept at every change; no copy)."""
        return sum(self._counts)

    @property
    def sent_count(self) -> int:
        """How many leading messages are sent (never edited again). When it equals
        `len(messages)` and the last message is a user message, new user text is held."""
        return self._sent

    @property
    def held(self) -> list[HeldText]:
        """User text waiting to land, in arrival order."""
        return list(self._held)

    @property
    def open_calls(self) -> list[str]:
        """Ids of the last reply's tool calls that await their results (the open wave)."""
        return list(self._open_calls)

    def __len__(self) -> int:
        return len(self._messages)

    def sendable_problem(self) -> str | None:
        """None when the messages form a request a provider accepts by shape; else why not."""
        if not self._messages:
            return "the conversation is empty"
        if self._messages[0]["role"] != "user":
            return "the first message is not a user message"
        if self._open_calls:
            return "tool calls are unanswered: " + ", ".join(self._open_calls)
        if self._messages[-1]["role"] != "user":
            return "the last message is an assistant reply (no user turn to answer)"
        return None

    @property
    def is_sendable(self) -> bool:
        """True in a state a request may be assembled from (see `sendable_problem`)."""
        return self.sendable_problem() is None

    def copy(self) -> Conversation:
        """An independent copy (a fold may branch it, e.g. to plan a fork)."""
        other = Conversation()
        other._messages = self.messages
        other._counts = list(self._counts)
        other._ids = set(self._ids)
        other._sources = self.sources
        other._sent = self._sent
        other._sent_counts = None if self._sent_counts is None else list(self._sent_counts)
        other._held = list(self._held)
        other._open_calls = list(self._open_calls)
        other._replied = self._replied
        other._compacted = self._compacted
        return other

    # ---- user content ----------------------------------------------------------------

    def _user_block(self, text: str, source: BlockSource, what: str) -> TextBlock:
        if not isinstance(text, str) or not text.strip():
            raise invalid_args(
                f"add {what} (empty or whitespace-only text)",
                f"seq {source.seq}",
                "give visible text: providers refuse empty text blocks",
            )
        return text_block(text)

    def _land(self, blocks: list[Block], sources: list[BlockSource], *, results: bool = False) -> Placement:
        """The one door for user content that is not held: join the open user message, else open
        a new one. Held text is drained with it: after tool `results` (tool_result blocks come
        first), before user text (it arrived earlier). Callers ensure it may land."""
        held_blocks: list[Block] = [h.block for h in self._held]
        held_sources = [h.source for h in self._held]
        self._held = []
        if results:
            blocks, sources = blocks + held_blocks, sources + held_sources
        else:
            blocks, sources = held_blocks + blocks, held_sources + sources
        if self._messages and self._messages[-1]["role"] == "user":
            self._messages[-1]["content"].extend(blocks)
            self._counts[-1] += len(blocks)
            self._sources[-1].extend(sources)
            return "joined"
        self._messages.append({"role": "user", "content": blocks})
        self._counts.append(len(blocks))
        self._sources.append(sources)
        return "opened"

    def _must_hold(self) -> bool:
        if self._open_calls:
            return True
        return (
            bool(self._messages)
            and self._messages[-1]["role"] == "user"
            and self._sent >= len(self._messages)
        )

    def open_with(self, text: str, source: BlockSource) -> Placement:
        """Add the opening text (see `speakers.render_opening`) as user content.

        On a fresh conversation it opens the first user message; on an inherited one it joins
        the last user message, or opens the next after an assistant reply. Raises
        `E_INVALID_ARGS` for empty text or when the conversation is mid-wave or already sent.
        """
        block = self._user_block(text, source, "opening")
        if self._must_hold() or self._held:
            raise invalid_args(
                "add opening after the run has sent requests",
                f"seq {source.seq}",
                "open a run once, before its first request",
            )
        return self._land([block], [source])

    def add_user_text(self, text: str, source: BlockSource) -> Placement:
        """Add a steer or reminder (already rendered, see `speakers`) as user content.

        It joins the open user message; it is *held* when that message was already sent or the
        last reply's tool calls are unanswered (it then lands after the next tool results, or
        via `flush_held`). After an assistant reply without calls it opens the next user
        message (text held earlier lands first). Returns where it went. Raises `E_INVALID_ARGS`
        for empty or whitespace-only text.
        """
        block = self._user_block(text, source, "user text")
        if self._must_hold():
            self._held.append(HeldText(block, source))
            return "held"
        return self._land([block], [source])

    def add_steer(self, speaker_source: str, text: str, source: BlockSource) -> Placement:
        """`add_user_text` of `speakers.render_steer(speaker_source, text)`: a recorded
        `steer_received {source, text}`. Raises `E_INVALID_ARGS` for an unknown source."""
        return self.add_user_text(parse_source(speaker_source).render(text), source)

    def flush_held(self) -> bool:
        """Deliver held text when the last reply asked for no tools (DESIGN.md §6): it opens the
        next user message after a reply with content, or, after an empty reply, extends the
        sent user message and reopens it. Returns True when text was delivered (the run takes
        another turn instead of ending). Does nothing (False) while no reply has come back to
        the last request, while tool calls are unanswered, or when nothing is held.
        """
        if not self._held or self._open_calls or not self._replied:
            return False
        if self._messages and self._messages[-1]["role"] == "user":
            self._sent = min(self._sent, len(self._messages) - 1)
        self._land([], [])
        return True

    # ---- assistant replies and tool results --------------------------------------------

    def add_reply(self, blocks: Sequence[Block], source: BlockSource) -> bool:
        """Add an assistant reply (the content of `model_returned.message`).

        A reply answers the request before it, so every message present becomes sent. Text
        blocks that are empty or whitespace-only are dropped (providers refuse them); a reply
        with no content left pushes no message (returns False). Its `tool_use` blocks open a
        wave: user text is held until `add_tool_results`. Raises `E_INVALID_ARGS` naming
        `seq` and the block index for a malformed block, a tool call id used before or twice,
        or when there is no user turn to reply to (empty conversation, last message an
        assistant reply, or tool calls still unanswered).
        """
        where = f"seq {source.seq}"
        if not self._messages or self._messages[-1]["role"] != "user" or self._open_calls:
            raise invalid_args(
                "add reply with no user turn before it",
                where,
                "add a reply only after a request was assembled from a sendable conversation",
            )
        content: list[Block] = []
        known = self._ids  # read here, updated at the commit below (never copied: O(reply))
        seen: set[str] = set()
        for i, raw in enumerate(blocks):
            block = check_block(raw, f"{where} message.content[{i}]").copy()
            if is_blank_text(block):
                continue
            if block["kind"] == "tool_use":
                call_id = block["id"]
                if call_id in seen or call_id in known:
                    raise invalid_args(
                        f"add reply with duplicate tool call id {call_id!r}",
                        f"{where} message.content[{i}]",
                        "tool call ids must be unique within a conversation",
                    )
                seen.add(call_id)
            elif block["kind"] == "tool_result":
                raise invalid_args(
                    "add reply holding a tool_result block",
                    f"{where} message.content[{i}]",
                    "tool results come from tool_result lines, not from a model reply",
                )
            content.append(block)
        self._sent = len(self._messages)
        self._replied = True
        if not content:
            return False
        self._messages.append({"role": "assistant", "content": content})
        self._counts.append(len(content))
        self._sources.append([source] * len(content))
        self._open_calls = _tool_use_ids(content)
        self._ids.update(self._open_calls)
        return True

    def add_tool_results(
        self,
        blocks: Sequence[Block],
        sources: Sequence[BlockSource],
        calls: Sequence[Block] = (),
        call_sources: Sequence[BlockSource] = (),
    ) -> None:
        """Add the results of one complete wave; they start the next user message, tool_result
        blocks first (in call order), then the held text in arrival order.

        `calls` are the wave's `tool_use` blocks as recorded by `tool_called` lines (see
        `tool_result.tool_use_block_of`), with `call_sources`. A call the last reply lacks — a
        reply stored without its calls, like the foreign `{}` replies — is written into the
        transcript: appended to the last (unsent) reply, or, after an empty reply, as a new
        assistant message. This is how runfold keeps DESIGN.md §6's exception (results after
        an empty reply) a history providers accept: the sent user message is never edited and
        a `tool_result` is never without its `tool_use`.

        Raises `E_INVALID_ARGS` naming the seqs when the lengths of blocks/sources or
        calls/call_sources differ, a block is not a `tool_result`, an id is answered twice, a
        result answers no call of this wave, or a call of the wave has no result (a wave is
        complete only when every call has a result; resume closes missing ones with an error).
        """
        where = f"seqs {[s.seq for s in sources]}"
        if len(blocks) != len(sources) or len(calls) != len(call_sources):
            raise invalid_args(
                "add tool results with mismatched sources",
                where,
                "give one source per result block and one per call block",
            )
        if not blocks:
            raise invalid_args("add an empty wave", where, "add tool results only for a wave with calls")
        # One pass: the results, then the wave's calls — those of the last reply, plus recorded
        # calls it lacks (nothing here changes state).
        results: dict[str, tuple[ToolResultBlock, BlockSource]] = {}
        last_is_reply = bool(self._messages) and self._messages[-1]["role"] == "assistant"
        wave = list(self._open_calls)
        in_wave = set(wave)
        known = self._ids  # not changed before the commit below
        extra_calls: list[Block] = []
        extra_sources: list[BlockSource] = []
        for what, raws, srcs in (("result", blocks, sources), ("call", calls, call_sources)):
            for i, (raw, src) in enumerate(zip(raws, srcs, strict=True)):
                block = check_block(raw, f"seq {src.seq} {what}[{i}]").copy()
                if what == "result" and block["kind"] == "tool_result":
                    if block["tool_use_id"] in results:
                        raise invalid_args(
                            f"add two results for tool call {block['tool_use_id']!r}",
                            f"seq {src.seq}",
                            "answer each call once",
                        )
                    results[block["tool_use_id"]] = (block, src)
                elif what == "call" and block["kind"] == "tool_use":
                    if block["id"] in in_wave:
                        continue
                    if block["id"] in known:
                        raise invalid_args(
                            f"add tool call {block['id']!r} again",
                            f"seq {src.seq}",
                            "tool call ids must be unique within a conversation",
                        )
                    extra_calls.append(block)
                    extra_sources.append(src)
                    wave.append(block["id"])
                    in_wave.add(block["id"])
                else:
                    raise invalid_args(
                        f"add {block['kind']} block as a tool {what}", f"seq {src.seq}", _WAVE_RECOVERY[what]
                    )
        if not wave:
            raise invalid_args(
                "add tool results with no call before them",
                where,
                "give the wave's calls (tool_called lines) so each result follows its tool_use",
            )
        missing = [c for c in wave if c not in results]
        unknown = [c for c in results if c not in in_wave]
        if missing or unknown:
            parts = []
            if missing:
                parts.append("calls without a result: " + ", ".join(missing))
            if unknown:
                parts.append("results for no call of this wave: " + ", ".join(unknown))
            raise invalid_args(
                "add incomplete tool wave (" + "; ".join(parts) + ")",
                where,
                "add a wave only when every call has exactly one result; close a missing one with an error result",
            )

        # Commit (nothing above changed state).
        if extra_calls:
            self._ids.update(wave)  # the open calls' ids are in already
            if last_is_reply:
                self._messages[-1]["content"].extend(extra_calls)
                self._counts[-1] += len(extra_calls)
                self._sources[-1].extend(extra_sources)
            else:
                self._messages.append({"role": "assistant", "content": extra_calls})
                self._counts.append(len(extra_calls))
                self._sources.append(extra_sources)
        self._open_calls = []
        ordered = [results[c] for c in wave]
        self._land([b for b, _ in ordered], [s for _, s in ordered], results=True)

    def drop_open_wave(self) -> bool:
        """Drop the last reply when its tool calls are unanswered (a cut inside a wave drops it
        whole, DESIGN.md §7). The reply was never sent, so no sent message is edited; held text
        stays held. Returns whether a reply was dropped."""
        if not self._open_calls:
            return False
        dropped = self._messages.pop()
        self._counts.pop()
        self._sources.pop()
        self._ids.difference_update(_tool_use_ids(dropped["content"]))
        self._open_calls = []
        return True

    # ---- sending -----------------------------------------------------------------------

    def mark_sent(self) -> Shape:
        """Mark every message present as sent (called when a request was assembled,
        `prompt_shape_compared`) and return how this request relates to the previous one:
        `first`, `extended` (whole messages appended), or `reopened` (the previous last message
        was extended, the DESIGN.md §6 exception; possibly messages appended too).

        Raises `E_INVALID_ARGS` when the conversation is not sendable (see `sendable_problem`),
        `E_INTERNAL` if a sent message was edited (a runfold bug).
        """
        problem = self.sendable_problem()
        if problem is not None:
            raise invalid_args(f"mark conversation sent ({problem})", "the conversation", _SENDABLE_RECOVERY)
        counts = list(self._counts)
        shape = "rewritten" if self._compacted else _shape_of_counts(self._sent_counts, counts)
        if shape == "rewritten" and not self._compacted:  # unreachable by construction: a bug
            raise RunfoldError(
                code=ErrorCode.INTERNAL,
                action="mark conversation sent (a sent message was edited)",
                subject="the conversation",
                recovery="report this as a runfold bug with the ledger",
            )
        self._sent_counts = counts
        self._sent = len(self._messages)
        self._replied = False
        self._compacted = False
        return shape

    def check_extends_last_sent(self) -> Shape:
        """The shape `mark_sent` would return now, without marking: `first`, `extended`,
        `reopened`, or `rewritten` (which never happens unless the invariant is broken). Cheap:
        compares block counts kept at every change (ints, C speed; no message is read). The run
        loop may assert it is not `rewritten` before sending, unless `compacted`."""
        if self._compacted:
            return "rewritten"
        return _shape_of_counts(self._sent_counts, self._counts)

    @property
    def compacted(self) -> bool:
        """True when this conversation is a compaction's result not yet marked sent: its next
        request is `rewritten` on purpose (DESIGN.md §10), then requests extend again."""
        return self._compacted

    # ---- compaction ------------------------------------------------------------------

    @classmethod
    def compacted_from(
        cls, messages: Sequence[Message], sources: Sequence[Sequence[BlockSource]], sent_before: bool
    ) -> Conversation:
        """The conversation a compaction leaves (see `core.compaction.apply_change`): `messages`
        checked like `inherit`; when the run had sent requests (`sent_before`), the next
        `mark_sent` returns `rewritten`. Raises like `inherit`."""
        conv = cls.inherit(messages, sources)
        conv._compacted = sent_before
        return conv

    # ---- inheritance -----------------------------------------------------------------

    @classmethod
    def inherit(cls, messages: Sequence[Message], sources: Sequence[Sequence[BlockSource]]) -> Conversation:
        """A conversation starting from a mother's messages (a fork or a successor, DESIGN.md
        §7), verbatim; nothing is sent yet in the new run, so its opening joins the last user
        message. Raises `E_INVALID_ARGS` naming the message index when the shape is not one a
        Conversation produces: roles not alternating or not starting with user, a tool call
        without its result in the next message, a blank text block, or sources not parallel.
        """
        conv = cls()
        if len(messages) != len(sources):
            raise invalid_args("inherit conversation", "sources", "give one source list per message")
        expected: Role = "user"
        for i, (msg, srcs) in enumerate(zip(messages, sources, strict=True)):
            where = f"message {i}"
            role = msg.get("role") if isinstance(msg, dict) else None
            content = msg.get("content") if isinstance(msg, dict) else None
            if role != expected or not isinstance(content, list) or not content:
                raise invalid_args(
                    "inherit conversation (roles must alternate from user, each message non-empty)",
                    where,
                    "inherit only messages a Conversation produced",
                )
            if len(srcs) != len(content):
                raise invalid_args("inherit conversation", f"{where} sources", "give one source per block")
            blocks = [check_block(b, f"{where}.content[{j}]").copy() for j, b in enumerate(content)]
            if any(is_blank_text(b) for b in blocks):
                raise invalid_args("inherit conversation (blank text block)", where, "drop blank text blocks")
            if role == "user":
                answered = [b["tool_use_id"] for b in blocks if b["kind"] == "tool_result"]
                calls = _tool_use_ids(conv._messages[-1]["content"]) if i > 0 else []
                if sorted(answered) != sorted(calls):
                    raise invalid_args(
                        "inherit conversation (tool calls and results do not match)",
                        where,
                        "cut the mother at a safe point outside a wave",
                    )
            conv._messages.append({"role": expected, "content": blocks})
            conv._counts.append(len(blocks))
            conv._ids.update(_tool_use_ids(blocks))
            conv._sources.append(list(srcs))
            expected = "assistant" if expected == "user" else "user"
        if conv._messages and conv._messages[-1]["role"] == "assistant":
            if _tool_use_ids(conv._messages[-1]["content"]):
                raise invalid_args(
                    "inherit conversation (it ends inside a wave)",
                    f"message {len(messages) - 1}",
                    "cut the mother at a safe point outside a wave",
                )
        return conv


_WAVE_RECOVERY = {
    "result": "give tool_result blocks (see tool_result.tool_result_block)",
    "call": "give tool_use blocks (see tool_result.tool_use_block_of)",
}

_SENDABLE_RECOVERY = (
    "assemble a request only when the last message is a user message and every tool call has its result"
)


def _content_counts(messages: list[Message]) -> list[int]:
    """Blocks per message, read from the messages: the reference the kept `_counts` are tested
    against."""
    return list(map(len, map(_CONTENT, messages)))


_CONTENT = operator.itemgetter("content")


def _shape_of_counts(previous: list[int] | None, current: list[int]) -> Shape:
    if previous is None or not previous:
        return "first"
    n = len(previous)
    if len(current) < n or current[: n - 1] != previous[: n - 1]:
        return "rewritten"
    if current[n - 1] == previous[n - 1]:
        return "extended"
    if current[n - 1] > previous[n - 1]:
        return "reopened"
    return "rewritten"


def conversation_shape(previous: Sequence[Message] | None, current: Sequence[Message]) -> Shape:
    """How `current` relates to the `previous` request's messages, by content (DESIGN.md §6):
    `first` (no previous), `extended` (previous is a prefix at message granularity),
    `reopened` (all but the previous last message are a prefix and that message's blocks are a
    prefix of its counterpart's), else `rewritten` (a sent message was edited: the prompt cache
    breaks and, for runfold's own conversations, a bug)."""
    if not previous:
        return "first"
    n = len(previous)
    if len(current) < n or list(current[: n - 1]) != list(previous[: n - 1]):
        return "rewritten"
    before, after = previous[n - 1], current[n - 1]
    if before == after:
        return "extended"
    b_content, a_content = before.get("content", []), after.get("content", [])
    if (
        before.get("role") == after.get("role")
        and len(a_content) > len(b_content)
        and a_content[: len(b_content)] == b_content
    ):
        return "reopened"
    return "rewritten"
