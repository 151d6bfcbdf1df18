"""One recorded run: its manifest (``recording.json``) and the recorder that writes it
with the run's cassettes (see :mod:`skillstate.eval.cassettes` for what each holds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillstate.errors import UsageError
from skillstate.eval.cassettes import (
    FORMAT,
    MANIFEST,
    MODEL_CASSETTE,
    TOOL_CASSETTE,
    ModelRecorder,
    ToolRecorder,
    model_entry,
    plain_tool,
    read_json,
    write_json_atomic,
)
from skillstate.llm.base import Completion, Message, Provider
from skillstate.state.redact import RedactionPolicy

if TYPE_CHECKING:
    from skillstate.eval.runner import ProviderFactory
    from skillstate.eval.tasks import Environment, TaskSpec
    from skillstate.eval.variants import Variant
    from skillstate.store.base import Store

__all__ = ["Recording", "RunRecorder", "load_recording"]


@dataclass(frozen=True)
class Recording:
    """A recorded run's manifest (``recording.json``), read back."""

    root: Path
    spec: TaskSpec
    variant: Variant
    seed: int
    model: str
    context_window: int | None
    max_repairs: int
    max_invalid: int | None
    bad_steps: float | None
    env_root: str
    stopped: str
    failure: str | None
    model_cassette: Path | None
    tool_cassette: Path

    @property
    def name(self) -> str:
        """The run's directory name (``<task>-<variant>-<seed>``)."""
        return self.root.parent.name if self.root.name == "run" else self.root.name


@dataclass
class RunRecorder:
    """Records one run: attach it to the environment and provider, save it after."""

    root: Path
    spec: TaskSpec
    variant: Variant
    seed: int
    context_window: int | None
    max_repairs: int
    max_invalid: int | None
    bad_steps: float | None
    tools: ToolRecorder = field(default_factory=ToolRecorder)
    model: str | None = None
    _replies: list[tuple[list[Message], str | None, int | None, Completion]] = field(
        default_factory=list
    )
    _env_root: str = ""

    def attach(
        self, env: Environment, factory: ProviderFactory
    ) -> tuple[Environment, ProviderFactory]:
        """``env`` with its tools recorded, and a factory whose providers are recorded."""
        from skillstate.eval.runner import OracleProvider

        self._env_root = str(env.root)
        tools = {
            name: fn if not plain_tool(fn) else self.tools.wrap(name, fn)
            for name, fn in env.tools.items()
        }

        def recorded(spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
            provider = factory(spec, variant, env, store)
            self.model = self.model or provider.name
            if isinstance(provider, OracleProvider):
                return provider  # a replay rebuilds the oracle: it reads its plan
            return ModelRecorder(provider, self._replies)

        from skillstate.eval.children import with_child_tools

        def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            return self.tools.wrap(name, fn) if plain_tool(fn) else fn

        return with_child_tools(replace(env, tools=tools), wrap), recorded

    def save(self, *, stopped: str, failure: str | None) -> Path:
        """Write the manifest and the cassettes into :attr:`root`; the manifest's path."""
        redactor = RedactionPolicy().redactor()
        entries = self.tools.entries(redactor)
        write_json_atomic(
            self.root / TOOL_CASSETTE,
            {"format": FORMAT, "calls": [entry.as_json() for entry in entries]},
        )
        model_file = None
        if self._replies:
            model_file = MODEL_CASSETTE
            write_json_atomic(
                self.root / MODEL_CASSETTE, [model_entry(*reply) for reply in self._replies]
            )
        manifest = {
            "format": FORMAT,
            "task": self.spec.model_dump(mode="json"),
            "variant": {
                "name": self.variant.name,
                "window": self.variant.window,
                "every": self.variant.every,
                "bind": self.variant.bind,
            },
            "seed": self.seed,
            "model": self.model or "oracle",
            "context_window": self.context_window,
            "max_repairs": self.max_repairs,
            "max_invalid": self.max_invalid,
            "bad_steps": self.bad_steps,
            "env_root": self._env_root,
            "stopped": stopped,
            "failure": redactor.text(failure) if failure else failure,
            "model_cassette": model_file,
            "tool_cassette": TOOL_CASSETTE,
        }
        path = self.root / MANIFEST
        write_json_atomic(path, manifest)
        return path


def load_recording(root: Path) -> Recording:
    """The manifest of the recorded run in ``root``; a :class:`UsageError` if unreadable."""
    from skillstate.eval.tasks import TaskSpec
    from skillstate.eval.variants import VARIANTS

    path = root / MANIFEST
    data = read_json(path, "recording")
    try:
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, this code reads {FORMAT}")
        spec = TaskSpec.model_validate(data["task"])
        shape = data["variant"]
        variant = replace(
            VARIANTS[shape["name"]],
            window=int(shape["window"]),
            every=int(shape["every"]),
            bind=bool(shape["bind"]),
        )
        model_file = data.get("model_cassette")
        return Recording(
            root=root,
            spec=spec,
            variant=variant,
            seed=int(data["seed"]),
            model=str(data["model"]),
            context_window=_optional_int(data.get("context_window")),
            max_repairs=int(data["max_repairs"]),
            max_invalid=_optional_int(data.get("max_invalid")),
            bad_steps=None if data.get("bad_steps") is None else float(data["bad_steps"]),
            env_root=str(data.get("env_root") or ""),
            stopped=str(data.get("stopped") or ""),
            failure=data.get("failure"),
            model_cassette=root / model_file if model_file else None,
            tool_cassette=root / str(data.get("tool_cassette") or TOOL_CASSETTE),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise UsageError(f"recording {str(path)!r} is malformed: {reason}") from None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
