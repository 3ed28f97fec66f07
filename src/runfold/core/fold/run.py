"""The run fold: a run's conversation rebuilt from its ledger lines through a cut (DESIGN.md §5–§7).

It walks a run's *lineage* (for a fork: the mother's lines through the fork's cut, recursively,
then the run's own lines), folds waves into a `Conversation` only when complete, and knows which
seqs are *safe cut points*, so that every fork and every `--at` view inherits a history providers
accept. Every kind is decided explicitly in `DECISIONS` and in an exhaustive match.

Safe cut points (the seqs a fork may inherit through, DESIGN.md §5, §7). The fold tracks a phase:
`idle` (a turn boundary: the safe point *before assemble*), `assembled` (a request assembled and
marked sent: the safe point *before call*), `calling` (a request in flight), `wave` (a reply's
calls await results: the safe points *before wave* and *before tool call* lie inside it), `frozen`.
A seq is a safe cut point when the phase after its line is `idle` or `frozen`: the run's
`run_started`, `run_forked`, a reply without calls, the last result of a wave, steers, cancels,
handoffs and freezes at a turn boundary. A cut never lands inside a turn: a reply whose request
is cut off and a wave the cut lands inside are dropped whole (a `tool_use` without its
`tool_result` is a shape providers refuse), and held steer text is never stranded in a request
the child did not send. Asking for any other seq of the lineage moves the cut back to the last
safe cut point before it, and the fold says why.

Marking sent (DESIGN.md §6): at `prompt_shape_compared`. Format-1 ledgers (sprawling, §12) predate
that kind: there, `model_called` plays that role, the last line before the request leaves. The
rule the fold applies covers both: a turn's conversation is marked sent at its
`prompt_shape_compared`, or at its first `model_called` when the turn had none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn, assert_never

from runfold.core.approval import is_denial
from runfold.core.causes import Cause
from runfold.core.compaction import Change, apply_change, is_compaction_call, landings_after, steer_cause
from runfold.core.conversation import BlockSource, Conversation
from runfold.core.errors import RunfoldError, invalid_args
from runfold.core.fold.decisions import SAFE_PHASES, Phase
from runfold.core.fold.lineage_steps import (
    Lineage,
    LineageStep,
    corrupt,
    fork_point,
    not_in_lineage,
    through,
    typed,
    unsupported,
)
from runfold.core.fold.region_step import region_step
from runfold.core.fold.resume import closed_by_resume
from runfold.core.fold.wave import OpenWave
from runfold.core.ids import WORKSPACE_RUN
from runfold.core.kinds import Kind
from runfold.core.messages import Message, ToolUseBlock, reply_blocks
from runfold.core.offload import offloaded_content
from runfold.core.payloads import (
    ContextChanged,
    ModelCalled,
    ModelReturned,
    PromptAssembled,
    ResultOffloaded,
    RunStarted,
    SteerReceived,
    ToolCalled,
    ToolResult,
)
from runfold.core.records import Record
from runfold.core.regions import EDITED_REGIONS, Regions
from runfold.core.speakers import render_opening, render_steer
from runfold.core.tool_result import tool_result_block, tool_use_block_of
from runfold.core.window import STRATEGIES


def lineage(lines_by_run: Mapping[str, Sequence[Record]], run: str) -> Lineage:
    """The lineage of `run` (DESIGN.md §7): for a fork, the mother's lineage through the fork's
    `at_seq`, recursively, then the run's own lines.

    Raises `E_INVALID_ARGS` when `run` has no lines (naming the nearest known runs), and
    `E_LEDGER_CORRUPT` when a run does not start with `run_started`, or a `run_forked` names a
    missing mother, a seq not before the fork, or a seq that is not a safe cut of the mother.
    """
    lines = lines_by_run.get(run)
    if not lines or run == WORKSPACE_RUN:
        known = [r for r in lines_by_run if r != WORKSPACE_RUN]
        raise invalid_args(
            "fold run",
            f"run {run}",
            "name a run of this ledger (`runfold runs` lists them)",
            tuple(known[:8]),
        )
    first = lines[0]
    if not first.known or first.kind is not Kind.RUN_STARTED:
        corrupt(first, "kind", f"run {run} starts with {first.kind_name}, not run_started")
    point = fork_point(lines)
    if point is None:
        return Lineage((LineageStep(run, lines[0].seq, lines[-1].seq, tuple(lines)),))
    mother, at_seq = point
    forked_line = next(r for r in lines[:4] if r.known and r.kind is Kind.RUN_FORKED)
    if mother == run or mother not in lines_by_run or at_seq >= first.seq:
        corrupt(
            forked_line,
            "data.from",
            f"run_forked names run {mother} at seq {at_seq}, which is not an earlier line of another run",
        )
    mother_lineage = lineage(lines_by_run, mother)
    inherited = through(mother_lineage, at_seq)
    if inherited is None or not _scan(inherited).is_safe(at_seq):
        corrupt(
            forked_line,
            "data.at_seq",
            f"run_forked at_seq {at_seq} is not a safe cut point of run {mother}",
        )
    own = LineageStep(run, lines[0].seq, lines[-1].seq, tuple(lines))
    return Lineage((*inherited.steps, own))


def lineage_runs(lines_by_run: Mapping[str, Sequence[Record]], run: str) -> list[str]:
    """The runs whose lines `run`'s fold reads, oldest first (ends with `run`). A caller that reads
    runs one at a time can call `fork_point` on each instead. Raises like `lineage`."""
    return [s.run for s in lineage(lines_by_run, run).steps]


# ---- the fold ---------------------------------------------------------------------------------


@dataclass
class FoldState:
    """The running state of the fold (exposed for the runtime and tests; treat as read-only)."""

    conversation: Conversation | None = None
    phase: Phase = Phase.IDLE
    sent_this_turn: bool = False
    wave: OpenWave | None = None
    prefix: PromptAssembled | None = None
    prefix_seq: int | None = None
    compaction_call: bool = False
    """A summary call's `model_called` was folded and its reply has not come back."""
    revision: int = 0
    """The window revision: compactions and region edits applied so far in the lineage."""
    regions: Regions = field(default_factory=Regions)
    landed: list[int] = field(default_factory=list)
    """Per flattened block of the conversation: the seq of the line at which it entered."""


