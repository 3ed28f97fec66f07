"""Property test over random scripted runs under tiny windows (DESIGN.md §10): parallel waves,
steers, oversized results, forks at every seq. Every request the model got is valid and within
its budget, measured the way the trigger measures (`runtime.compaction.conversation_tokens`);
every cut validates in all three dialects; replay is byte-exact."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from cp_support import DIALECTS, is_summary_request, read, reply, say, two_scripts, workspace
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runfold.core.records import Record
from runfold.core.validate import validate
from runfold.runtime.compaction import prefix_bytes, request_measures
from runfold.runtime.prefix import Prefix


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    window = draw(st.sampled_from((3000, 4000, 6000)))
    waves = draw(st.lists(st.integers(1, 3), min_size=1, max_size=10))
    big = draw(st.lists(st.booleans(), min_size=sum(waves), max_size=sum(waves)))
    steer_at = draw(st.sets(st.integers(1, 80), max_size=4))
    return {
        "dialect": draw(st.sampled_from(DIALECTS)),
        "window": window,
        "waves": waves,
        "big": big,
        "steer_at": steer_at,
        "talk": draw(st.integers(0, 300)),
    }


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_compacted_runs_keep_every_request_valid_and_within_budget(sc: dict[str, Any]) -> None:
    tmp = Path(tempfile.mkdtemp())
    try:
        root = tmp / "ws"
        ws = workspace(root, window=sc["window"])
        budget_tokens = (sc["window"] - 500) * 550 // 1000
        big_bytes = budget_tokens * 4 // 6  # an oversized result: a sixth of the budget
        turns = []
        n = 0
        for i, width in enumerate(sc["waves"]):
            uses = []
            for _ in range(width):
                size = big_bytes if sc["big"][n] else 60
                (root / f"f{n}.txt").write_text("y" * size)
                uses.append(read(f"c{n}", f"f{n}.txt"))
                n += 1
            turns.append(reply(say(f"wave {i} " + "z" * sc["talk"]), *uses))
        turns.extend([reply(say("done"))] * 6)  # a steer after the answer takes another turn
        p = two_scripts(turns, [reply(say("summary of the earlier work"))] * 50, sc["dialect"])
        steers: asyncio.Queue[Any] = asyncio.Queue()

        def on_event(rec: Record) -> None:
            if rec.seq in sc["steer_at"]:
                steers.put_nowait(f"steer at {rec.seq}")

        out = ws.run(
            "read them all", model=p, builtin_tools=["read_file"], on_event=on_event, steers=steers
        )
        assert out.completion == "done", out.reason
        lines = ws.records(run=out.run_id)
        event(f"compactions: {sum(1 for r in lines if r.kind_name == 'context_changed')}")
        ws.verify()
        report = ws.replay(out.run_id)
        assert report.ok and report.requests == len(p.requests), report.summary()
        assembled = next(r for r in lines if r.kind_name == "prompt_assembled")
        from runfold.core.locator import parse_locator
        from runfold.store.cas import Cas

        prefix = Prefix.load(Cas(root).get_locator(parse_locator(assembled.env.data["prefix"])), "test")  # type: ignore[arg-type]
        plen = prefix_bytes(prefix)
        measures = request_measures(lines, plen)
        assert len(measures) == len(p.requests)
        for req, (_, tokens, summary) in zip(p.requests, measures, strict=True):
            assert validate(req.dialect, req.body) == []
            assert summary == is_summary_request(req)
            if summary:
                assert tokens + plen // 4 <= sc["window"] - 500
            else:
                assert tokens <= budget_tokens, (tokens, budget_tokens)
        for rec in lines:
            view = ws.request_at(out.run_id, rec.seq)
            assert all(v == [] for v in view.verdicts.values()), (rec.seq, view.verdicts)
        ws.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
