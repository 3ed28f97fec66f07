"""The window manager of a run: compaction and reminders at the turn boundary (DESIGN.md §5 step
1–2, §10). Before each request is assembled it measures the conversation the way the budget is
measured, and when it passes its budget applies the `[context] compaction` strategies cheapest
first, each as one `context_changed` line the run fold applies — so the request is rendered from
exactly the window replay and forks rebuild. A summary is made by a model call on the ledger.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from runfold.core.canonical import content_hash, encode_json
from runfold.core.causes import Cause
from runfold.core.compaction import (
    CLEAR,
    COMPACTION_PURPOSE,
    REMINDER_THRESHOLDS,
    SUMMARY,
    Change,
    Reminded,
    SummaryBackoff,
    apply_change,
    change_data,
    is_compaction_call,
    plan_clear,
    plan_summary,
    summary_request_messages,
)
from runfold.core.errors import Retry, RunfoldError
from runfold.core.fold import RunFolder
from runfold.core.kinds import Kind
from runfold.core.messages import Message, check_block
from runfold.core.payloads import (
    BytesRef,
    ContextChanged,
    ModelCalled,
    ModelReturned,
    Payload,
    SteerReceived,
    WatchdogFired,
)
from runfold.core.records import Record
from runfold.core.render import render_request, request_bytes
from runfold.core.render.spec import Rendered
from runfold.core.tokens import Calibration, calibrate, estimate, model_limits, window_tokens
from runfold.core.validate import ensure_valid
from runfold.core.window import PER_MILLE, Budgets, ContextSettings, budgets
from runfold.providers.base import Provider, ProviderError, Reply, Request, Usage
from runfold.runtime.loop_io import ModelWindow
from runfold.runtime.prefix import Prefix
from runfold.runtime.retry import RetryPolicy, backoff_reason
from runfold.runtime.safe_points import Interrupted
from runfold.store.ledger import RUNTIME, now_ms

if TYPE_CHECKING:
    from runfold.core.tokens import ModelLimits

DEFAULT_WINDOW: Final = 32_768
"""The context window (tokens) assumed for a model neither `[models]` nor the provider names:
conservative, so an unknown model is compacted early rather than refused."""

LOW_WATER_PERMILLE: Final = 700
"""A compaction goes on, strategy after strategy, until the conversation takes at most this
share of its budget, so the next compaction is many turns away (the prompt cache holds)."""

SUMMARY_ATTEMPTS: Final = 3
"""At most this many attempts of one summary call (retryable provider errors only, after the
run's back-off, each a `model_called` with its `attempt`); then the summary is given up."""

REMINDER: Final = (
    "The conversation has {left}‰ of its budget left (about {tokens} tokens). When it is full, "
    "older tool results are cleared and earlier exchanges summarised; keep what you still need "
    "in your next replies."
)


def model_window(models: Mapping[str, ModelLimits], provider: Provider) -> ModelWindow:
    """The window of `provider`'s model: its call settings' `context_window` when the provider
    fixes one (the embedded model's `n_ctx`), else `[models]`/runfold's table
    (`core.tokens.model_limits`), else `DEFAULT_WINDOW`; the output reserve is the request's
    `max_tokens` (`provider.settings`), at most the model's output limit."""
    settings = provider.settings
    limits = model_limits(provider.model, models)
    output = settings.max_tokens
    if settings.context_window is not None and settings.context_window > 0:
        window, source = settings.context_window, "provider settings"
    elif limits is not None:
        window, source = limits.context_window, "models table"
    else:
        window, source = DEFAULT_WINDOW, "default"
    if limits is not None and limits.max_output_tokens is not None:
        output = min(output, limits.max_output_tokens)
    return ModelWindow(window, output, source)


@dataclass(frozen=True)
class WindowDeps:
    """What the window manager uses of its run loop: the frozen `prefix` and the `provider`
    (summary calls), the run's `folder` (the conversation and its revision), `render` (the
    request the conversation renders now, as the next assembly will), `write(payload, who)`
    (stage one line of the run, fed to its fold), `flush` (await durability), `race` (await a call
    against the run's cancel: `Interrupted.CANCELLED` when cancelled), `next_seq`, `bill` (price
    a reply; None: unpriced), and the back-off of a retried summary call (`retry`, `rand`,
    `sleep`)."""

    prefix: Prefix
    provider: Provider
    folder: RunFolder
    render: Callable[[], tuple[Rendered, bytes]]
    write: Callable[[Payload, str | None], Record]
    flush: Callable[[], Awaitable[None]]
    race: Callable[[Awaitable[Any]], Awaitable[Any]]
    next_seq: Callable[[], int]
    bill: Callable[[str, Usage], int | None] | None
    retry: RetryPolicy
    rand: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]


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
    """One run's window manager; the run loop calls `at_boundary` before every assembly,
    `observe` after every reply of its own conversation, and `inherit` with the lines a fork or
    successor inherits.

    The conversation's budget is `core.window.budgets(...).conversation`: its share of the input
    window, at most what the frozen prefix leaves of it (the one prefix rule, `core.window`).
    Raises `E_CONFIG_INVALID` at construction — before the run writes a line — when the window
    is not larger than the output reserve or the prefix alone fills the input window."""

    def __init__(self, deps: WindowDeps, settings: ContextSettings, window: ModelWindow) -> None:
        self.deps = deps
        self.settings = settings
        self.window = window
        self.prefix_len = prefix_bytes(deps.prefix)
        prefix_tokens = estimate(self.prefix_len).tokens
        self.budgets: Budgets = budgets(settings, window.window, window.output, prefix_tokens, deps.provider.model)
        self.budget = self.budgets.conversation
        self.billed = _Billed()
        self.calibration: Calibration | None = None
        self.reminded = Reminded()
        self.backoff = SummaryBackoff()
        self.compactions = 0

    def inherit(self, records: Iterable[Record]) -> None:
        """Fold the reminders of an inherited lineage (in ledger order): a fork or successor
        repeats no reminder its mother gave in the current compaction cycle."""
        for rec in records:
            self.reminded.feed(rec)
            self.backoff.feed(rec)

    def _write(self, payload: Payload, who: str | None = None) -> Record:
        rec = self.deps.write(payload, who)
        self.reminded.feed(rec)
        self.backoff.feed(rec)
        return rec

    def observe(self, request_len: int, usage: Mapping[str, Any] | None) -> None:
        """Learn tokens per byte from a billed call (`core.tokens.calibrate`); one turn of the
        summary back-off (`core.compaction.SummaryBackoff`)."""
        self.backoff.turn()
        if usage:
            self.calibration = self.billed.add(request_len, window_tokens(usage))

    def budget_bytes(self) -> int:
        """The conversation budget in bytes, by the run's calibration (else 4 bytes a token):
        the most bytes whose estimate is within the budget (`core.offload.should_offload`)."""
        cal = self.calibration
        if cal is None:
            return self.budget * 4
        return self.budget * 1000 // cal.per_mille

    def measure(self) -> tuple[int, int]:
        """(conversation tokens, request bytes) of the request the conversation renders now."""
        _, body = self.deps.render()
        return conversation_tokens(len(body), self.prefix_len, self.calibration), len(body)

    async def at_boundary(self) -> None:
        """Compact when the conversation passes its budget, then remind when a threshold of
        the budget left is crossed (DESIGN.md §10). Writes only `context_changed`, a summary
        call's `model_called`/`watchdog_fired`/`model_returned`, and `runtime` reminders."""
        settings = self.settings
        tokens, _ = self.measure()
        if self._remind(tokens):
            tokens, _ = self.measure()
        if tokens > self.budget and settings.compaction:
            target = self.budget * LOW_WATER_PERMILLE // PER_MILLE
            applied: list[str] = []
            for strategy in settings.compaction:
                if strategy == CLEAR:
                    changed = self._clear(tokens)
                elif self.backoff.ready():
                    changed = await self._summary(tokens, applied)
                else:  # failed summaries lately: wait (core.compaction.SummaryBackoff)
                    changed = False
                if changed:
                    applied.append(strategy)
                    tokens, _ = self.measure()
                    if tokens <= target:
                        break

    # ---- strategies ----------------------------------------------------------------------

    def _conversation(self) -> list[Message]:
        conv = self.deps.folder.conversation
        assert conv is not None
        return list(conv.messages_view())

    def _record(self, change: Change, before: int, extra: Mapping[str, Any] | None = None) -> None:
        """Write one conversation `context_changed` and measure what it did."""
        old = self._conversation()
        folder = self.deps.folder
        revision = folder.revision
        sizes_before = _bytes(old)
        data: dict[str, Any] = {**change_data(change), **(extra or {})}
        payload = ContextChanged(region="conversation", cause=Cause.COMPACTION)
        payload.extra.update(data)
        if change.failed is None:
            # the sizes need the result: apply on a copy first (the fold applies the line itself)
            conv = folder.conversation
            assert conv is not None
            new = apply_change(conv.copy(), change, self.deps.next_seq()).messages
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
        self._write(payload, RUNTIME)
        if change.failed is None:
            self.compactions += 1

    def _clear(self, tokens: int) -> bool:
        cleared = plan_clear(self._conversation(), self.settings.keep_waves)
        if not cleared:
            return False
        self._record(Change(CLEAR, cleared=tuple(cleared)), tokens)
        return True

    async def _summary(self, tokens: int, applied: Sequence[str]) -> bool:
        """The `summary` strategy. A summary call that fails (after its retries) or returns no
        text leaves the window as it was: one `context_changed` with `failed` (why), `failed_seq`
        (the line that failed: the last `model_called`, or the empty `model_returned`), `error`
        (the provider's error, when there was one) and `fallback` (the cheaper strategies that
        changed the window at this boundary; the run goes on with them)."""
        messages = self._conversation()
        through = plan_summary(messages, self.settings.keep_waves)
        if through is None:
            return False
        got = await self._summary_call(messages, through)
        if got.text is None:
            extra: dict[str, Any] = {"failed_seq": got.seq, "fallback": list(applied)}
            if got.error is not None:
                extra["error"] = got.error.to_data()
            if got.returned:
                extra["summary_seq"] = got.seq
            self._record(Change(SUMMARY, failed=got.why), tokens, extra)
            return False
        self._record(Change(SUMMARY, through=through, summary=got.text), tokens, {"summary_seq": got.seq})
        return True

    async def _summary_call(self, messages: list[Message], through: int) -> _Summary:
        """The summary call (on the ledger, marked `purpose: compaction`), retried after the
        run's back-off on a retryable provider error, at most `SUMMARY_ATTEMPTS` attempts."""
        deps = self.deps
        prefix = deps.prefix
        rendered = render_request(prefix.dialect, prefix.spec(summary_request_messages(messages, through)))
        ensure_valid(prefix.dialect, rendered.body)
        body = request_bytes(rendered.body)
        request = Request(prefix.dialect, prefix.model, rendered.body, body, stream=False)
        ref = BytesRef(hash=content_hash(body), bytes=len(body))
        attempts = max(1, min(SUMMARY_ATTEMPTS, deps.retry.max_attempts))
        attempt = 0
        while True:
            attempt += 1
            called = ModelCalled(
                model=prefix.model, request=ref, dialect=prefix.dialect, attempt=attempt if attempt > 1 else None
            )
            called.extra.update({"purpose": COMPACTION_PURPOSE, "strategy": SUMMARY, "through": through})
            called_seq = self._write(called).seq
            await deps.flush()  # durable before the provider is called
            start = time.perf_counter_ns()
            sent_ms = now_ms()
            try:
                reply = await deps.race(deps.provider.complete(request, None))
            except ProviderError as err:
                if err.retry is not Retry.YES or attempt >= attempts:
                    return _Summary(None, called_seq, f"the summary call failed: {err.display()}", err)
                delay = deps.retry.delay_ms(attempt, err.retry_after_ms, deps.rand())
                self._write(
                    WatchdogFired(reason=backoff_reason(err), attempt=attempt, status=err.status, delay_ms=delay),
                    RUNTIME,
                )
                if await deps.race(deps.sleep(delay / 1000)) is Interrupted.CANCELLED:
                    return _Summary(None, called_seq, "the run was cancelled during the summary call's back-off")
                continue
            except RunfoldError as err:  # the run goes on without a summary
                return _Summary(None, called_seq, f"the summary call failed: {err.display()}", err)
            except Exception as exc:  # a provider bug: the window stays as it was
                why = f"the summary call failed: {type(exc).__name__}: {str(exc)[:200]}"
                return _Summary(None, called_seq, why)
            if not isinstance(reply, Reply):  # the safe points' cancel
                return _Summary(None, called_seq, "the run was cancelled during the summary call")
            return self._summary_returned(request, reply, called_seq, sent_ms, start)

    def _summary_returned(self, request: Request, reply: Reply, called_seq: int, sent_ms: int, start: int) -> _Summary:
        blocks = []
        for i, raw in enumerate(reply.blocks):
            try:
                blocks.append(check_block(raw, f"content[{i}]").copy())
            except RunfoldError as err:
                return _Summary(None, called_seq, f"the summary reply was malformed ({err.subject}: {err.action})")
        usage = reply.usage
        bill = self.deps.bill
        billed = bill(request.model, usage) if usage is not None and bill is not None else None
        took = reply.took_us if reply.took_us is not None else (time.perf_counter_ns() - start) // 1000
        first_at = sent_ms + reply.first_byte_us // 1000 if reply.first_byte_us is not None else None
        rec = self._write(
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
            return _Summary(None, rec.seq, "the summary call returned no text", returned=True)
        return _Summary(text, rec.seq, "", returned=True)

    # ---- reminders -----------------------------------------------------------------------

    def _remind(self, tokens: int) -> bool:
        """One reminder when the share of the budget left first falls to a threshold of
        `reminders_permille` in this compaction cycle (the lowest crossed, once); True if
        written. It goes through the steer door: a `runtime` `steer_received` with `cause:
        framework` (DESIGN.md §10) and the `thresholds` it answers, `left_permille`, `budget`;
        which thresholds were reminded is folded from the ledger (`core.compaction.Reminded`).
        A conversation already past its budget gets none: it is compacted instead."""
        if self.budget <= 0 or tokens > self.budget:
            return False
        left = (self.budget - tokens) * PER_MILLE // self.budget
        done = self.reminded.thresholds
        due = [t for t in self.settings.reminders_permille if left <= t]
        if not [t for t in due if t not in done]:
            return False
        steer = SteerReceived(source="runtime", text=REMINDER.format(left=left, tokens=self.budget - tokens))
        steer.extra.update(
            {
                "cause": Cause.FRAMEWORK.value,
                REMINDER_THRESHOLDS: sorted(set(due) | done, reverse=True),
                "left_permille": left,
                "budget": self.budget,
            }
        )
        self._write(steer, RUNTIME)
        return True


@dataclass(frozen=True)
class _Summary:
    """A summary call's outcome: its `text` (None: none), `seq` (its `model_returned`, else its
    last `model_called`), `why` it gave none, the provider's `error`, and whether it `returned`."""

    text: str | None
    seq: int
    why: str
    error: RunfoldError | None = None
    returned: bool = False


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
