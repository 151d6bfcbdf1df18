"""The model under test, from its ``--model`` spec: one place for the CLI and child runs.

A killed-run child process (:mod:`skillstate.eval.interrupt`) rebuilds the model
from the same spec the parent was given, so both ask exactly the same model.
"""

from __future__ import annotations

from dataclasses import dataclass

from skillstate.eval.runner import ProviderFactory, oracle_factory
from skillstate.llm.base import Provider

__all__ = ["ModelSpec", "model_factory"]


@dataclass(frozen=True)
class ModelSpec:
    """What ``--model``, ``--base-url`` and ``--inject-faults`` said (plain data)."""

    model: str = "oracle"
    base_url: str | None = None
    inject_faults: float | None = None


def model_factory(
    model: str,
    base_url: str | None,
    context_window: int | None,
    inject_faults: float | None,
    *,
    salt: str = "",
) -> tuple[ProviderFactory, int | None]:
    """The provider factory ``model`` names, and the context window to enforce.

    ``salt`` varies the injected faults' draws (a resumed child process must not
    replay the faults of the one before it).
    """
    factory: ProviderFactory = oracle_factory
    if model != "oracle":
        from skillstate.llm import open_provider

        provider = open_provider(model, base_url=base_url)
        if context_window is None:
            # The model's own window (counted with our tokenizer: an approximation).
            context_window = getattr(provider, "n_ctx", None)

        def shared(*_: object) -> Provider:
            return provider

        factory = shared
    if inject_faults:
        from skillstate.eval.faults import faulty_factory

        factory = faulty_factory(factory, inject_faults, salt=salt)
    return factory, context_window