def _placed(rec: Record, exc: RunfoldError, field_name: str) -> NoReturn:
    """A line whose payload reads but does not continue the conversation (e.g. a reply with no
    user turn before it): refused as corrupt, naming seq and field."""
    corrupt(rec, field_name, exc.action)


@dataclass
class _LineNote:
    """What the fold knew right after a line: its phase and, inside a turn, where the turn began."""

    kind: str
    phase: Phase
    turn_seq: int | None
    detail: str


class _Folder:
    """Feeds lineage lines one by one into a FoldState (one instance per fold)."""

    def __init__(self, track_landing: bool, keep_notes: bool = True) -> None:
        self.st = FoldState()
        self.track = track_landing
        self.keep_notes = keep_notes
        self.notes: dict[int, _LineNote] = {}
        self.turn_seq: int | None = None
        self.blocks = 0

    # -- helpers ------------------------------------------------------------------------------

    def conv(self, rec: Record) -> Conversation:
        if self.st.conversation is None:
            corrupt(rec, "kind", "an in-window line before the run's run_started")
        return self.st.conversation

    def _count_landed(self, seq: int) -> None:
        if not self.track or self.st.conversation is None:
            return
        total = self.st.conversation.block_count
        if total > self.blocks:
            self.st.landed.extend([seq] * (total - self.blocks))
            self.blocks = total

    def _expect(self, rec: Record, phases: frozenset[Phase], what: str) -> None:
        if self.st.phase not in phases:
            corrupt(rec, "kind", f"{what} while the run is {self.st.phase.value}")

    # -- the step -----------------------------------------------------------------------------

    def feed(self, rec: Record, inherits: bool) -> None:
        """Fold one line. `inherits` is True for the `run_started` of a fork (its conversation
        starts from the mother's)."""
        if rec.known:
            self._step(rec, rec.kind, inherits)
        if self.st.phase in SAFE_PHASES:
            self.turn_seq = None
        elif self.turn_seq is None:
            self.turn_seq = rec.seq
        if self.keep_notes:
            self.notes[rec.seq] = _LineNote(rec.kind_name, self.st.phase, self.turn_seq, self._detail())
        self._count_landed(rec.seq)

    def _detail(self) -> str:
        st = self.st
        if st.phase is Phase.WAVE and st.wave is not None:
            w = st.wave
            return f"the reply at seq {w.reply_seq} has {len(w.results)} of {w.needed()} tool results"
        if st.phase is Phase.CALLING:
            return "a request had left and no reply had come back"
        if st.phase is Phase.ASSEMBLED:
            return "a request was assembled and had not left"
        return ""

    def _step(self, rec: Record, kind: Kind, inherits: bool) -> None:
        st = self.st
        live = frozenset({Phase.IDLE, Phase.ASSEMBLED, Phase.CALLING, Phase.WAVE})
        match kind:
            case Kind.RUN_STARTED:
                self._open(rec, inherits)
            case Kind.RUN_FORKED:
                pass  # the lineage was resolved before the run's own lines
            case Kind.PROMPT_ASSEMBLED:
                self._expect(rec, frozenset({Phase.IDLE, Phase.ASSEMBLED}), "a prompt assembled")
                st.prefix = typed(rec, PromptAssembled)
                st.prefix_seq = rec.seq
                st.phase = Phase.ASSEMBLED
            case Kind.PROMPT_SHAPE_COMPARED:
                self._expect(rec, frozenset({Phase.IDLE, Phase.ASSEMBLED}), "a request compared")
                self._mark_sent(rec)
                st.phase = Phase.ASSEMBLED
            case Kind.MODEL_CALLED:
                if is_compaction_call(typed(rec, ModelCalled)):
                    self._expect(rec, frozenset({Phase.IDLE}), "a compaction call inside a turn")
                    st.compaction_call = True  # the run's window is untouched until its context_changed
                    return
                self._expect(rec, frozenset({Phase.IDLE, Phase.ASSEMBLED, Phase.CALLING}), "a model called")
                st.compaction_call = False  # a summary call that never replied
                if not st.sent_this_turn:
                    self._mark_sent(rec)
                st.phase = Phase.CALLING
            case Kind.MODEL_RETURNED:
                if st.compaction_call:
                    st.compaction_call = False  # a summary call's reply: its text arrives in context_changed
                    return
                self._expect(rec, frozenset({Phase.CALLING}), "a reply with no model_called before it")
                self._reply(rec)
            case Kind.TOOL_CALLED:
                self._expect(rec, frozenset({Phase.WAVE}), "a tool called with no reply asking for it")
                self._tool_called(rec)
            case Kind.TOOL_RESULT:
                self._expect(rec, frozenset({Phase.WAVE}), "a tool result with no open wave")
                self._tool_result(rec)
            case Kind.RESULT_OFFLOADED:
                self._offload(rec)
            case Kind.STEER_RECEIVED:
                self._expect(rec, live, "a steer received")
                self._steer(rec)
            case Kind.CONTEXT_CHANGED:
                changed = typed(rec, ContextChanged)
                if changed.region == "conversation":
                    self._expect(rec, frozenset({Phase.IDLE}), "a compaction inside a turn")
                    self._compact(rec, changed)
                elif changed.region in EDITED_REGIONS and changed.op is not None:
                    st.regions = region_step(rec, changed, st.regions, st.revision, st.wave)
                    st.revision += 1
            case Kind.RUN_FROZEN:
                st.compaction_call = False
                st.regions = st.wave.regions if st.wave is not None else st.regions
                st.wave = None  # a wave the run never completed is dropped whole
                st.sent_this_turn = False
                st.phase = Phase.FROZEN
            case Kind.SIGNAL_CONSUMED | Kind.RUN_POLICY_CHANGED:
                pass  # in-window, but no conversation bytes change (see Decision.NO_WINDOW_EFFECT)
            case (
                Kind.WORKSPACE_INITIALIZED | Kind.SESSION_OPENED | Kind.CHECKPOINT_COMMITTED
                | Kind.HANDOFF_WRITTEN | Kind.CANCEL_RECEIVED | Kind.WATCHDOG_FIRED | Kind.BUDGET_LIMIT
                | Kind.PROVIDER_DEGRADED | Kind.GATE_DENIED | Kind.LOG_TRUNCATED | Kind.SIGNAL_ENQUEUED
                | Kind.EVAL_RUN | Kind.CACHE_RENEWED | Kind.SECRET_CAPTURED | Kind.SESSION_IMPORTED
                | Kind.ENDPOINT_ATTACHED | Kind.ENDPOINT_LOST | Kind.APPROVAL_REQUESTED
                | Kind.APPROVAL_RESOLVED | Kind.SIGNAL_WAIT_STARTED | Kind.SIGNAL_WAIT_ENDED
            ):
                pass  # record-only: never decides request bytes
            case _:
                assert_never(kind)

    def _open(self, rec: Record, inherits: bool) -> None:
        st = self.st
        started = typed(rec, RunStarted)
        opening = started.opening
        if opening is None:
            opening = "inherited" if inherits else ("from_job" if started.job else "with_person")
        try:
            text = render_opening(
                opening,
                task=started.task,
                goal=started.goal,
                handed_down_by=started.dispatched_by or rec.env.who,
            )
        except RunfoldError as exc:
            _placed(rec, exc, "data.opening")
        if inherits:
            if st.conversation is None:
                corrupt(rec, "kind", "a fork's run_started with no inherited conversation")
            st.conversation = inherit(st.conversation)
        elif st.conversation is not None:
            corrupt(rec, "kind", "a second run_started in one lineage")
        else:
            st.conversation = Conversation()
        try:
            st.conversation.open_with(text, BlockSource(rec.seq, "seed"))
        except RunfoldError as exc:
            _placed(rec, exc, "data.task")
        st.phase = Phase.IDLE
        st.sent_this_turn = False
        st.wave = None
        st.compaction_call = False

    def _compact(self, rec: Record, changed: ContextChanged) -> None:
        """A conversation `context_changed` (DESIGN.md §10): applied by `core.compaction`, the
        function the live loop's line was fed through, so the window is the one it sent."""
        strategy = changed.extra.get("strategy")
        if strategy not in STRATEGIES:
            fields = f"data.region conversation, data.strategy {strategy!r}"
            unsupported(rec, fields, "conversation change", "compaction strategy")
        if changed.cause != Cause.COMPACTION:
            corrupt(rec, "data.cause", f"a conversation change with cause {changed.cause!r}, not compaction")
        before = self.conv(rec)
        try:
            change = Change.of(changed.to_data())
            self.st.conversation = after = apply_change(before, change, rec.seq)
        except RunfoldError as exc:
            corrupt(rec, exc.subject, exc.action)
        if self.track:  # kept blocks keep their landing; what the change wrote lands at its line
            self.st.landed = landings_after(before, after, self.st.landed, rec.seq)
            self.blocks = after.block_count
        if change.failed is None:
            self.st.revision += 1

    def _mark_sent(self, rec: Record) -> None:
        try:
            self.conv(rec).mark_sent()
        except RunfoldError as exc:
            _placed(rec, exc, "kind")
        self.st.sent_this_turn = True

    def _reply(self, rec: Record) -> None:
        st = self.st
        returned = typed(rec, ModelReturned)
        try:
            blocks = reply_blocks(returned.message)
        except RunfoldError as exc:
            corrupt(rec, exc.subject, exc.action)
        use_ids = [b["id"] for b in blocks if b["kind"] == "tool_use"]
        if returned.calls < len(use_ids):
            corrupt(
                rec,
                "data.calls",
                f"calls is {returned.calls} but the message holds {len(use_ids)} tool_use blocks",
            )
        if len(set(use_ids)) != len(use_ids):
            corrupt(rec, "data.message.content", "two tool_use blocks share an id")
        st.sent_this_turn = False
        if returned.calls == 0:
            conv = self.conv(rec)
            try:
                conv.add_reply(blocks, BlockSource(rec.seq, "model_reply"))
            except RunfoldError as exc:
                _placed(rec, exc, "data.message")
            conv.flush_held()
            st.phase = Phase.IDLE
            return
        st.wave = OpenWave(rec.seq, blocks, returned.calls, use_ids, regions=st.regions)
        st.phase = Phase.WAVE

    def _tool_called(self, rec: Record) -> None:
        wave = self.st.wave
        assert wave is not None
        call = typed(rec, ToolCalled)
        if call.id in wave.called:
            corrupt(rec, "data.id", f"tool call {call.id!r} was already called in this wave")
        if call.id not in wave.asked:
            if wave.extra >= wave.calls - len(wave.use_ids):
                corrupt(
                    rec,
                    "data.id",
                    f"call {call.id!r} is not one of the {wave.calls} calls the reply at seq {wave.reply_seq} asked for",
                )
            wave.extra += 1
        wave.called[call.id] = (tool_use_block_of(call), BlockSource(rec.seq, "model_reply"))

    def _tool_result(self, rec: Record) -> None:
        st = self.st
        wave = st.wave
        assert wave is not None
        result = typed(rec, ToolResult)
        call_id = result.tool_use_id
        if call_id not in wave.asked and call_id not in wave.called:
            corrupt(
                rec,
                "data.tool_use_id",
                f"{call_id!r} answers no call of the wave opened at seq {wave.reply_seq}",
            )
        if call_id in wave.results:
            corrupt(rec, "data.tool_use_id", f"call {call_id!r} was already answered in this wave")
        # DESIGN.md §7 (resume), §10 (a person's denial is their interaction)
        cause = "resume" if closed_by_resume(rec, result) else "interaction" if is_denial(result) else "tool_result"
        block = tool_result_block(result)
        if call_id in wave.offloads:
            block = {**block, "content": offloaded_content(wave.offloads.pop(call_id))}
        wave.results[call_id] = (block, BlockSource(rec.seq, cause))
        if wave.complete():
            self._commit(rec, wave)

    def _commit(self, rec: Record, wave: OpenWave) -> None:
        st = self.st
        conv = self.conv(rec)
        extra = [(b, s) for cid, (b, s) in wave.called.items() if cid not in wave.asked]
        order = wave.use_ids + [cid for cid in wave.called if cid not in wave.asked]
        results = [wave.results[cid] for cid in order if cid in wave.results]
        try:
            conv.add_reply(wave.reply, BlockSource(wave.reply_seq, "model_reply"))
            conv.add_tool_results(
                [b for b, _ in results],
                [s for _, s in results],
                [b for b, _ in extra],
                [s for _, s in extra],
            )
        except RunfoldError as exc:
            _placed(rec, exc, "data.tool_use_id")
        st.wave = None
        st.phase = Phase.IDLE

    def _offload(self, rec: Record) -> None:
        """A `result_offloaded` inside its wave: before its `tool_result` (as the runtime writes
        it) it waits for that result; after it, it replaces the result not yet committed."""
        wave = self.st.wave
        off = typed(rec, ResultOffloaded)
        call_id = off.tool_use_id
        if self.st.phase is not Phase.WAVE or wave is None or (
            call_id not in wave.results and call_id not in wave.called and call_id not in wave.asked
        ):
            corrupt(
                rec,
                "data.tool_use_id",
                "a result is offloaded only inside its wave, next to its tool_result (this build "
                "does not rewrite a committed result)",
            )
        if call_id not in wave.results:
            wave.offloads[call_id] = off
            return
        block, source = wave.results[call_id]
        wave.results[call_id] = ({**block, "content": offloaded_content(off)}, source)

    def _steer(self, rec: Record) -> None:
        steer = typed(rec, SteerReceived)
        try:
            text = render_steer(steer.source, steer.text)
        except RunfoldError as exc:
            _placed(rec, exc, "data.source")
        try:
            self.conv(rec).add_user_text(text, BlockSource(rec.seq, steer_cause(steer)))
        except RunfoldError as exc:
            _placed(rec, exc, "data.text")


