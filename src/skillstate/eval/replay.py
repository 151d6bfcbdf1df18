"""``eval --replay``: run a recorded task again against the current skills, and find
the first step whose outcome differs from the recording.

A recorded run (:mod:`skillstate.eval.cassettes`) holds the task spec, its variant
and settings, the model's replies and the tools' outputs. A replay builds the task's
environment afresh with the *current* family code (its skills, verifiers, plans),
and runs it through the real runtime with

* the model's replies served from the model cassette by
  :class:`~skillstate.llm.replay.ReplayProvider`, which refuses a request that is not
  the recorded one (a prompt or schema that changed): that step is where the replay
  diverged; the oracle needs no cassette, it is rebuilt and follows its plan;
* each tool call matched against the tool cassette in order (name and argument
  digest). A call the recording does not have stops the replay there. A matched call
  gets the recorded output (or error). Effect tools (``Environment.effect_tools``)
  also run, against the fresh environment, so that what a verifier or a later tool
  reads from the world is what it read when recorded; a live output that differs
  from the recorded one is noted (the recorded one is still served).

Then the replay's events are compared with the recording's, step by step (one
event per committed step, as ``skillstate replay`` shows them): the action taken, the
verdict, the state changes (the event's JSON Patch, less usage counters, the version
and the definition hash), the error, the tool calls and attempts. The first step
that differs is reported with what differs; a run whose every step matches is
"same".
"""

from __future__ import annotations

import copy
import functools
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillstate.errors import ContextOverflow, ProviderError, SkillstateError, UsageError
from skillstate.eval.cassettes import (
    ToolEntry,
    args_digest,
    call_arguments,
    display,
    load_tool_cassette,
    output_digest,
    plain_tool,
)
from skillstate.eval.cassettes_run import Recording, load_recording
from skillstate.eval.replay_diff import (
    Divergence,
    Stop,
    call_text,
    first_difference,
    shown,
    with_tool_mismatch,
)

if TYPE_CHECKING:
    from skillstate.eval.runner import ProviderFactory
    from skillstate.eval.tasks import Environment

__all__ = ["Divergence", "ReplayResult", "ToolPlayer", "replay_run"]


class ToolPlayer:
    """Serves a run's tool calls from its tool cassette, in order (see the module doc).

    The first call that is not the recorded one (another tool, other arguments, a
    call past the end) is kept as :attr:`mismatch`, with the step it happened in
    (``position()``: the steps committed so far), and from then on every call runs
    the real tool against the fresh environment: the cassette no longer says what
    comes next, and the step can still commit, so its verdict and state changes are
    compared too.
    """

    def __init__(
        self,
        entries: Sequence[ToolEntry],
        effect_tools: frozenset[str],
        position: Callable[[], int] = lambda: 0,
    ) -> None:
        self.entries = list(entries)
        self.effect_tools = effect_tools
        self.position = position
        self.next = 0
        self.mismatch: tuple[int, str] | None = None
        """``(step, detail)`` of the first call the recording does not have."""
        self.drift: list[str] = []
        """One line per live call whose outcome differs from the recorded one."""

    @property
    def remaining(self) -> int:
        """Recorded calls the replay has not made (yet)."""
        return len(self.entries) - self.next

    def attach(self, env: Environment) -> Environment:
        """``env`` with its plain tools served by this player."""
        from skillstate.eval.children import with_child_tools

        tools = {
            name: self.wrap(name, fn) if plain_tool(fn) else fn for name, fn in env.tools.items()
        }

        def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            return self.wrap(name, fn) if plain_tool(fn) else fn

        return with_child_tools(replace(env, tools=tools), wrap)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)  # keeps the signature: the raw-tools variants read it
        def call(*args: Any, **kwargs: Any) -> Any:
            entry = None
            if self.mismatch is None:
                entry = self._match(name, call_arguments(fn, args, kwargs))
            if entry is None:
                return fn(*args, **kwargs)  # off the recording: the real tool
            number = self.next
            if name not in self.effect_tools and entry.served:
                return self._recorded(entry, None)
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                self._check(number, entry, None, exc)
                if not entry.served:
                    raise
                return self._recorded(entry, exc)
            self._check(number, entry, result, None)
            return self._recorded(entry, None) if entry.served else result

        return call

    def _match(self, name: str, actual: dict[str, Any]) -> ToolEntry | None:
        number = self.next + 1
        if self.next >= len(self.entries):
            detail = (
                f"tool call {number} {call_text(name, actual)} is not in the recording "
                f"({len(self.entries)} calls recorded)"
            )
        else:
            entry = self.entries[self.next]
            if entry.tool == name and entry.args_sha == args_digest(actual):
                self.next += 1
                return entry
            detail = (
                f"tool call {number} is {call_text(name, actual)}, "
                f"recorded {call_text(entry.tool, entry.args)}"
            )
        self.mismatch = (self.position() + 1, detail)
        return None

    @staticmethod
    def _recorded(entry: ToolEntry, live: Exception | None) -> Any:
        if entry.ok:
            return copy.deepcopy(entry.output)
        if live is not None and _same_error(live, entry):
            raise live  # the very error, with its real type
        raise entry.recorded_error()

    def _check(self, number: int, entry: ToolEntry, result: Any, exc: Exception | None) -> None:
        """Note a live call whose outcome is not the recorded one."""
        if exc is None and entry.ok and output_digest(result) == entry.output_sha:
            return
        if exc is not None and not entry.ok and _same_error(exc, entry):
            return
        got = f"{type(exc).__name__}: {exc}" if exc is not None else display(result)
        self.drift.append(
            f"tool call {number} {entry.tool}: the live call gave {shown(got, 80)!r}, "
            f"not the recorded outcome" + ("; the recorded one was served" if entry.served else "")
        )


