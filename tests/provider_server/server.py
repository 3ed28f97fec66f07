"""`ProviderServer`: the provider test app served by uvicorn on 127.0.0.1 at an ephemeral port,
in a background thread, as a context manager.

The socket is bound before uvicorn starts, so `base_url` is known at once; leaving the context
stops uvicorn and joins its thread (open keep-alive connections are closed).
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

from runfold.core.errors import ErrorCode, RunfoldError

from .app import RecordedRequest, ServerState, make_app
from .script import load_jsonl, parse_script


class ProviderServer:
    """A local server speaking Anthropic Messages and OpenAI Chat/Responses from a script.

    `script`: entries (see `script.parse_entry`) or a path to a JSONL script; `api_key`: the only
    key accepted (None: any non-empty key); `chunk`: code points per streamed delta;
    `responder`: answers `(dialect, body)` with an entry once the script is empty (a model
    without a script, e.g. for a benchmark); `prompt_cache`: a reply whose entry gives no usage
    reads and writes the prompt cache as the provider documents it (`cache.py`; off: no cache
    tokens, the prompt all uncached input).

    Use: `with ProviderServer([...]) as server:` then point an SDK at `server.anthropic_url`
    (Anthropic's `base_url`, no `/v1`) or `server.openai_url` (OpenAI's `base_url`, with `/v1`).
    """

    def __init__(
        self,
        script: Iterable[Any] | str | Path = (),
        *,
        api_key: str | None = None,
        chunk: int = 7,
        responder: Callable[[str, dict[str, Any]], Any] | None = None,
        prompt_cache: bool = False,
    ):
        entries = load_jsonl(script) if isinstance(script, str | Path) else parse_script(script)
        self.state = ServerState(
            deque(entries), api_key=api_key, chunk=chunk, responder=responder, prompt_cache=prompt_cache
        )
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle --------------------------------------------------------------------------------

    def start(self) -> ProviderServer:
        """Bind 127.0.0.1:0 and serve in a thread; returns self once uvicorn accepts requests.

        Raises `E_TIMEOUT` when uvicorn does not come up within 10 s."""
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it: no Nagle wait on the small writes of a response
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            make_app(self.state),
            log_level="critical",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        sock = self._sock
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="provider-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RunfoldError(
                    ErrorCode.TIMEOUT,
                    "start the provider test server",
                    "127.0.0.1",
                    "check that uvicorn runs here",
                )
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop uvicorn, join its thread (5 s at most) and close the socket; idempotent."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # addresses ----------------------------------------------------------------------------------

    def provider(self, dialect: str, model: str = "test-model") -> Any:
        """runfold's provider of `dialect` (`anthropic`, `openai-chat`, `openai-responses`)
        through its official SDK, pointed at this server with a test key."""
        if dialect == "anthropic":
            from runfold.providers.anthropic import AnthropicProvider

            return AnthropicProvider(model, api_key="test-key", base_url=self.anthropic_url)
        if dialect == "openai-chat":
            from runfold.providers.openai_chat import OpenAIChatProvider

            return OpenAIChatProvider(model, api_key="test-key", base_url=self.openai_url)
        from runfold.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(model, api_key="test-key", base_url=self.openai_url)

    @property
    def port(self) -> int:
        if self._sock is None:
            raise RunfoldError(
                ErrorCode.INVALID_ARGS, "read the port", "a stopped provider test server", "start it first"
            )
        return int(self._sock.getsockname()[1])

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>` (the root; endpoints live under `/v1/`)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def anthropic_url(self) -> str:
        """The Anthropic SDK's `base_url` (it appends `/v1/messages`)."""
        return self.base_url

    @property
    def openai_url(self) -> str:
        """The OpenAI SDK's `base_url` (it appends `/chat/completions`, `/responses`)."""
        return self.base_url + "/v1"

    # script and records ---------------------------------------------------------------------------

    def push(self, *entries: Any) -> None:
        """Append entries to the script while the server runs."""
        self.state.push(entries)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self.state.lock:
            return list(self.state.requests)

    @property
    def accepted(self) -> list[RecordedRequest]:
        """The requests that took a script entry (answered from the script or faulted)."""
        return [r for r in self.requests if r.entry is not None]

    @property
    def remaining(self) -> int:
        """Script entries not yet used."""
        with self.state.lock:
            return len(self.state.script)
