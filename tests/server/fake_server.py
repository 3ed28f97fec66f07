"""A process that owns a workspace as `runfold serve` does (the writer lock, `serve.json`) but
answers its HTTP API badly: `python fake_server.py ROOT MODE [BODY]`. MODE `hang` accepts
connections and never answers; `body` answers every request 200 with BODY (default: not JSON).
It prints `ready` once serve.json names it, and runs until killed."""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

from runfold.api import Workspace
from runfold.store.serving import ServeInfo, write_info


def main() -> None:
    root, mode = Path(sys.argv[1]), sys.argv[2]
    body = (sys.argv[3] if len(sys.argv) > 3 else "<html>not json</html>").encode()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    held: list[socket.socket] = []

    def answer(conn: socket.socket) -> None:
        if mode == "hang":
            held.append(conn)  # read nothing, answer nothing
            return
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

    with Workspace(root).writer():
        url = f"http://127.0.0.1:{port}"
        write_info(root, ServeInfo(os.getpid(), url, "127.0.0.1", port, None, 0))
        print("ready", flush=True)
        while True:
            conn, _ = sock.accept()
            threading.Thread(target=answer, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