def inherit(conversation: Conversation) -> Conversation:
    """The conversation a fork starts from: the mother's messages, nothing sent yet in the new run,
    and any text the mother held but never delivered landed at the end (held text is never lost,
    DESIGN.md §6). Raises `E_INVALID_ARGS` (from `Conversation.inherit`) for a shape a
    Conversation never produces."""
    child = Conversation.inherit(conversation.messages, conversation.sources)
    for held in conversation.held:
        child.add_user_text(held.block["text"], held.source)
    return child


# ---- public entry points -------------------------------------------------------------------


class RunFolder:
    """The run fold, fed one line at a time: what the live run loop and replay share (DESIGN.md
    §5, §7), so the request of turn n is rendered from exactly the conversation `fold_run` rebuilds.

    Feed a run's lineage in seq order (for a fork: the mother's lines through the cut first, then
    the fork's own lines, passing `inherits=True` with the fork's `run_started`). Each `feed` costs
    the work of that one line (no re-fold); `feeds` counts them. The state is read-only for
    callers. `feed` raises like `fold_run` (`E_LEDGER_CORRUPT` naming seq and field for a line
    that does not continue the run).
    """

    __slots__ = ("_folder", "feeds")

    def __init__(self) -> None:
        self._folder = _Folder(track_landing=False, keep_notes=False)
        self.feeds = 0

    @classmethod
    def continuing(cls, fold: RunFold) -> RunFolder:
        """A folder that has been fed `fold.lineage` (what a fork or successor planned with
        `fork.plan_fork` inherits), without folding it again: the plan's fold state is taken
        over (its `feeds` count the lineage's lines), once: a second call, or a `fold` that does
        not carry its state, folds the lineage afresh."""
        folder = cls()
        if fold.folded is None:
            for index, step in enumerate(fold.lineage.steps):
                for rec in step.lines:
                    folder.feed(rec, inherits=index > 0 and rec is step.lines[0])
            return folder
        state = fold.folded
        object.__setattr__(fold, "folded", None)  # taken over: a second use folds afresh
        state.keep_notes = False
        state.notes = {}
        folder._folder = state
        folder.feeds = sum(len(step.lines) for step in fold.lineage.steps)
        return folder

    def feed(self, record: Record, *, inherits: bool = False) -> None:
        """Fold one line (see the class docstring)."""
        self._folder.feed(record, inherits)
        self.feeds += 1

    @property
    def conversation(self) -> Conversation | None:
        """The conversation so far (None before the run's `run_started`); do not mutate it."""
        return self._folder.st.conversation

    @property
    def phase(self) -> Phase:
        """Where the run stands after the last line fed (`idle`, `assembled`, `calling`, `wave`,
        `frozen`)."""
        return self._folder.st.phase

    def unanswered(self) -> list[tuple[ToolUseBlock, bool]]:
        """The open wave's calls that have no result yet, in call order, each with whether a
        `tool_called` line recorded it (empty outside a wave)."""
        wave = self._folder.st.wave
        return wave.unanswered() if wave is not None and self.phase is Phase.WAVE else []

    @property
    def prefix(self) -> PromptAssembled | None:
        """The last `prompt_assembled` fed, if any."""
        return self._folder.st.prefix

    @property
    def prefix_seq(self) -> int | None:
        """The seq of the last `prompt_assembled` fed, if any."""
        return self._folder.st.prefix_seq

    @property
    def revision(self) -> int:
        """The window revision: compactions and region edits so far (the lineage's included)."""
        return self._folder.st.revision

    @property
    def regions(self) -> Regions:
        """The notes, todo and scratch regions so far (`core.regions`)."""
        return self._folder.st.regions


