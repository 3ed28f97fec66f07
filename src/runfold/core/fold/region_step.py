"""The run fold's step for a region edit (DESIGN.md §10): a `context_changed` line on the notes,
todo or scratch region, checked against its place and its recorded sizes and applied through
`core.regions.apply_edit`, the function the live loop applied it with — so replay, forks and
resumes see exactly the regions the live run sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from runfold.core.causes import Cause
from runfold.core.errors import RunfoldError
from runfold.core.fold.lineage_steps import corrupt, unsupported
from runfold.core.payloads import ContextChanged
from runfold.core.records import Record
from runfold.core.regions import OPS, Edit, Regions, apply_edit


class OpenWave(Protocol):
    """What the step reads of the run fold's open wave: the calls with a `tool_called` and the
    calls with a `tool_result`, by tool_use id."""

    @property
    def called(self) -> Mapping[str, Any]: ...

    @property
    def results(self) -> Mapping[str, Any]: ...


def region_step(
    rec: Record, changed: ContextChanged, regions: Regions, revision: int, wave: OpenWave | None
) -> Regions:
    """The regions after the edit `rec` records, the window at `revision` before it.

    `wave`: the open wave (None outside one); the edit's call must have its `tool_called` in it
    and no `tool_result` yet. Raises `E_LOG_VERSION_UNSUPPORTED` for an op this build does not
    know, and `E_LEDGER_CORRUPT` naming the field when the cause is not `context_tool`, the
    line does not lie inside its call (`tool_use_id`), its revisions do not continue the
    window's, its edit cannot apply, or its recorded bytes differ from the edit's."""
    if changed.op not in OPS.get(changed.region, ()):
        unsupported(rec, f"data.op {changed.op!r}", f"{changed.region} edit", "region edit")
    if changed.cause != Cause.CONTEXT_TOOL:
        corrupt(rec, "data.cause", f"a {changed.region} edit with cause {changed.cause!r}, not context_tool")
    call = changed.tool_use_id
    if wave is None or call not in wave.called or call in wave.results:
        corrupt(
            rec,
            "data.tool_use_id",
            f"a region edit lies between the tool_called and the tool_result of its call; "
            f"{changed.tool_use_id!r} is no open call of a wave",
        )
    extra = changed.extra
    if extra.get("revision_before") != revision or extra.get("revision_after") != revision + 1:
        corrupt(
            rec,
            "data.revision_before",
            f"the window is at revision {revision}, the line says "
            f"{extra.get('revision_before')!r}→{extra.get('revision_after')!r}",
        )
    try:
        applied = apply_edit(regions, Edit.of(changed.to_data()), rec.seq)
    except RunfoldError as exc:
        corrupt(rec, exc.subject, exc.action)
    recorded = (extra.get("bytes_removed"), extra.get("bytes_added"))
    if recorded != (applied.bytes_removed, applied.bytes_added):
        corrupt(
            rec,
            "data.bytes_added",
            f"the edit removes {applied.bytes_removed} B and adds {applied.bytes_added} B, "
            f"the line records {recorded[0]!r} and {recorded[1]!r}",
        )
    return applied.regions
