"""Benchmark of runfold next to its peers on the same scripted agent, with durable history.

A zero-latency scripted model drives N turns, each a concurrent wave of two read-only tool calls
with ~500-byte results, then a closing reply, through runfold (file ledger), LangGraph with
`SqliteSaver` and with `PostgresSaver` (a local server this script starts), the OpenAI Agents
SDK with `SQLiteSession`, and pydantic-ai with its history saved as JSON before every model
request. Each (system, N) runs in a child process of its own (so its peak RSS is its own),
killed with SIGKILL at the last turn; a second child resumes it and forks it at the middle turn.

Usage: python bench/peers.py [--quick] [--sizes 10,100,1000,10000] [--systems a,b] [--out DIR]
[--budget S] [--profile N]. The peers are optional (bench/requirements-peers.txt, in a venv of
their own); the script says which are missing and measures the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import fmt_bytes, missing_modules
from _pg import Postgres

SIZES = (10, 100, 1000, 10000)
QUICK_SIZES = (10, 100)
SYSTEMS: dict[str, tuple[str, ...]] = {
    "runfold": ("runfold.api",),
    "langgraph-sqlite": ("langgraph", "langgraph.checkpoint.sqlite"),
    "langgraph-postgres": ("langgraph", "langgraph.checkpoint.postgres", "psycopg"),
    "openai-agents": ("agents",),
    "pydantic-ai": ("pydantic_ai",),
}
"""Each system and the modules it needs."""
COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("us_turn", "wall ms/turn", lambda v: f"{v / 1000:.2f}"),
    ("cpu_us_turn", "CPU ms/turn", lambda v: f"{v / 1000:.2f}"),
    ("us_turn_last", "wall ms/turn last 10%", lambda v: f"{v / 1000:.2f}"),
    ("cpu_us_turn_last", "CPU ms/turn last 10%", lambda v: f"{v / 1000:.2f}"),
    ("rss_kb", "peak RSS", lambda v: fmt_bytes(v * 1024)),
    ("stored_bytes", "stored", fmt_bytes),
    ("bytes_turn_last", "B/turn last 10%", lambda v: f"{v:,.0f}"),
    ("resume_s", "resume s", lambda v: f"{v:.2f}"),
    ("fork_s", "fork ms", lambda v: f"{v * 1000:.1f}"),
)
"""(result key, column head, format) of the table; every column is lower-is-better."""
PACKAGES = (
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "psycopg",
    "openai-agents",
    "pydantic-ai-slim",
)
"""The peers' distributions whose versions the report names."""


def versions() -> str:
    """`name version` of each installed distribution of PACKAGES, comma-separated."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in PACKAGES:
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    return ", ".join(out) or "no peers installed"


# ---- the child processes ----


def child(argv: Sequence[str]) -> None:
    """`--child run|resume SYSTEM TURNS DIR [DSN] [SPAWNED]`: one measured run (killed at its
    last turn, `DIR/run.json`) or its resume and fork (`DIR/resume.json`)."""
    mode, system, turns_s, d_s, dsn = argv[:5]
    entered = time.time()
    import _peer_systems as ps

    turns, d = int(turns_s), Path(d_s)
    kind = system.removeprefix("langgraph-")
    pg = dsn or None
    if mode == "run":
        probe = ps.Probe(turns, d)
        if system == "runfold":
            asyncio.run(ps.run_runfold(turns, d, probe))
        elif system.startswith("langgraph-"):
            ps.run_langgraph(kind, turns, d, probe, pg)
        elif system == "openai-agents":
            asyncio.run(ps.run_agents(turns, d, probe))
        else:
            asyncio.run(ps.run_pydantic(turns, d, probe))
        return
    spawned = float(argv[5])
    if system == "runfold":
        notes = json.loads((d / "run.json").read_text())["notes"]
        ready, fork_s = asyncio.run(ps.resume_runfold(turns, d, notes))
    elif system.startswith("langgraph-"):
        ready, fork_s = ps.resume_langgraph(kind, turns, d, pg)
    elif system == "openai-agents":
        ready, fork_s = asyncio.run(ps.resume_agents(turns, d))
    else:
        ready, fork_s = asyncio.run(ps.resume_pydantic(turns, d))
    out = {
        "resume_s": ready - spawned,
        "resume_open_s": ready - entered,
        "fork_s": fork_s,
    }
    (d / "resume.json").write_text(json.dumps(out), encoding="utf-8")


def _spawn(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def measure(system: str, turns: int, root: Path, dsn: str, timeout: float) -> dict[str, Any]:
    """Run `system` for `turns` turns in a child (killed by SIGKILL at its last turn), then
    resume and fork it in a second child. Returns run.json + resume.json with `system`.
    Raises RuntimeError with the child's stderr when a child fails."""
    d = root / f"{system}-{turns}"
    d.mkdir()
    db = ""
    if system == "langgraph-postgres":
        db = _pg_database(dsn, f"bench_{turns}")
    run = _spawn(["run", system, str(turns), str(d), db], timeout)
    if run.returncode != -9 or not (d / "run.json").exists():
        raise RuntimeError(f"{system} {turns}: run child exited {run.returncode}: {run.stderr[-3000:]}")
    result = json.loads((d / "run.json").read_text())
    spawned = time.time()
    res = _spawn(["resume", system, str(turns), str(d), db, repr(spawned)], timeout)
    if res.returncode != 0:
        raise RuntimeError(f"{system} {turns}: resume child exited {res.returncode}: {res.stderr[-3000:]}")
    result.update(json.loads((d / "resume.json").read_text()))
    result["system"] = system
    return result


