"""The bearer token: required off loopback (the server refuses to start without one), generated
private (mode 0600), 401 in runfold's error shape when missing or wrong, never logged."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from srv_support import env, make_workspace, start_server


def serve_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runfold", "serve", "-w", str(root), *args],
        cwd=root, env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_non_loopback_address_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    res = serve_cli(root, "--host", "0.0.0.0", "--port", "0")
    assert res.returncode != 0
    assert "E_INVALID_ARGS" in res.stderr and "--new-token" in res.stderr
    assert not (root / ".runfold" / "serve" / "serve.json").exists()


def test_a_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    loose = tmp_path / "token"
    loose.write_text("s3cret-value\n")
    loose.chmod(0o644)
    res = serve_cli(root, "--token-file", str(loose), "--port", "0")
    assert res.returncode != 0 and "chmod 600" in res.stderr
    assert "s3cret-value" not in res.stderr + res.stdout


def test_the_token_is_private_required_and_never_logged(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root, token=True)
    try:
        path = root / ".runfold" / "serve" / "token"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert srv.token and len(srv.token) >= 40
        with srv.client(token="") as c:
            missing = c.get("/runs")
            assert missing.status_code == 401
            assert missing.json()["error"]["code"] == "E_INVALID_ARGS"
            assert "no bearer token" in missing.json()["message"]
            assert c.get("/health").status_code == 200
        with srv.client(token=srv.token[:-1] + "x") as c:
            wrong = c.post("/runs", json={"task": "x"})
            assert wrong.status_code == 401 and "wrong bearer token" in wrong.json()["message"]
            assert srv.token not in wrong.text
        with srv.client() as c:
            assert c.get("/runs").status_code == 200
    finally:
        log = srv.stop()
    assert srv.token not in log and srv.token[:-1] + "x" not in log


def test_a_wildcard_address_is_reached_by_loopback_here_and_announced_by_host_name(tmp_path: Path) -> None:
    import socket

    from runfold.server.process import server_urls

    assert server_urls("0.0.0.0", 80) == ("http://127.0.0.1:80", f"http://{socket.gethostname()}:80")
    assert server_urls("::", 80) == ("http://[::1]:80", f"http://{socket.gethostname()}:80")
    assert server_urls("127.0.0.1", 80) == ("http://127.0.0.1:80", "http://127.0.0.1:80")
    assert server_urls("::1", 80) == ("http://[::1]:80", "http://[::1]:80")
    root = make_workspace(tmp_path / "ws")
    srv = start_server(root, "--host", "0.0.0.0", token=True)
    try:
        assert srv.url.startswith("http://127.0.0.1:")  # what clients on this machine use (serve.json)
        with srv.client(token=srv.token) as c:
            assert c.get("/server").status_code == 200
        status = subprocess.run(
            [sys.executable, "-m", "runfold", "runs", "-w", str(root)], cwd=root, env=env(), capture_output=True, text=True, timeout=120
        )
        assert status.returncode == 0, status.stderr
    finally:
        log = srv.stop()
    port = srv.url.rsplit(":", 1)[1]
    assert f"web page: http://{socket.gethostname()}:{port}/ (one-time login link: http://{socket.gethostname()}:{port}/login?code=" in log
    assert "0.0.0.0" not in log
