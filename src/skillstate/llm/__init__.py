"""Model providers: the :class:`Provider` protocol and the backends that implement it.

``open_provider(spec)`` turns the spec a user types (``openai:gpt-4o-mini``,
``local``, ``replay:run.json``) into a provider. Importing this package imports no
SDK: ``openai`` and ``llama_cpp`` are imported when a provider that needs them is
constructed, so ``skillstate --help`` and the stores stay fast and work without
the extras, and a missing extra is reported by name (:class:`MissingExtra`) only
to whoever asks for that provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skillstate.errors import UsageError
from skillstate.llm.base import (
    MESSAGE_OVERHEAD,
    Completion,
    Message,
    Provider,
    Usage,
    count_messages,
)

if TYPE_CHECKING:
    from skillstate.llm.local import LocalProvider
    from skillstate.llm.openai_compat import OpenAIProvider
    from skillstate.llm.replay import RecordingProvider, ReplayProvider, ScriptedProvider

__all__ = [
    "MESSAGE_OVERHEAD",
    "Completion",
    "LocalProvider",
    "Message",
    "OpenAIProvider",
    "Provider",
    "RecordingProvider",
    "ReplayProvider",
    "ScriptedProvider",
    "Usage",
    "count_messages",
    "open_provider",
]

SPEC_FORMS = "openai:MODEL, local, local:/path/model.gguf, replay:/path/cassette.json"

# The provider classes, imported on first access (PEP 562): their modules are
# cheap, but keeping them out of the package import keeps it minimal on purpose.
_LAZY = {
    "LocalProvider": "skillstate.llm.local",
    "OpenAIProvider": "skillstate.llm.openai_compat",
    "RecordingProvider": "skillstate.llm.replay",
    "ReplayProvider": "skillstate.llm.replay",
    "ScriptedProvider": "skillstate.llm.replay",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def open_provider(spec: str, *, base_url: str | None = None) -> Provider:
    """The provider ``spec`` names.

    - ``openai:MODEL``: any OpenAI-compatible chat-completions server; ``base_url``
      points it at a local one (vLLM, llama.cpp's server, Ollama), otherwise the
      SDK's default (``OPENAI_BASE_URL`` or api.openai.com). Key from
      ``OPENAI_API_KEY``.
    - ``local`` / ``local:PATH``: a GGUF model in-process via llama.cpp: the bundled
      Gemma 3 270M, or the file at ``PATH``.
    - ``replay:PATH``: the replies recorded in a cassette, checked against the
      requests.

    Raises :class:`UsageError` for a spec of no known form (or ``base_url`` with a
    provider that has no server), :class:`~skillstate.errors.MissingExtra` when the
    provider's optional package is not installed.
    """
    kind, sep, arg = spec.strip().partition(":")
    kind, arg = kind.lower(), arg.strip()
    if sep and not arg:  # "openai:", "local:": a colon promises an argument
        kind = ""
    if kind not in {"openai", "local", "replay"} or (kind != "local" and not arg):
        raise UsageError(f"unknown provider {spec!r}; use one of: {SPEC_FORMS}")
    if base_url is not None and kind != "openai":
        raise UsageError(f"a base URL only applies to openai:MODEL providers, not {spec!r}")
    if kind == "openai":
        from skillstate.llm.openai_compat import OpenAIProvider

        return OpenAIProvider(arg, base_url=base_url)
    if kind == "local":
        from skillstate.llm.local import LocalProvider

        return LocalProvider(arg or None)
    from skillstate.llm.replay import ReplayProvider

    return ReplayProvider(arg)
