"""Folds: pure functions over ledger lines that build views (DESIGN.md §2, §5–§7, §10).

`run` rebuilds a run's conversation through a safe cut point; `fork` plans a fork and takes the
raw prefix; `runs` tallies runs (turns, tokens, cost), summarizes them and arranges their lineage
tree; `why` attributes the window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runfold.core.lazy import lazy_getattr

if TYPE_CHECKING:
    from runfold.core.fold.decisions import DECISIONS, SAFE_PHASES, Decision, Phase
    from runfold.core.fold.fork import ForkPlan, plan_fork, raw_prefix
    from runfold.core.fold.lineage_steps import (
        Lineage,
        LineageStep,
        fork_point,
        group_by_run,
        lineage_lines,
        not_in_lineage,
    )
    from runfold.core.fold.resume import (
        DanglingCall,
        LostRun,
        ResumePlan,
        ResumeScan,
        resume_drafts,
        successor_note,
    )
    from runfold.core.fold.run import (
        RunFold,
        RunFolder,
        fold_run,
        inherit,
        line_phases,
        lineage,
        lineage_runs,
        safe_points,
    )
    from runfold.core.fold.runs import (
        Pricing,
        RunSummaries,
        RunSummary,
        RunTally,
        TreeNode,
        handed_down,
        owner_gone,
        render_tree,
        reply_cost,
        run_summaries,
        run_tree,
    )
    from runfold.core.fold.why import Change, Part, WhyReport, why_report

__all__ = [
    "DECISIONS",
    "SAFE_PHASES",
    "Change",
    "DanglingCall",
    "Decision",
    "ForkPlan",
    "Lineage",
    "LineageStep",
    "LostRun",
    "Part",
    "Phase",
    "Pricing",
    "ResumePlan",
    "ResumeScan",
    "RunFold",
    "RunFolder",
    "RunSummaries",
    "RunSummary",
    "RunTally",
    "TreeNode",
    "WhyReport",
    "fold_run",
    "fork_point",
    "group_by_run",
    "handed_down",
    "inherit",
    "line_phases",
    "lineage",
    "lineage_lines",
    "lineage_runs",
    "not_in_lineage",
    "owner_gone",
    "plan_fork",
    "raw_prefix",
    "render_tree",
    "reply_cost",
    "resume_drafts",
    "run_summaries",
    "run_tree",
    "safe_points",
    "successor_note",
    "why_report",
]

_HOMES: dict[str, str] = {
    "Change": "runfold.core.fold.why",
    "DECISIONS": "runfold.core.fold.decisions",
    "DanglingCall": "runfold.core.fold.resume",
    "Decision": "runfold.core.fold.decisions",
    "ForkPlan": "runfold.core.fold.fork",
    "Lineage": "runfold.core.fold.lineage_steps",
    "LineageStep": "runfold.core.fold.lineage_steps",
    "LostRun": "runfold.core.fold.resume",
    "Part": "runfold.core.fold.why",
    "Phase": "runfold.core.fold.decisions",
    "Pricing": "runfold.core.fold.runs",
    "ResumePlan": "runfold.core.fold.resume",
    "ResumeScan": "runfold.core.fold.resume",
    "RunFold": "runfold.core.fold.run",
    "RunFolder": "runfold.core.fold.run",
    "RunSummary": "runfold.core.fold.runs",
    "RunTally": "runfold.core.fold.runs",
    "SAFE_PHASES": "runfold.core.fold.decisions",
    "TreeNode": "runfold.core.fold.runs",
    "WhyReport": "runfold.core.fold.why",
    "fold_run": "runfold.core.fold.run",
    "fork_point": "runfold.core.fold.lineage_steps",
    "group_by_run": "runfold.core.fold.lineage_steps",
    "inherit": "runfold.core.fold.run",
    "line_phases": "runfold.core.fold.run",
    "lineage": "runfold.core.fold.run",
    "lineage_lines": "runfold.core.fold.lineage_steps",
    "lineage_runs": "runfold.core.fold.run",
    "not_in_lineage": "runfold.core.fold.lineage_steps",
    "handed_down": "runfold.core.fold.runs",
    "owner_gone": "runfold.core.fold.runs",
    "plan_fork": "runfold.core.fold.fork",
    "raw_prefix": "runfold.core.fold.fork",
    "render_tree": "runfold.core.fold.runs",
    "reply_cost": "runfold.core.fold.runs",
    "resume_drafts": "runfold.core.fold.resume",
    "run_summaries": "runfold.core.fold.runs",
    "RunSummaries": "runfold.core.fold.runs",
    "run_tree": "runfold.core.fold.runs",
    "safe_points": "runfold.core.fold.run",
    "successor_note": "runfold.core.fold.resume",
    "why_report": "runfold.core.fold.why",
}
"""Each public name → the module that defines it: names resolve on first use (PEP 562), so a
command that needs no fold (`runfold verify`, `log`) does not load the conversation machinery."""

if not TYPE_CHECKING:

    __getattr__ = lazy_getattr(__name__, _HOMES, globals())


def __dir__() -> list[str]:
    return sorted(__all__)
