"""schemathesis against the served OpenAPI schema: generated requests to every operation get no
5xx and answers that fit the schema; every status the schema documents is reached (generated, or
by a directed request where only a state reaches it: a frozen run's 409, a wrong token's 401,
a body past the ceiling's 413)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from srv_support import make_workspace, start_server, wait_state, write_script

EXAMPLES = 20


def _no_model(case: Any) -> Any:
    """Runs the fuzzer dispatches use the workspace's scripted default model, never a provider
    on the network."""
    if isinstance(case.body, dict):
        case.body.pop("model", None)
    return case


def _fuzz(op: Any, url: str, headers: dict[str, str], seen: set[int]) -> None:
    """`EXAMPLES` generated requests to the operation `op`: no 5xx, each answer fits the schema
    (statuses, content type, body); the statuses seen are added to `seen`."""

    @given(case=op.as_strategy().map(_no_model))
    @settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None)
    def check(case: Any) -> None:
        resp = case.call(base_url=url, headers=headers, timeout=60)
        assert resp.status_code < 500, (op.label, resp.status_code, resp.text)
        seen.add(resp.status_code)
        # schema-valid data may still be refused (text that is not valid Unicode, a `..` room):
        # a 4xx in runfold's shape, which the other checks cover
        case.validate_response(resp, excluded_checks=[schemathesis.checks.positive_data_acceptance])

    check()


def test_generated_requests_get_no_5xx_and_every_documented_status_is_reached(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    answer = write_script(tmp_path / "answer.jsonl", [{"content": [{"kind": "text", "text": "ok"}]}] * 1)
    config = root / ".runfold" / "config.toml"
    config.write_text(config.read_text().replace('model = "local"', f'model = "script:{answer}"'))
    srv = start_server(root, token=True)
    seen: dict[str, set[int]] = defaultdict(set)
    try:
        headers = {"Authorization": f"Bearer {srv.token}"}
        with srv.client() as c:
            run = c.post("/runs", json={"task": "seed run"}).json()["run"]
            wait_state(c, run, ("done",))
        schema = schemathesis.openapi.from_url(f"{srv.url}/api/openapi.json")
        documented: dict[str, set[int]] = {}
        for result in schema.get_all_operations():
            op = result.ok()
            documented[op.label] = {int(s) for s in op.definition.raw["responses"] if s.isdigit()}

            _fuzz(op, srv.url, headers, seen[op.label])
        # directed requests for statuses only a state reaches
        slow = write_script(tmp_path / "slow.jsonl", [{"content": [{"kind": "text", "text": "slow"}], "delay_ms": 30000}])
        with srv.client() as c, srv.client(token="wrong") as bad:
            live = c.post("/runs", json={"task": "slow", "model": f"script:{slow}"}).json()["run"]
            shared = run[: next(i for i, (a, b) in enumerate(zip(run, live, strict=True)) if a != b)]  # ambiguous
            for label in documented:
                method, path = label.split(" ", 1)
                path = path.removeprefix("/api")
                body: dict[str, Any] | None = {} if method == "POST" else None
                if path.endswith("/steer"):
                    body = {"text": "x"}
                elif path.endswith("/fork"):
                    body = {"at": 5}
                elif path == "/runs":
                    body = {"task": "t"}
                for rid in (run, "ffffffff", shared):
                    concrete = path.replace("{run}", rid)
                    seen[label].add(bad.request(method, concrete, json=body).status_code)
                    seen[label].add(c.request(method, concrete, json=body).status_code)
                    if method == "POST":
                        seen[label].add(c.request(method, concrete, content=b"{", headers={"content-type": "application/json"}).status_code)
                        big = b'{"text": "' + b"x" * (1024 * 1024) + b'"}'  # past the default 1 MiB ceiling
                        seen[label].add(c.request(method, concrete, content=big, headers={"content-type": "application/json"}).status_code)
                    else:
                        seen[label].add(c.request(method, concrete, params={"lines": "maybe", "since": -1}).status_code)
                if path.endswith("/fork"):
                    seen[label].add(c.post(path.replace("{run}", run), json={"at": 10**9}).status_code)
            seen["POST /api/runs"].add(c.post("/runs", json={"task": "t", "room": "a/../b"}).status_code)
            seen["POST /api/runs/{run}/steer"].add(c.post(f"/runs/{live}/steer", json={"text": "hello"}).status_code)
            seen["POST /api/runs/{run}/continue"].add(c.post(f"/runs/{live}/continue", json={}).status_code)
            seen["POST /api/runs/{run}/cancel"].add(c.post(f"/runs/{live}/cancel", json={}).status_code)
            wait_state(c, live, ("cancelled",))
    finally:
        srv.stop()
    missing = {label: sorted(codes - seen[label]) for label, codes in documented.items() if codes - seen[label]}
    assert not missing, f"documented statuses never reached: {missing}"
    assert all(code < 500 for codes in seen.values() for code in codes)
