"""The window manager of a run: compaction and reminders at the turn boundary (DESIGN.md §5 step
1–2, §10). Before each request is assembled it measures the conversation the way the budget is
measured, and when it passes its budget applies the `[context] compaction` strategies cheapest
first, each as one `context_changed` line the run fold applies — so the request is rendered from
exactly the window replay and forks rebuild. A summary is made by a model call on the ledger.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from runfold.core.canonical import content_hash, encode_json
from runfold.core.causes import Cause
from runfold.core.compaction import (
    CLEAR,
    COMPACTION_PURPOSE,
    SUMMARY,
    Change,
    apply_change,
    change_data,
    is_compaction_call,
    plan_clear,
    plan_summary,
    summary_request_messages,
)
from runfold.core.errors import RunfoldError
from runfold.core.kinds import Kind
from runfold.core.messages import Message, check_block
from runfold.core.payloads import BytesRef, ContextChanged, ModelCalled, ModelReturned, SteerReceived
from runfold.core.records import Record
from runfold.core.render import render_request, request_bytes
from runfold.core.tokens import Calibration, calibrate, estimate, model_limits, window_tokens
from runfold.core.validate import ensure_valid
from runfold.core.window import PER_MILLE, Budgets, ContextSettings, budgets
from runfold.providers.base import Provider, Reply, Request
from runfold.runtime.prefix import Prefix
from runfold.store.ledger import RUNTIME, now_ms

if TYPE_CHECKING:
    from runfold.core.tokens import ModelLimits
    from runfold.runtime.executor import RunLoop

DEFAULT_WINDOW: Final = 32_768
"""The context window (tokens) assumed for a model neither `[models]` nor the provider names:
conservative, so an unknown model is compacted early rather than refused."""

LOW_WATER_PERMILLE: Final = 700
"""A compaction goes on, strategy after strategy, until the conversation takes at most this
share of its budget, so the next compaction is many turns away (the prompt cache holds)."""

REMINDER: Final = (
    "The conversation has {left}‰ of its budget left (about {tokens} tokens). When it is full, "
    "older tool results are cleared and earlier exchanges summarised; keep what you still need "
    "in your next replies."
)


@dataclass(frozen=True)
class WindowConfig:
    """What a run's window manager is given: the `[context]` settings, the model's `window` and
    the `output` reserve (tokens), and `source`: where the window came from (`models table`,
    `provider n_ctx`, or `default` — `DEFAULT_WINDOW`)."""

    settings: ContextSettings
    window: int
    output: int
    source: str


def window_config(settings: ContextSettings, models: Mapping[str, ModelLimits], provider: Provider) -> WindowConfig:
    """The window of `provider`'s model: the embedded model's own `n_ctx` when it has one, else
    `[models]`/runfold's table (`core.tokens.model_limits`), else `DEFAULT_WINDOW`; the output
    reserve is the request's `max_tokens` (`provider.settings`), at most the model's output limit."""
    n_ctx = getattr(provider, "n_ctx", None)
    limits = model_limits(provider.model, models)
    output = provider.settings.max_tokens
    if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0:
        window, source = n_ctx, "provider n_ctx"
    elif limits is not None:
        window, source = limits.context_window, "models table"
    else:
        window, source = DEFAULT_WINDOW, "default"
    if limits is not None and limits.max_output_tokens is not None:
        output = min(output, limits.max_output_tokens)
    return WindowConfig(settings, window, output, source)


def conversation_tokens(request_len: int, prefix_len: int, calibration: Calibration | None) -> int:
    """The conversation's tokens in a request of `request_len` bytes whose frozen prefix alone
    renders to `prefix_len` bytes: the calibrated estimate (else bytes/4) of the difference. The
    one measure of the trigger, the reminders and the tests."""
    return estimate(max(0, request_len - prefix_len), calibration).tokens


@dataclass
class _Billed:
    """Running totals of billed calls: `calibrate` over every call so far, in O(1) per call."""

    bytes: int = 0
    tokens: int = 0
    samples: int = 0
    calibration: Calibration | None = None

    def add(self, request_len: int, tokens: int) -> Calibration | None:
        if request_len > 0 and tokens > 0:
            self.bytes += request_len
            self.tokens += tokens
            self.samples += 1
            total = calibrate([(self.bytes, self.tokens)])
            self.calibration = replace(total, samples=self.samples) if total is not None else None
        return self.calibration


def request_measures(lines: Sequence[Record], prefix_len: int) -> list[tuple[int, int, bool]]:
    """`(seq, conversation tokens, is a summary call)` of every `model_called` of a run's own
    `lines`, measured as the trigger measured it before that request: the calibration of the
    replies before it (the live loop learns from its own conversation's replies only)."""
    billed = _Billed()
    calibration: Calibration | None = None
    out: list[tuple[int, int, bool]] = []
    pending: int | None = None
    for rec in lines:
        if not rec.known:
            continue
        if rec.kind is Kind.MODEL_CALLED:
            called = rec.typed(ModelCalled)
            summary = is_compaction_call(called)
            out.append((rec.seq, conversation_tokens(called.request.bytes, prefix_len, calibration), summary))
            pending = None if summary else called.request.bytes
        elif rec.kind is Kind.MODEL_RETURNED and pending is not None:
            usage = rec.typed(ModelReturned).usage
            if usage:
                calibration = billed.add(pending, window_tokens(usage))
            pending = None
    return out


def prefix_bytes(prefix: Prefix) -> int:
    """Bytes of a request holding the frozen prefix and no message."""
    return len(request_bytes(render_request(prefix.dialect, prefix.spec(())).body))


class WindowManager:
    """One run's window manager; the run loop calls `at_boundary` before every assembly and
    `observe` after every reply of its own conversation.

    The conversation's budget is its share of the input window (`core.window.budgets`), at most
    what the frozen prefix leaves of it: a prefix larger than its `system` share takes from the
    conversation instead of refusing a run that fits. Raises `E_CONFIG_INVALID` at construction
    when the window is not larger than the output reserve or the prefix alone does not fit."""

    def __init__(self, loop: RunLoop, config: WindowConfig) -> None:
        self.loop = loop
        self.config = config
        self.prefix_len = prefix_bytes(loop.prefix)
        prefix_tokens = estimate(self.prefix_len).tokens
        model = loop.provider.model
        self.budgets: Budgets = budgets(config.settings, config.window, config.output, 0, model)
        if prefix_tokens > self.budgets.input:
            budgets(config.settings, config.window, config.output, prefix_tokens, model)  # raises
        self.budget = min(self.budgets.regions["conversation"], self.budgets.input - prefix_tokens)
        self.billed = _Billed()
        self.calibration: Calibration | None = None
        self.reminded: set[int] = set()
        self.compactions = 0

    def observe(self, request_len: int, usage: Mapping[str, Any] | None) -> None:
        """Learn tokens per byte from a billed call (`core.tokens.calibrate`)."""
        if usage:
            self.calibration = self.billed.add(request_len, window_tokens(usage))

    def measure(self) -> tuple[int, int]:
        """(conversation tokens, request bytes) of the request the conversation renders now."""
        _, body = self.loop.render()
        return conversation_tokens(len(body), self.prefix_len, self.calibration), len(body)

    async def at_boundary(self) -> None:
        """Compact when the conversation passes its budget, then remind when a threshold of
        the budget left is crossed (DESIGN.md §10). Writes only `context_changed`, a summary
        call's `model_called`/`model_returned`, and `runtime` steers."""
        settings = self.config.settings
        tokens, _ = self.measure()
        if self._remind(tokens):
            tokens, _ = self.measure()
        if tokens > self.budget and settings.compaction:
            target = self.budget * LOW_WATER_PERMILLE // PER_MILLE
            for strategy in settings.compaction:
                if strategy == CLEAR:
                    changed = self._clear(tokens)
                else:
                    changed = await self._summary(tokens)
                if changed:
                    tokens, _ = self.measure()
                    self.reminded.clear()
                    if tokens <= target:
                        break

    # ---- strategies ----------------------------------------------------------------------

    def _conversation(self) -> list[Message]:
        conv = self.loop.folder.conversation
        assert conv is not None
        return list(conv.messages_view())

    def _record(self, change: Change, before: int, extra: Mapping[str, Any] | None = None) -> None:
        """Write one conversation `context_changed` and measure what it did."""
        old = self._conversation()
        revision = self.loop.folder.revision
        sizes_before = _bytes(old)
        data: dict[str, Any] = {**change_data(change), **(extra or {})}
        payload = ContextChanged(region="conversation", cause=Cause.COMPACTION)
        payload.extra.update(data)
        if change.failed is None:
            # the sizes need the result: apply on a copy first (the fold applies the line itself)
            conv = self.loop.folder.conversation
            assert conv is not None
            new = apply_change(conv.copy(), change, self.loop.ledger.next_seq).messages
            removed, added = _delta(old, new, change)
            after = _bytes(new)
        else:
            removed = added = 0
            after = sizes_before
        cal = self.calibration
        tokens_removed = estimate(removed, cal).tokens
        tokens_added = estimate(added, cal).tokens
        payload.token_delta = tokens_added - tokens_removed
        payload.extra.update(
            {
                "bytes_added": added,
                "bytes_removed": removed,
                "tokens_added": tokens_added,
                "tokens_removed": tokens_removed,
                "tokens_before": before,
                "budget": self.budget,
                "revision_before": revision,
                "revision_after": revision + (0 if change.failed is not None else 1),
                "window_bytes_before": sizes_before,
                "window_bytes_after": after,
            }
        )
        self.loop._write(payload, who=RUNTIME)
        if change.failed is None:
            self.compactions += 1

    def _clear(self, tokens: int) -> bool:
        cleared = plan_clear(self._conversation(), self.config.settings.keep_waves)
        if not cleared:
            return False
        self._record(Change(CLEAR, cleared=tuple(cleared)), tokens)
        return True

    async def _summary(self, tokens: int) -> bool:
        messages = self._conversation()
        through = plan_summary(messages, self.config.settings.keep_waves)
        if through is None:
            return False
        text, reply_seq, why = await self._summary_call(messages, through)
        if text is None:
            self._record(Change(SUMMARY, failed=why), tokens, {"summary_seq": reply_seq} if reply_seq else None)
            return False
        self._record(Change(SUMMARY, through=through, summary=text), tokens, {"summary_seq": reply_seq})
        return True

    async def _summary_call(self, messages: list[Message], through: int) -> tuple[str | None, int | None, str]:
        """The summary call (on the ledger, marked `purpose: compaction`): its text and the seq
        of its `model_returned`, or None and why it gave none."""
        loop = self.loop
        prefix = loop.prefix
        rendered = render_request(prefix.dialect, prefix.spec(summary_request_messages(messages, through)))
        ensure_valid(prefix.dialect, rendered.body)
        body = request_bytes(rendered.body)
        request = Request(prefix.dialect, prefix.model, rendered.body, body, stream=False)
        called = ModelCalled(
            model=prefix.model, request=BytesRef(hash=content_hash(body), bytes=len(body)), dialect=prefix.dialect
        )
        called.extra.update({"purpose": COMPACTION_PURPOSE, "strategy": SUMMARY, "through": through})
        loop._write(called)
        loop._flush()  # durable before the provider is called
        start = time.perf_counter_ns()
        sent_ms = now_ms()
        try:
            reply = await loop.points.race(loop.provider.complete(request, None))
        except RunfoldError as err:  # ProviderError included: the run goes on without a summary
            return None, None, f"the summary call failed: {err.display()}"
        except Exception as exc:  # a provider bug: the window stays as it was
            return None, None, f"the summary call failed: {type(exc).__name__}: {str(exc)[:200]}"
        if not isinstance(reply, Reply):  # the safe points' cancel
            return None, None, "the run was cancelled during the summary call"
        blocks = []
        for i, raw in enumerate(reply.blocks):
            try:
                blocks.append(check_block(raw, f"content[{i}]").copy())
            except RunfoldError as err:
                return None, None, f"the summary reply was malformed ({err.subject}: {err.action})"
        usage = reply.usage
        billed = loop.bill(request.model, usage) if usage is not None and loop.bill is not None else None
        took = reply.took_us if reply.took_us is not None else (time.perf_counter_ns() - start) // 1000
        first_at = sent_ms + reply.first_byte_us // 1000 if reply.first_byte_us is not None else None
        rec = loop._write(
            ModelReturned(
                message={"content": [dict(b) for b in blocks]},
                calls=sum(1 for b in blocks if b["kind"] == "tool_use"),
                stop=reply.stop,
                usage=usage.to_data() if usage is not None else None,
                billed_usd_micros=billed,
                first_at=first_at,
                took_us=took,
            )
        )
        text = "\n".join(b["text"] for b in blocks if b["kind"] == "text").strip()
        if not text:
            return None, rec.seq, "the summary call returned no text"
        return text, rec.seq, ""

    # ---- reminders -----------------------------------------------------------------------

    def _remind(self, tokens: int) -> bool:
        """One `runtime` steer when the share of the budget left first falls to a threshold of
        `reminders_permille` in this compaction cycle (the lowest crossed, once); True if written.
        A conversation already past its budget gets none: it is compacted instead."""
        if self.budget <= 0 or tokens > self.budget:
            return False
        left = (self.budget - tokens) * PER_MILLE // self.budget
        crossed = [t for t in self.config.settings.reminders_permille if left <= t and t not in self.reminded]
        if not crossed:
            return False
        self.reminded.update(t for t in self.config.settings.reminders_permille if left <= t)
        text = REMINDER.format(left=left, tokens=self.budget - tokens)
        self.loop._write(SteerReceived(source="runtime", text=text), who=RUNTIME)
        return True


def _bytes(messages: list[Message]) -> int:
    return len(encode_json([dict(m) for m in messages]))


def _delta(old: list[Message], new: list[Message], change: Change) -> tuple[int, int]:
    """(bytes removed, bytes added) of the content a change replaced: the cleared results'
    content and their markers, or the replaced messages and the summary block."""
    if change.strategy == CLEAR:
        ids = set(change.cleared)
        removed = sum(
            len(b["content"].encode()) for m in old for b in m["content"] if b["kind"] == "tool_result" and b["tool_use_id"] in ids
        )
        added = sum(
            len(b["content"].encode()) for m in new for b in m["content"] if b["kind"] == "tool_result" and b["tool_use_id"] in ids
        )
        return removed, added
    replaced = _bytes(old[: change.through])
    return replaced, _bytes(new[:1])
