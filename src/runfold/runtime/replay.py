"""Replay: rebuild the exact body of every `model_called` of a run and check its hash (DESIGN.md §7).

The frozen prefix comes from the CAS object `prompt_assembled.prefix` names, the conversation from
the same incremental run fold the live loop fed, the bytes from the same renderer; a summary
call's request from the conversation it summarised (`core.compaction.summary_request_messages`). Replay never
calls a model, never executes a tool and never writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from runfold.core.canonical import content_hash
from runfold.core.causes import Cause
from runfold.core.compaction import is_compaction_call, summary_request_messages
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.fold import RunFolder, lineage
from runfold.core.fold.why import PrefixOwners, prefix_owners
from runfold.core.kinds import Kind
from runfold.core.locator import CasLocator, parse_locator
from runfold.core.messages import Message
from runfold.core.offload import missing_offload, offload_digest
from runfold.core.payloads import ModelCalled, PromptAssembled, ResultOffloaded
from runfold.core.records import Record
from runfold.core.regions import with_regions_owned
from runfold.core.render import RequestSpec, render_request, request_bytes
from runfold.core.render.attribution import Attributed, Owner, attribute_request
from runfold.core.validate import validate
from runfold.runtime.prefix import Prefix

LoadCas = Callable[[CasLocator], bytes]
"""Reads the bytes a CAS locator names (e.g. `Cas(ws).get_locator`)."""


@dataclass(frozen=True)
class Mismatch:
    """The first request whose rebuilt bytes do not hash to the recorded hash: its `seq`, the
    `expected` (recorded) and `rebuilt` BLAKE3 hashes, and `where` the difference lies as far as
    the ledger can tell (it stores the hash and length, not the body)."""

    seq: int
    expected: str
    rebuilt: str
    where: str


@dataclass(frozen=True)
class ReplayReport:
    """The result of a replay.

    - `run`; `requests`: `model_called` lines of the run that record a request hash;
    - `exact`: how many of them rebuilt byte-exact;
    - `first_mismatch`: the first that did not (None when all did);
    - `skipped`: `(seq, why)` for model_called lines that could not be checked (no recorded hash,
      e.g. a foreign format-1 ledger, or no stored prefix);
    - `invalid`: `(seq, rule)` for rebuilt requests the validator refuses (should be empty);
    - `hashes`: `(seq, rebuilt hash)` per checked request, in order.
    """

    run: str
    requests: int
    exact: int
    first_mismatch: Mismatch | None
    skipped: tuple[tuple[int, str], ...] = ()
    invalid: tuple[tuple[int, str], ...] = ()
    hashes: tuple[tuple[int, str], ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        """True when every checkable request rebuilt byte-exact and validates."""
        return self.first_mismatch is None and self.exact == self.requests and not self.invalid

    def summary(self) -> str:
        """`N/N requests byte-exact`, or the first request that differs and where."""
        head = f"{self.exact}/{self.requests} requests byte-exact"
        if self.first_mismatch is not None:
            m = self.first_mismatch
            head += f"; first mismatch at seq {m.seq}: {m.where} (recorded {m.expected[:16]}…, rebuilt {m.rebuilt[:16]}…)"
        if self.skipped:
            head += f"; {len(self.skipped)} not checkable"
        return head


@dataclass(frozen=True)
class Rebuilt:
    """One `model_called` of a run rebuilt from the ledger: its line `seq` and payload
    `called`, the `dialect`, the `spec` it renders from, the owner `(seq, cause)` of every
    block of `spec.messages` (`sources`), and the frozen prefix's owners (`core.fold.why.
    prefix_owners`); `problem` says where the stored prefix disagrees with its line, if it does."""

    seq: int
    called: ModelCalled
    dialect: str
    spec: RequestSpec
    sources: tuple[tuple[Owner, ...], ...]
    owners: PrefixOwners
    problem: str | None

    def attributed(self) -> Attributed:
        """The request's exact bytes with every byte attributed (`core.render.attribution`)."""
        segments, tools, envelope = self.owners
        return attribute_request(
            self.dialect, self.spec, self.sources, segments=segments, tools=tools, envelope=envelope
        )


def rebuilt_requests(
    lines_by_run: Mapping[str, Sequence[Record]],
    run: str,
    load: LoadCas,
    skipped: list[tuple[int, str]] | None = None,
) -> Iterator[Rebuilt]:
    """Every `model_called` of `run` that records a request hash and has a stored prefix,
    rebuilt in ledger order (the others go to `skipped` as `(seq, why)`). A summary call's
    request is the conversation it summarised with the runtime's ask, which the summary call's
    own line puts there (cause `compaction`). Raises like `replay_run`."""
    lin = lineage(lines_by_run, run)
    folder = RunFolder()
    prefixes: dict[str, Prefix] = {}
    assembled_lines: list[Record] = []
    own = next(
        (r for r in lin.steps[-1].lines if r.known and r.kind is Kind.PROMPT_ASSEMBLED), None
    )  # the run's frozen prefix, also for a summary call made before its first assembly
    for index, step in enumerate(lin.steps):
        imported = next((r for r in step.lines[:2] if r.kind_name == Kind.SESSION_IMPORTED.value), None)
        for rec in step.lines:
            folder.feed(rec, inherits=index > 0 and rec is step.lines[0])
            if rec.known and rec.kind is Kind.PROMPT_ASSEMBLED:
                assembled_lines.append(rec)
            if rec.known and rec.kind is Kind.RESULT_OFFLOADED:
                check_offloaded(rec, load, "replay the run")
            if rec.run != run or not rec.known or rec.kind is not Kind.MODEL_CALLED:
                continue
            called = rec.typed(ModelCalled)
            if not called.request.hash:
                why = "model_called records no request hash"
                if imported is not None:
                    source = imported.env.data.get("format")
                    why = f"imported from a {source} session: the request has no recorded bytes to check"
                if skipped is not None:
                    skipped.append((rec.seq, why))
                continue
            summary_of = _summary_through(called)
            assembled, assembled_seq = folder.prefix, folder.prefix_seq
            seen = assembled_lines
            if summary_of is not None and own is not None:
                assembled, assembled_seq = own.typed(PromptAssembled), own.seq
                seen = assembled_lines if own in assembled_lines else [*assembled_lines, own]
            if assembled is None or not assembled.prefix:
                if skipped is not None:
                    skipped.append((rec.seq, "no prompt_assembled with a stored prefix before it"))
                continue
            prefix = _prefix(assembled, prefixes, load, assembled_seq)
            conv = folder.conversation
            assert conv is not None
            messages: Sequence[Message] = conv.messages
            sources: list[tuple[Owner, ...]] = [tuple((s.seq, s.cause) for s in row) for row in conv.sources]
            if summary_of is not None:  # a summary call: the messages it summarised, and the ask
                messages = summary_request_messages(messages, summary_of)
                sources = sources[: len(messages)]
                sources[-1] = (*sources[-1], (rec.seq, str(Cause.COMPACTION)))
                uncached = 0
            else:  # the context regions block after the tail breakpoint (core.regions)
                messages, sources, uncached = with_regions_owned(messages, sources, folder.regions)
            yield Rebuilt(
                rec.seq,
                called,
                called.dialect or prefix.dialect,
                prefix.spec(messages, uncached_tail=uncached),
                tuple(sources),
                prefix_owners(seen, assembled),
                _prefix_problem(prefix, assembled),
            )


def replay_run(lines_by_run: Mapping[str, Sequence[Record]], run: str, load: LoadCas) -> ReplayReport:
    """Replay `run` (see the module docstring). `lines_by_run` holds the run's lines and, for a
    fork, every run of its lineage (as `fold_run` takes them).

    Raises `E_INVALID_ARGS` for an unknown run, `E_LEDGER_CORRUPT` (naming seq and field) for
    lines the fold cannot place, and the CAS errors (`E_PATH_NOT_FOUND`, `E_LEDGER_CORRUPT`)
    when a stored prefix is missing or damaged; `E_STORAGE_FATAL` naming the locator when the
    CAS object of a `result_offloaded` of the lineage is missing (its bytes are re-verified; the
    window itself is rebuilt from the line, DESIGN.md §10).
    """
    requests = exact = 0
    first: Mismatch | None = None
    skipped: list[tuple[int, str]] = []
    invalid: list[tuple[int, str]] = []
    hashes: list[tuple[int, str]] = []
    for req in rebuilt_requests(lines_by_run, run, load, skipped):
        requests += 1
        rendered = render_request(req.dialect, req.spec)
        body = request_bytes(rendered.body)
        digest = content_hash(body)
        hashes.append((req.seq, digest))
        for v in validate(req.dialect, rendered.body):
            invalid.append((req.seq, v.rule))
        if digest == req.called.request.hash:
            exact += 1
            continue
        if first is None:
            where = req.problem
            if where is None:
                n = req.called.request.bytes
                where = (
                    f"the body is {len(body)} bytes, {n} were sent"
                    if len(body) != n
                    else f"same length ({n} bytes), different content"
                )
            first = Mismatch(req.seq, req.called.request.hash, digest, where)
    return ReplayReport(run, requests, exact, first, tuple(skipped), tuple(invalid), tuple(hashes))


@dataclass(frozen=True)
class SentRequest:
    """One request of a run rebuilt as it was sent: the `model_called` line's `seq`, the
    `dialect`, the exact `body` bytes, the BLAKE3 the line `recorded` and the one of the `body`
    (`rebuilt`), the byte count the line recorded, and where a stored prefix disagrees."""

    seq: int
    dialect: str
    body: bytes
    recorded: str
    rebuilt: str
    recorded_bytes: int
    problem: str | None

    @property
    def exact(self) -> bool:
        """True when the rebuilt bytes hash to the recorded hash (replay's check)."""
        return self.rebuilt == self.recorded


def sent_request(
    lines_by_run: Mapping[str, Sequence[Record]], run: str, seq: int, load: LoadCas
) -> SentRequest | None:
    """The request the `model_called` at `seq` of `run` sent, rebuilt as `replay_run` does;
    None when `seq` is no checkable `model_called` of the run. Raises like `replay_run`."""
    for req in rebuilt_requests(lines_by_run, run, load):
        if req.seq > seq:
            break
        if req.seq == seq:
            body = request_bytes(render_request(req.dialect, req.spec).body)
            called = req.called.request
            return SentRequest(seq, req.dialect, body, called.hash, content_hash(body), called.bytes, req.problem)
    return None


def check_offloaded(rec: Record, load: LoadCas, action: str) -> None:
    """Read back (and so re-verify) the CAS object a `result_offloaded` line names. Raises
    `E_STORAGE_FATAL` naming the locator when it is missing (`core.offload.missing_offload`),
    `E_LEDGER_CORRUPT` when its bytes no longer hash to it or the locator is not `cas:b3-<hex>`."""
    off = rec.typed(ResultOffloaded)
    digest = offload_digest(off)
    if digest is None:
        raise RunfoldError(
            ErrorCode.LEDGER_CORRUPT,
            f"read the offloaded result of seq {rec.seq} (field data.locator)",
            repr(off.locator),
            "the locator must be cas:b3-<64 hex>; the line was not written by this runfold",
        )
    try:
        load(CasLocator(digest))
    except RunfoldError as err:
        if err.code is ErrorCode.PATH_NOT_FOUND:
            raise missing_offload(off.locator, off.tool_use_id, rec.seq, action) from None
        raise


def _summary_through(called: ModelCalled) -> int | None:
    """For a summary call (`purpose: compaction`), how many leading messages it summarised."""
    if not is_compaction_call(called):
        return None
    through = called.extra.get("through")
    return through if isinstance(through, int) and not isinstance(through, bool) else None


def _prefix(assembled: PromptAssembled, cache: dict[str, Prefix], load: LoadCas, seq: int | None) -> Prefix:
    locator_text = assembled.prefix or ""
    found = cache.get(locator_text)
    if found is None:
        loc = parse_locator(locator_text)
        if not isinstance(loc, CasLocator):
            raise RunfoldError(
                code=ErrorCode.LEDGER_CORRUPT,
                action=f"read the frozen prefix {locator_text!r}",
                subject=f"prompt_assembled at seq {seq}",
                recovery="the prefix must be a cas: locator; the line was not written by this runfold",
            )
        found = Prefix.load(load(loc), f"{locator_text} (prompt_assembled at seq {seq})")
        cache[locator_text] = found
    return found


def _prefix_problem(prefix: Prefix, assembled: PromptAssembled) -> str | None:
    """Where the stored prefix disagrees with what prompt_assembled recorded, if anywhere."""
    try:
        prefix.check_against(assembled.segments, assembled.tools, "replay")
    except RunfoldError as err:
        return f"the stored prefix does not match prompt_assembled ({err.action})"
    return None