# ---- PostgreSQL ----


def _pg_database(dsn: str, name: str) -> str:
    """Create database `name` on the server of `dsn` (dropping one left over) and return its DSN."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return dsn.replace("/postgres?", f"/{name}?")


# ---- the durable-turn floor ----


def fdatasync_floor(d: Path, size: int, reps: int = 200, before: Sequence[float] = ()) -> dict[str, Any]:
    """Seconds of one `write` + `fdatasync` of a line of `size` bytes appended to a file in `d`
    (the disk the systems wrote to): median and mean over `reps` and the `before` times (taken
    just before the measured run, so the floor brackets it), and all the times."""
    path = d / "floor.bin"
    line = b"x" * max(1, size - 1) + b"\n"
    times = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(reps):
            t = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    times = [*before, *times]
    return {
        "median_s": statistics.median(times),
        "mean_s": statistics.fmean(times),
        "bytes": len(line),
        "times": times,
    }


# ---- report ----


def _ratio(v: float, base: float) -> str:
    if base <= 0:
        return ""
    r = v / base
    return f" (×{r:.2f})" if r < 10 else f" (×{r:.0f})"


def table(results: Sequence[dict[str, Any]]) -> str:
    """The results as a Markdown table, a peer's figure next to its ratio to runfold's (same N)."""
    head = "| system | N | " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    base = {r["turns"]: r for r in results if r["system"] == "runfold"}
    for r in results:
        if r.get("skipped"):
            lines.append(f"| {r['system']} | {r['turns']:,} | " + " | ".join("—" for _ in COLUMNS) + " |")
            continue
        b = base.get(r["turns"]) if r["system"] != "runfold" else None
        cells = [f(r[k]) + (_ratio(r[k], b[k]) if b else "") for k, _, f in COLUMNS]
        lines.append(f"| {r['system']} | {r['turns']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(results: Sequence[dict[str, Any]], floors: dict[int, dict[str, float]]) -> list[str]:
    """The three goals: at 1,000 turns runfold ahead of every peer on every column; runfold's
    bytes per turn flat from 100 to 10,000 turns (spread ≤ 10%); runfold's per-turn wall time
    ≤ 3× the fdatasync floor at 1,000 turns (or the largest N measured)."""
    out: list[str] = []
    done = [r for r in results if not r.get("skipped")]
    rf = {r["turns"]: r for r in done if r["system"] == "runfold"}
    if not rf:
        return out
    n = 1000 if 1000 in rf else max(rf)
    peers = [r for r in done if r["turns"] == n and r["system"] != "runfold"]
    if peers:
        behind = [f"{h} vs {r['system']}" for r in peers for k, h, _ in COLUMNS if rf[n][k] >= r[k]]
        verdict = "met" if not behind else "MISSED: not ahead on " + "; ".join(behind)
        out.append(f"{n:,} turns: runfold ahead of every peer on every column: {verdict}")
    flat = sorted(t for t in rf if t >= 100)
    if flat:
        per = [rf[t]["bytes_turn_last"] for t in flat]
        spread = max(per) / min(per) - 1
        shown = ", ".join(f"{t:,}: {v:,.0f}" for t, v in zip(flat, per, strict=True))
        out.append(
            f"runfold bytes per turn (last 10%) by N: {shown}; flat (spread ≤ 10%): "
            f"{'met' if spread <= 0.10 else 'MISSED'} (spread {spread:.1%})"
        )
    if n in floors:
        f = floors[n]["median_s"]
        r, last = rf[n]["us_turn"] / 1e6 / f, rf[n]["us_turn_last"] / 1e6 / f
        out.append(
            f"{n:,} turns: runfold wall time per turn {rf[n]['us_turn'] / 1000:.2f} ms (last 10%: "
            f"{rf[n]['us_turn_last'] / 1000:.2f} ms) / fdatasync floor {f * 1000:.2f} ms (a "
            f"{floors[n]['bytes']:.0f}-byte line, median of {len(floors[n]['times'])} around the run) = "
            f"×{r:.2f} (last 10%: ×{last:.2f}); goal ≤ ×3: {'met' if r <= 3 else 'MISSED'}"
        )
        notes = rf[n].get("notes", {})
        if notes.get("syncs"):
            per_call = notes["sync_s"] / notes["syncs"]
            out.append(
                f"{n:,} turns: runfold's own fdatasync calls in that run: {notes['syncs']:,}, "
                f"{per_call * 1000:.2f} ms each, {notes['sync_s'] / n * 1000:.2f} ms per turn "
                f"({notes['sync_s'] / rf[n]['wall_s']:.0%} of its wall time)"
            )
    return out


def plots(results: Sequence[dict[str, Any]], floors: dict[int, dict[str, float]], out: Path) -> list[Path]:
    """Two log-log PNGs against history length, one line per system: wall time per turn (with
    the fdatasync floor) and bytes per turn over the last 10%. Returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in results if not r.get("skipped")]
    paths = []
    for key, scale, ylabel, name, title in (
        ("us_turn", 1e-3, "wall time per turn, ms (whole run)", "peers-time-per-turn.png", "Time per turn"),
        (
            "bytes_turn_last",
            1.0,
            "bytes stored per turn (last 10% of turns)",
            "peers-bytes-per-turn.png",
            "Bytes stored per turn",
        ),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.set_title(f"{title}: N turns of two tool calls, zero-latency model")
        for system in SYSTEMS:
            pts = sorted((r["turns"], r[key] * scale) for r in done if r["system"] == system)
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=system)
        if key == "us_turn" and floors:
            pts = sorted((n, f["median_s"] * 1e3) for n, f in floors.items())
            ax.plot(*zip(*pts, strict=True), linestyle="--", color="grey", label="fdatasync of one line")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("history length, turns (N)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _estimate_s(results: Sequence[dict[str, Any]], system: str, turns: int) -> float | None:
    """Seconds a run of `turns` would take, extrapolated from the two largest sizes measured
    (growth exponent between them, at least 1), or None with fewer than two."""
    pts = sorted((r["turns"], r["wall_s"]) for r in results if r["system"] == system and not r.get("skipped"))
    if len(pts) < 2:
        return None
    (n0, t0), (n1, t1) = pts[-2:]
    k = max(1.0, math.log(t1 / t0) / math.log(n1 / n0)) if t0 > 0 and t1 > 0 else 1.0
    return t1 * (turns / n1) ** k


def profile(turns: int, emit: Callable[[str], None] = print) -> None:
    """cProfile of runfold in this process: the last 10% of the turns of one run of `turns`
    turns (stopped at the last turn's model call), then its continuation and its fork at the
    middle turn."""
    import cProfile
    import io
    import pstats

    import _peer_systems as ps

    class Stop(ps.Probe):
        """Profiles the last 10% of the turns only (the turn at this history length)."""

        prof = cProfile.Profile()

        def call(self, k: int) -> None:
            if k == self.turns // 2:
                self.on_mid()
            if k == self.turns - self.m:
                self.prof.enable()
            if k == self.turns:
                self.prof.disable()
                raise SystemExit(0)

    def show(prof: cProfile.Profile, title: str) -> None:
        for order, n in (("cumulative", 40), ("tottime", 20)):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(order).print_stats(n)
            emit(f"==== {title}, by {order} ====\n{buf.getvalue()}")

    d = Path(tempfile.mkdtemp(prefix="runfold-peers-prof-"))
    try:
        probe = Stop(turns, d)
        with contextlib.suppress(SystemExit):
            asyncio.run(ps.run_runfold(turns, d, probe))
        show(probe.prof, f"runfold, the last {probe.m:,} of {turns:,} turns")
        from runfold.api import Workspace

        ws = Workspace.open(d / "ws")
        for title, step in (
            ("continue after the last turn", ps.continue_runfold),
            ("fork at the middle turn", ps.fork_runfold),
        ):
            prof = cProfile.Profile()
            prof.runcall(asyncio.run, step(ws, probe.notes))
            show(prof, f"runfold, {title}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: Sequence[str] | None = None, emit: Callable[[str], None] = print) -> list[dict[str, Any]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="10 and 100 turns only")
    ap.add_argument("--sizes", help="comma-separated turn counts (overrides --quick)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated systems to measure")
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "out", help="results and plots"
    )
    ap.add_argument("--budget", type=float, default=600.0, help="skip a run estimated to take longer (s)")
    ap.add_argument("--profile", type=int, metavar="N", help="only profile runfold's turn loop at N turns")
    args = ap.parse_args(argv)
    if args.profile:
        profile(args.profile)
        return []
    sizes = (
        tuple(int(s) for s in args.sizes.split(",")) if args.sizes else QUICK_SIZES if args.quick else SIZES
    )
    if any(n < 2 for n in sizes):
        ap.error("--sizes: every turn count must be ≥ 2")
    wanted = [s for s in args.systems.split(",") if s]
    unknown = [s for s in wanted if s not in SYSTEMS]
    if unknown or "runfold" not in wanted:
        ap.error(f"--systems: unknown {unknown}; runfold is always measured (one of {', '.join(SYSTEMS)})")
    systems = []
    for s in wanted:
        gone = missing_modules(SYSTEMS[s])
        if gone:
            emit(
                f"{s} is not installed here (no {', '.join(gone)}): skipped. Install bench/requirements-peers.txt into a separate venv to measure it."
            )
        else:
            systems.append(s)
    emit(f"measuring {', '.join(systems)} at N = {', '.join(f'{n:,}' for n in sizes)}")
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    header = [
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores, load average before {load_before}",
        versions(),
    ]
    for line in header:
        emit(line)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="runfold-peers-"))
    pg = Postgres() if "langgraph-postgres" in systems else None
    if pg:
        emit(f"PostgreSQL {pg.version} on a unix socket in {pg.dir}")
    results: list[dict[str, Any]] = []
    floors: dict[int, dict[str, float]] = {}
    try:
        for n in sizes:
            for s in systems:
                est = _estimate_s(results, s, n)
                if est is not None and est > args.budget:
                    emit(f"{s} {n:,}: skipped, estimated {est:,.0f} s > budget {args.budget:,.0f} s")
                    results.append({"system": s, "turns": n, "skipped": True, "estimate_s": est})
                    continue
                t = time.time()
                before = fdatasync_floor(tmp, 3400) if s == "runfold" else None
                r = measure(s, n, tmp, pg.dsn if pg else "", timeout=max(3 * args.budget, 600))
                if before is not None:
                    floors[n] = fdatasync_floor(tmp, int(r["bytes_turn_last"]), before=before["times"])
                    r["floor"] = {k: v for k, v in floors[n].items() if k != "times"}
                results.append(r)
                emit(
                    f"{s} {n:,}: {r['wall_s']:.2f} s run, resume {r['resume_s']:.2f} s ({time.time() - t:.1f} s)"
                )
                shutil.rmtree(tmp / f"{s}-{n}", ignore_errors=True)
    finally:
        if pg:
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    header.append(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    skips = [
        f"{r['system']} {r['turns']:,}: skipped (estimated {r['estimate_s']:,.0f} s)"
        for r in results
        if r.get("skipped")
    ]
    report = [
        "; ".join(header),
        "",
        table(results),
        "",
        *[f"- {v}" for v in (*verdicts(results, floors), *skips)],
    ]
    emit("")
    for line in report[2:]:
        emit(line)
    emit(header[-1])
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "table.md").write_text(table(results) + "\n", encoding="utf-8")
    (args.out / "report.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    if missing_modules(["matplotlib"]):
        emit("matplotlib is not installed here: no plots (it is in bench/requirements-peers.txt)")
    else:
        for p in plots(results, floors, args.out):
            emit(f"plot: {p}")
    return results


if __name__ == "__main__":
    main()
