"""A run's turns, tokens and cost agree everywhere they are shown — the run's outcome, `runfold
runs` and `runfold cost` — because all three read the one runs fold (`core.fold.runs.RunTally`),
including after a price for the run's model is added to `.runfold/config.toml`."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from rt_support import call, text
from typer.testing import CliRunner

from runfold.api import Workspace
from runfold.cli.main import app
from runfold.providers.scripted import ScriptedProvider

PRICE = (
    '\n[prices."acme-1"]\n'
    "input_usd_micros_per_mtok = 3000000\n"
    "output_usd_micros_per_mtok = 15000000\n"
    "cache_read_usd_micros_per_mtok = 300000\n"
)


def cli_json(ws: Workspace, *args: str) -> Any:
    with contextlib.chdir(ws.root):
        res = CliRunner().invoke(app, [*args, "--json"], env={"RUNFOLD_WORKSPACE": None, "NO_COLOR": "1"})
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def note(n: int) -> dict[str, Any]:
    """Remember a number.

    Args:
        n: The number.
    """
    return {"n": n}


def test_runs_and_cost_agree_before_and_after_a_price_is_added(ws: Workspace) -> None:
    model = ScriptedProvider.of(
        [
            call("c1", "note", {"n": 1}, usage={"input": 1000, "output": 20, "cache_read": 4000}),
            text("noted", usage={"input": 1200, "output": 10}),
        ],
        model="acme-1",
    )
    out = ws.run("note a number", model=model, tools=[note])
    assert out.completion == "done" and out.turns == 2 and out.billed_usd_micros is None

    def compare() -> tuple[Any, Any]:
        (row,) = cli_json(ws, "runs")
        cost = cli_json(ws, "cost")
        (by_run,) = cost["runs"]
        assert row["run"] == by_run["key"] == out.run_id
        assert row["turns"] == by_run["calls"] == out.turns
        assert row["tokens"] == by_run["usage"] == cost["total"]["usage"]
        assert row["cost_usd_micros"] == by_run["billed_usd_micros"] == cost["total"]["billed_usd_micros"]
        return row, cost

    row, _ = compare()
    assert row["cost_usd_micros"] is None  # no price known for acme-1: unknown, never 0
    assert row["tokens"] == {"input": 2200, "output": 30, "cache_read": 4000, "cache_write": 0}
    with (ws.root / ".runfold" / "config.toml").open("a", encoding="utf-8") as f:
        f.write(PRICE)
    row, cost = compare()
    priced = (2200 * 3_000_000 + 30 * 15_000_000 + 4000 * 300_000) // 1_000_000
    assert row["cost_usd_micros"] == priced
    assert cost["total"]["cache_savings_usd_micros"] == 4000 * (3_000_000 - 300_000) // 1_000_000


def test_a_free_model_without_recorded_usage_costs_zero_in_runs_and_cost() -> None:
    """The foreign fixture's scripted replies record no usage: a free model (every token kind
    priced 0) still costs $0, the same in `runs` and `cost`; tokens stay unknown."""
    fixture = Path(__file__).resolve().parents[2] / "examples" / "sprawling-golden-p0.jsonl"
    with Workspace.open(fixture) as ws:
        (summary,) = ws.run_summaries()
        report = ws.cost()
    assert summary.cost_usd_micros == 0
    assert report.total.billed_usd_micros == 0
    assert report.total.usage_known is False