@dataclass
class ReplayResult:
    """One recorded run, replayed."""

    run: str
    task_id: str
    variant: str
    seed: int
    model: str
    steps_recorded: int = 0
    steps_replayed: int = 0
    divergence: Divergence | None = None
    notes: list[str] = field(default_factory=list)
    store: str = ""
    """The replay's own store (``skillstate replay task --store sqlite:///...``)."""

    @property
    def same(self) -> bool:
        return self.divergence is None

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "task_id": self.task_id,
            "variant": self.variant,
            "seed": self.seed,
            "model": self.model,
            "verdict": "same" if self.same else "differs",
            "steps_recorded": self.steps_recorded,
            "steps_replayed": self.steps_replayed,
            "divergence": None if self.divergence is None else self.divergence.as_json(),
            "notes": list(self.notes),
            "store": self.store,
        }


def replay_run(recorded: Path, work: Path) -> ReplayResult:
    """Replay the recorded run in directory ``recorded`` inside ``work`` (emptied first)."""
    from skillstate.eval.runner import TASK_ID
    from skillstate.store.sqlite import SQLiteStore

    recording = load_recording(recorded)
    result = ReplayResult(
        run=recording.name,
        task_id=recording.spec.id,
        variant=recording.variant.name,
        seed=recording.seed,
        model=recording.model,
    )
    original = SQLiteStore(recorded / "state.db", create=False)
    try:
        before = original.events(TASK_ID)
    finally:
        original.close()
    result.steps_recorded = len(before)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = SQLiteStore(work / "state.db")
    result.store = str(work / "state.db")
    try:
        stop, player, provider, env_root, stopped = _run(recording, work, store)
        after = store.events(TASK_ID)
    finally:
        store.close()
    result.steps_replayed = len(after)
    if player is not None:
        result.notes += player.drift
    roots = tuple(r for r in (recording.env_root, env_root) if r)
    result.divergence = first_difference(before, after, roots, stop)
    if player is not None and player.mismatch is not None:
        step, detail = player.mismatch
        result.divergence = with_tool_mismatch(result.divergence, before, step, detail, roots)
    if result.divergence is None and stopped != recording.stopped and recording.stopped:
        result.divergence = Divergence(
            step=len(after) + 1,
            decision=sum(1 for e in after if e.actor == "policy") or None,
            label="(end)",
            aspects=("stop",),
            recorded=f"stopped: {recording.stopped}",
            replayed=f"stopped: {stopped}",
        )
    if result.divergence is None:
        # Every step matched; what the cassettes still hold is worth a word all the same.
        if player is not None and player.remaining:
            result.notes.append(f"{player.remaining} recorded tool call(s) were not made")
        left = getattr(provider, "remaining", 0)
        if left:
            result.notes.append(f"{left} recorded model reply(s) were not asked for")
    return result


def _run(
    recording: Recording, work: Path, store: Any
) -> tuple[Stop | None, ToolPlayer | None, Any, str, str]:
    """Build the environment and run the task; how it stopped (``None``: on its own)."""
    from skillstate.eval.bad_steps import inject_bad_steps
    from skillstate.eval.families import build_environment
    from skillstate.eval.runner import TASK_ID, make_runtime

    spec, variant = recording.spec, recording.variant
    try:
        env = build_environment(spec, work / "env")
        if recording.bad_steps:
            # The same seeded faults, drawn in the same order while the calls match.
            key = f"{spec.id}:{variant.name}:{recording.seed}"
            env = inject_bad_steps(env, recording.bad_steps, key)
        player = ToolPlayer(
            load_tool_cassette(recording.tool_cassette),
            env.effect_tools,
            position=lambda: len(store.events(TASK_ID)),
        )
        env = player.attach(env)
        factory, provider = _factory(recording)
    except SkillstateError as exc:
        return Stop("setup", f"{type(exc).__name__}: {exc}"), None, None, "", ""
    try:
        runtime = make_runtime(
            spec,
            variant,
            env,
            store,
            factory,
            budget=spec.max_steps,
            context_window=recording.context_window,
            max_repairs=recording.max_repairs,
            max_invalid=recording.max_invalid,
        )
        runtime.start(TASK_ID, **dict(env.initial))
        ran = runtime.run(TASK_ID)
    except ContextOverflow:
        return None, player, provider, str(env.root), ""
    except ProviderError as exc:
        detail = " ".join(str(exc).split())
        return Stop("model request", detail), player, provider, str(env.root), ""
    except SkillstateError as exc:
        return Stop("error", f"{type(exc).__name__}: {exc}"), player, provider, str(env.root), ""
    return None, player, provider, str(env.root), str(ran.stopped)


def _factory(recording: Recording) -> tuple[ProviderFactory, Any]:
    """The replayed model: its cassette, or the oracle rebuilt (it reads its plan)."""
    from skillstate.eval.runner import oracle_factory
    from skillstate.llm.replay import ReplayProvider

    if recording.model_cassette is not None:
        provider = ReplayProvider(recording.model_cassette)

        def served(*_: object) -> Any:
            return provider

        return served, provider
    if recording.model != "oracle":
        raise UsageError(
            f"run {recording.name} was recorded with model {recording.model!r} "
            "but has no model cassette"
        )
    return oracle_factory, None


def _same_error(exc: Exception, entry: ToolEntry) -> bool:
    """The live call failed as the recorded one did: same exception class name and text."""
    name = (entry.error_type or "").rpartition(".")[2]
    return type(exc).__name__ == name and str(exc) == entry.error_message
