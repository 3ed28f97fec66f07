"""Fork planning (DESIGN.md §7): the two lines that start a new run inheriting a mother's
conversation through the last safe cut point ≤ the asked seq, and the raw byte prefix.

Planning is pure: the caller (the api layer) supplies the mother's lineage lines, the ledger's
tail, the new run id (UUIDv7 from `ids.run_id_v7` with its clock and randomness) and appends the
drafts under the writer lock. The mother's lines are never touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runfold.core.errors import invalid_args
from runfold.core.fold.lineage_steps import not_in_lineage
from runfold.core.fold.run import RunFold, fold_run, lineage
from runfold.core.ids import is_run_id
from runfold.core.payloads import RunForked, RunStarted
from runfold.core.records import Draft, Record


@dataclass(frozen=True)
class ForkPlan:
    """A planned fork.

    - `mother`: the run forked; `asked`: the seq asked for; `cut`: the last safe cut point ≤
      `asked` actually used (what `run_forked.at_seq` records); `moved`: why `cut` differs from
      `asked` (None when equal);
    - `new_run`: the new run's id;
    - `drafts`: `run_started` (opening `inherited`, parent = mother) and `run_forked {from, at_seq}`,
      to append in that order;
    - `inherited`: the mother's fold at `cut` (its `inherited()` is the child's starting point).
    """

    mother: str
    asked: int
    cut: int
    moved: str | None
    new_run: str
    drafts: tuple[Draft, Draft]
    inherited: RunFold


def plan_fork(
    lines_by_run: Mapping[str, Sequence[Record]],
    mother: str,
    at_seq: int,
    *,
    new_run: str,
    tail: int,
    task: str | None = None,
    goal: str | None = None,
    who: str = "person",
    predecessor: str | None = None,
    model: str | None = None,
) -> ForkPlan:
    """Plan a fork of `mother` at `at_seq` (DESIGN.md §7).

    `lines_by_run` holds the mother's lineage (see `fold.run.fold_run`); `tail` is the ledger's
    last seq; `new_run` the new run's UUID; `task`/`goal` replace the mother's (default: the
    mother's own); `who` authors the lines and is named as who handed the task down;
    `predecessor` (a run id, normally the mother) makes the new run its successor (continue);
    `model` is the model the new run calls (what its `run_started.model` records; default: the
    mother's, for a fork that is written and not run).

    The new `run_started` copies the mother's `job`, `skills`, `policy`, `effort`, `model` (unless
    `model` is given) and address, and sets `opening: inherited`, `parent: mother`, `dispatched_by: who`.

    Raises `E_INVALID_ARGS` when `at_seq` is past `tail` (naming the tail) or not a line of the
    mother's lineage (naming the valid ranges) — never clamped —, when `new_run` is not a
    lowercase UUID or already has lines, or when `task` is given but blank; and the errors of
    `fold_run` for a mother whose lines cannot be folded.
    """
    if not is_run_id(new_run) or new_run in lines_by_run:
        raise invalid_args(
            "plan fork",
            f"new run {new_run!r}",
            "give a fresh lowercase UUIDv7 (ids.run_id_v7) that names no run yet",
        )
    if task is not None and not task.strip():
        raise invalid_args("plan fork", "--task", "give a task with visible text, or leave it out")
    lin = lineage(lines_by_run, mother)
    if at_seq > tail or at_seq < 0:
        raise not_in_lineage(lin, at_seq, tail)
    fold = fold_run(lines_by_run, mother, at_seq, tail=tail)
    first = lines_by_run[mother][0]
    started = first.typed(RunStarted)
    # Built from wire data: mypy does not see the payload classes' dataclass fields.
    child = RunStarted.from_data(
        {
            "task": started.task if task is None else task,
            "goal": started.goal if goal is None else goal,
            "job": started.job,
            "parent": mother,
            "predecessor": predecessor,
            "skills": [s.to_data() for s in started.skills],
            "dispatched_by": who,
            "policy": started.policy,
            "opening": "inherited",
            "effort": started.effort,
            "model": started.model if model is None else model,
        }
    )
    forked = RunForked.from_data({"from": mother, "at_seq": fold.cut})
    drafts = (
        Draft(new_run, who, RunStarted.KIND.value, child, addr=first.env.addr),
        Draft(new_run, who, RunForked.KIND.value, forked, addr=first.env.addr),
    )
    return ForkPlan(
        mother=mother,
        asked=at_seq,
        cut=fold.cut,
        moved=fold.moved,
        new_run=new_run,
        drafts=drafts,
        inherited=fold,
    )


def raw_prefix(records: Sequence[Record], at_seq: int) -> bytes:
    """The ledger's lines 0..=`at_seq`, byte-identical, each followed by `\\n` (DESIGN.md §7: a
    fork's history is a byte-identical prefix). `records` are the ledger's lines from seq 0 in
    order (more may follow; they are not read).

    Raises `E_INVALID_ARGS` naming the tail when `at_seq` is negative or past the last line, or
    when `records` do not start at seq 0 and run contiguously.
    """
    tail = len(records) - 1
    if not 0 <= at_seq <= tail:
        raise invalid_args(
            "take the raw prefix",
            f"seq {at_seq}",
            f"give a seq in 0..{tail} (the ledger's tail is seq {tail})",
        )
    out: list[bytes] = []
    for index, rec in enumerate(records[: at_seq + 1]):
        if rec.seq != index:
            raise invalid_args(
                "take the raw prefix",
                f"line {index + 1} (seq {rec.seq})",
                "pass the ledger's lines from seq 0 in order",
            )
        out.append(rec.raw)
        out.append(b"\n")
    return b"".join(out)
