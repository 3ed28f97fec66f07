"""Importing a foreign session file into a workspace, all or nothing (`Workspace.import_session`).

The file is read into a plan and drafts (`runfold.importers`, pure), every imported run is
folded from its provisional records before anything is written (a plan the fold would refuse
is refused here, naming the run and seq), then the map documents go to the CAS and the lines to
the ledger in one batch: on any error the ledger is byte-identical to before.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from runfold.core import fold as fold_api
from runfold.core.canonical import content_hash
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.payloads import read_payload
from runfold.importers import AUTO, ImportedRun, ImportPlan, detect, import_drafts, read_plan
from runfold.runtime.spec import new_run_id
from runfold.store.cas import Cas
from runfold.store.ledger import now_ms
from runfold.store.staging import Stager
from runfold.store.view import LedgerWriter


@dataclass(frozen=True)
class ImportReport:
    """What an import wrote: the `format` read (and whether it was `detected`), the `source`
    file name, its BLAKE3 `hash` and size `bytes`, the `runs` it became (id, session, seqs,
    counts, map locator), and `skipped`: how many source positions carried nothing the model
    saw (listed in each map document)."""

    format: str
    detected: bool
    source: str
    hash: str
    bytes: int
    runs: tuple[ImportedRun, ...]
    skipped: int


def companion_files(path: Path) -> dict[str, bytes]:
    """The subagent files of a Claude Code session file `<dir>/<id>.jsonl`: every
    `<dir>/<id>/subagents/agent-*.jsonl`, by name relative to `<dir>`."""
    folder = path.with_suffix("") / "subagents"
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(path.parent)): p.read_bytes()
        for p in sorted(folder.glob("agent-*.jsonl"))
        if p.is_file()
    }


@dataclass(frozen=True)
class PreparedImport:
    """A session file read and checked, before the writer is opened (`prepare_import`)."""

    plan: ImportPlan
    format: str
    detected: bool
    hash: str
    bytes: int


def prepare_import(path: Path, fmt: str = AUTO) -> PreparedImport:
    """Read `path` as `fmt` (or `auto`) into a plan and check it yields drafts, touching no
    ledger. Raises `E_PATH_NOT_FOUND` for a missing file, `E_INVALID_ARGS` naming the source
    line or event for bad input."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):  # /dev/zero never ends: never read one
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                "read the session file (it is a device, not a file)",
                str(path),
                "give the path of a session file (a regular file, or a pipe that ends)",
            )
        if stat.S_ISDIR(mode):
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                "read the session file (it is a directory)",
                str(path),
                "give the path of one session file inside it (a Claude Code session is "
                "~/.claude/projects/<dir>/<session>.jsonl; its subagent files come with it)",
            )
        data = path.read_bytes()
    except OSError as exc:
        raise RunfoldError(
            ErrorCode.PATH_NOT_FOUND,
            f"read the session file ({exc.strerror or exc})",
            str(path),
            "give the path of a session file that exists and is readable",
        ) from None
    source = path.name
    name = detect(data, source) if fmt == AUTO else fmt
    companions = companion_files(path) if name == "claude-code" else {}
    plan = read_plan(name, data, source, companions)
    if not any(session.events for session in plan.sessions):
        raise RunfoldError(
            ErrorCode.INVALID_ARGS,
            f"import {source} as {name} (it holds no conversation)",
            source,
            "give a session file with at least one message",
        )
    digest = content_hash(data)
    ids = [new_run_id() for _ in plan.sessions]
    import_drafts(plan, run_ids=ids, first_seq=0, source_hash=digest, source_bytes=len(data))  # refuses early
    return PreparedImport(plan, name, fmt == AUTO, digest, len(data))


def write_import(root: Path, ledger: LedgerWriter, prepared: PreparedImport) -> ImportReport:
    """Write a prepared import into the ledger `ledger` of workspace `root` (see the module
    docstring): every run folded from provisional records first, then the map documents into
    the CAS, then the lines in one batch. Raises `E_INVALID_ARGS` (nothing written) when a run
    would not fold, `E_STORAGE_FATAL` when the CAS or the ledger cannot be written (the ledger
    is cut back to before the batch)."""
    plan = prepared.plan
    source, name = plan.source, prepared.format
    run_ids = [new_run_id() for _ in plan.sessions]
    made = import_drafts(
        plan,
        run_ids=run_ids,
        first_seq=ledger.next_seq,
        source_hash=prepared.hash,
        source_bytes=prepared.bytes,
    )
    records = Stager().stage(list(made.drafts), ledger.next_seq, ledger.head, now_ms())
    for record in records:  # a value of a type its field cannot hold (a `stop_reason` of true)
        try:
            read_payload(record.kind, record.env.data)
        except RunfoldError as exc:
            where = made.origin.get(record.seq, "the top level")
            field = exc.subject.removeprefix("data.")
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                f"import {source} as {name} (a value there is of a type the {record.kind_name} line it "
                f"becomes cannot hold, in its {field})",
                f"{where} of {source}",
                "the file holds a field of an unexpected type there; repair that field and import again",
            ) from None
    by_run = fold_api.group_by_run(records)
    for run in made.runs:
        try:
            fold_api.fold_run(by_run, run.run)
        except RunfoldError as exc:
            raise RunfoldError(
                ErrorCode.INVALID_ARGS,
                f"import {source} as {name} (its session {run.session} does not fold: {exc.action})",
                f"{exc.subject} of the run it would become",
                "the file holds a conversation runfold cannot continue; report it with the file attached",
            ) from None
    cas = Cas(root)
    for document in made.objects:
        cas.put(document)
    ledger.append(list(made.drafts))
    return ImportReport(
        name, prepared.detected, source, prepared.hash, prepared.bytes, made.runs, len(plan.skipped)
    )
