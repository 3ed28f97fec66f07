"""Folds: pure functions over ledger lines that build views (DESIGN.md §2, §5–§7, §10).

`run` rebuilds a run's conversation through a safe cut point; `fork` plans a fork and takes the
raw prefix; `runs` tallies runs (turns, tokens, cost), summarizes them and arranges their lineage
tree; `why` attributes the window.
"""

from __future__ import annotations

from runfold.core.fold.fork import ForkPlan, plan_fork, raw_prefix
from runfold.core.fold.resume import (
    DanglingCall,
    LostRun,
    ResumePlan,
    ResumeScan,
    resume_drafts,
    successor_note,
)
from runfold.core.fold.run import (
    DECISIONS,
    SAFE_PHASES,
    Decision,
    Lineage,
    LineageStep,
    Phase,
    RunFold,
    RunFolder,
    fold_run,
    fork_point,
    group_by_run,
    inherit,
    line_phases,
    lineage,
    lineage_lines,
    lineage_runs,
    not_in_lineage,
    safe_points,
)
from runfold.core.fold.runs import (
    Pricing,
    RunSummary,
    RunTally,
    TreeNode,
    render_tree,
    reply_cost,
    run_summaries,
    run_tree,
)
from runfold.core.fold.why import Change, Part, WhyReport, why

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
    "RunSummary",
    "RunTally",
    "TreeNode",
    "WhyReport",
    "fold_run",
    "fork_point",
    "group_by_run",
    "inherit",
    "line_phases",
    "lineage",
    "lineage_lines",
    "lineage_runs",
    "not_in_lineage",
    "plan_fork",
    "raw_prefix",
    "render_tree",
    "reply_cost",
    "resume_drafts",
    "run_summaries",
    "run_tree",
    "safe_points",
    "successor_note",
    "why",
]