@dataclass(frozen=True)
class RunFold:
    """A run's conversation at a safe cut point.

    - `asked`: the seq asked for (the run's last line when none was given);
    - `cut`: the last safe cut point ≤ `asked` actually used (see the module docstring);
    - `moved`: why the cut differs from `asked` (None when equal);
    - `conversation`: the folded `Conversation` (held text inside, not yet delivered);
    - `lineage`: the lines folded (the mother's through the fork point, then the run's);
    - `phase`: the run's phase after the cut (`idle` or `frozen`);
    - `prefix`/`prefix_seq`: the last `prompt_assembled` of the lineage through the cut, if any;
    - `safe_points`: every safe cut point of the lineage ≤ `asked`, ascending;
    - `landed`: with `track_landing`, per flattened block, the seq at which it entered the window.
    """

    run: str
    asked: int
    cut: int
    moved: str | None
    conversation: Conversation
    lineage: Lineage
    phase: Phase
    prefix: PromptAssembled | None
    prefix_seq: int | None
    safe_points: tuple[int, ...]
    landed: tuple[int, ...] | None = None
    regions: Regions = field(default_factory=Regions)  # the notes, todo and scratch at the cut
    folded: _Folder | None = field(default=None, repr=False, compare=False)
    """The fold's own state after the cut, for `RunFolder.continuing` (not part of the view)."""

    @property
    def messages(self) -> list[Message]:
        return self.conversation.messages

    @property
    def sources(self) -> list[list[BlockSource]]:
        return self.conversation.sources

    def inherited(self) -> Conversation:
        """The conversation a fork at `cut` starts from (see `inherit`)."""
        return inherit(self.conversation)


