"""runfold: a runtime for LLM agents whose only history is one append-only, hash-chained ledger.

The public names are the ones in `__all__` (the README's "From Python" lists them); everything
else is internal. They are imported on first use (PEP 562), so `import runfold`, and with it
every `runfold` command, stays cheap.
"""

import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:
    from runfold.api import Workspace, verify
    from runfold.core.errors import ErrorCode, RunfoldError
    from runfold.providers.anthropic import AnthropicProvider
    from runfold.providers.compat import OpenAICompatProvider
    from runfold.providers.local import LocalProvider
    from runfold.providers.openai_chat import OpenAIChatProvider
    from runfold.providers.openai_responses import OpenAIResponsesProvider
    from runfold.providers.registry import provider_from_spec
    from runfold.providers.scripted import ScriptedProvider
    from runfold.tools.registry import Tool

_HOMES = {
    "AnthropicProvider": "runfold.providers.anthropic",
    "ErrorCode": "runfold.core.errors",
    "LocalProvider": "runfold.providers.local",
    "OpenAIChatProvider": "runfold.providers.openai_chat",
    "OpenAICompatProvider": "runfold.providers.compat",
    "OpenAIResponsesProvider": "runfold.providers.openai_responses",
    "RunfoldError": "runfold.core.errors",
    "ScriptedProvider": "runfold.providers.scripted",
    "Tool": "runfold.tools.registry",
    "Workspace": "runfold.api",
    "provider_from_spec": "runfold.providers.registry",
    "verify": "runfold.api",
}
"""Each public name and the module that defines it."""

__all__ = [
    "AnthropicProvider",
    "ErrorCode",
    "LocalProvider",
    "OpenAIChatProvider",
    "OpenAICompatProvider",
    "OpenAIResponsesProvider",
    "RunfoldError",
    "ScriptedProvider",
    "Tool",
    "Workspace",
    "__version__",
    "provider_from_spec",
    "verify",
]


if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and no catch-all attribute

    def __getattr__(name: str) -> object:
        """A public name, imported from its module on first use and kept (PEP 562)."""
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(home), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The module's own names and every public name, resolved or not."""
    return sorted({*globals(), *__all__})