@dataclass(frozen=True)
class _Scan:
    notes: dict[int, _LineNote]
    state: FoldState
    folder: _Folder

    def is_safe(self, seq: int) -> bool:
        note = self.notes.get(seq)
        return note is not None and note.phase in SAFE_PHASES

    def safe_points(self) -> list[int]:
        return [s for s, n in self.notes.items() if n.phase in SAFE_PHASES]


def _scan(lin: Lineage, track_landing: bool = False) -> _Scan:
    folder = _Folder(track_landing)
    for index, step in enumerate(lin.steps):
        for rec in step.lines:
            folder.feed(rec, inherits=index > 0 and rec is step.lines[0])
    return _Scan(folder.notes, folder.st, folder)


def fold_run(
    lines_by_run: Mapping[str, Sequence[Record]],
    run: str,
    at_seq: int | None = None,
    *,
    tail: int | None = None,
    track_landing: bool = False,
) -> RunFold:
    """Fold `run`'s conversation through the last safe cut point ≤ `at_seq` (default: the run's
    last line), DESIGN.md §5–§7.

    `lines_by_run` maps run ids to their lines in seq order; it must hold the run and, for a
    fork, every run of its lineage (`group_by_run` of the ledger, or the runs `lineage_runs`
    names). `tail` (the ledger's last seq) only improves error messages.

    Raises `E_INVALID_ARGS` when `run` is unknown or `at_seq` is not a line of the run's lineage
    (naming the valid ranges and the tail; never clamped); `E_LEDGER_CORRUPT` naming seq and
    field for an in-window line that is unreadable or does not continue the conversation;
    `E_LOG_VERSION_UNSUPPORTED` for a conversation change this build cannot apply.
    """
    lin = lineage(lines_by_run, run)
    asked = lin.steps[-1].last if at_seq is None else at_seq
    upto = through(lin, asked)
    if upto is None:
        raise not_in_lineage(lin, asked, tail)
    scan = _scan(upto, track_landing)
    safe = scan.safe_points()
    cut = max(s for s in safe if s <= asked)
    moved: str | None = None
    if cut != asked:
        note = scan.notes[asked]
        start = note.turn_seq if note.turn_seq is not None else asked
        moved = (
            f"seq {asked} ({note.kind}) is inside the turn that began at seq {start} "
            f"({note.detail}); a cut keeps whole turns and whole waves, so it moved back to seq {cut}, "
            "the last safe point before it"
        )
        upto = through(lin, cut)
        assert upto is not None
        scan = _scan(upto, track_landing)
    st = scan.state
    assert st.conversation is not None
    return RunFold(
        run=run,
        asked=asked,
        cut=cut,
        moved=moved,
        conversation=st.conversation,
        lineage=upto,
        phase=st.phase,
        prefix=st.prefix,
        prefix_seq=st.prefix_seq,
        safe_points=tuple(safe),
        landed=tuple(st.landed) if track_landing else None,
        regions=st.regions,
        folded=None if track_landing else scan.folder,
    )


def safe_points(lines_by_run: Mapping[str, Sequence[Record]], run: str) -> list[int]:
    """Every safe cut point of `run`'s lineage (ascending): the seqs a fork may inherit through.
    Raises like `fold_run`."""
    return _scan(lineage(lines_by_run, run)).safe_points()


def line_phases(lines_by_run: Mapping[str, Sequence[Record]], run: str) -> dict[int, Phase]:
    """The phase after each line of `run`'s lineage (seq → phase). Raises like `fold_run`."""
    return {s: n.phase for s, n in _scan(lineage(lines_by_run, run)).notes.items()}
