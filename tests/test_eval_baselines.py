"""The context baselines (window, summary, hybrid): they run end to end with the oracle,
and each sends the prompt it claims to send."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.policy import STATE_HEADER
from skillstate.errors import UsageError
from skillstate.eval.baselines import SUMMARY_HEADER
from skillstate.eval.runner import oracle_factory, run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import BASELINES, VARIANTS, Variant, parse_variants
from skillstate.llm.base import Completion, Message, Provider
from skillstate.store.base import Store


@pytest.fixture(scope="module")
def short_and_medium() -> list[TaskSpec]:
    """The shortest task of the short and the medium group of the long suite."""
    picked: dict[str, TaskSpec] = {}
    for spec in sorted(load_suite("long", 0), key=lambda s: s.max_steps):
        picked.setdefault(spec.group, spec)
    return [picked["short"], picked["medium"]]


@dataclass
class Call:
    variant: str
    messages: list[Message]
    decision: bool
    """A decision call (with the action schema); else a baseline's own call (a summary)."""


@dataclass
class Recording:
    """Wraps the oracle of every run and keeps every call's messages."""

    calls: list[Call] = field(default_factory=list)

    def factory(self, spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
        return _Recorded(oracle_factory(spec, variant, env, store), variant.name, self.calls)

    def decisions(self, variant: str) -> list[list[Message]]:
        return [c.messages for c in self.calls if c.variant == variant and c.decision]


class _Recorded:
    def __init__(self, inner: Provider, variant: str, calls: list[Call]) -> None:
        self.inner, self.variant, self.calls, self.name = inner, variant, calls, inner.name

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        self.calls.append(Call(self.variant, list(messages), schema is not None))
        return self.inner.complete(messages, schema=schema, max_tokens=max_tokens)


def _record(spec: TaskSpec, names: str, tmp_path: Path, **sizes: int) -> Recording:
    recording = Recording()
    for variant in parse_variants(names, **sizes):
        result = run_task(
            spec, variant, seed=0, workdir=tmp_path, factory=recording.factory, recovery=False
        )
        assert result.success, (variant.name, result.failure)
    return recording


class TestEndToEnd:
    @pytest.mark.parametrize("variant", BASELINES)
    def test_oracle_succeeds_and_recovers(
        self, variant: str, short_and_medium: list[TaskSpec], tmp_path: Path
    ) -> None:
        """Each baseline succeeds on a short and a medium task, and after each interruption."""
        chosen = parse_variants(variant, window=4, every=3)[0]
        for spec in short_and_medium:
            result = run_task(spec, chosen, seed=0, workdir=tmp_path)
            assert result.success, (spec.id, result.failure, result.checks)
            assert result.first_bad_step is None
            assert result.steps == result.plan_steps
            assert all(r.success for r in result.recovery), result.recovery
            assert all(r.duplicated_effects == 0 for r in result.recovery)

    def test_unknown_variant_and_bad_sizes_are_usage_errors(self) -> None:
        """A misspelt variant or a window of 0 is refused with the list of choices."""
        with pytest.raises(UsageError, match=r"choose from: .*window, summary, hybrid"):
            parse_variants("state,windo")
        with pytest.raises(UsageError, match="--window"):
            parse_variants("window", window=0)

    def test_baselines_use_raw_tools(self) -> None:
        """The baselines compare contexts, so they take the raw tools, like history and state."""
        assert {VARIANTS[name].actions for name in BASELINES} == {"tools"}


class TestPromptShapes:
    def test_window_keeps_the_last_n_messages(
        self, short_and_medium: list[TaskSpec], tmp_path: Path
    ) -> None:
        """At every decision: the system prompt, then the history's last N messages only."""
        recording = _record(short_and_medium[1], "history,window", tmp_path, window=3)
        history, window = recording.decisions("history"), recording.decisions("window")
        assert len(history) == len(window) > 5
        for full, cut in zip(history, window, strict=True):
            assert cut[0].role == "system"
            assert cut[1:] == full[1:][-3:]
        assert len(history[-1]) > len(window[-1]) == 4

    def test_hybrid_is_the_state_view_plus_the_last_n(
        self, short_and_medium: list[TaskSpec], tmp_path: Path
    ) -> None:
        """At every decision: the system prompt (saying the state wins), the history's last
        N messages, the state view."""
        recording = _record(short_and_medium[1], "history,state,hybrid", tmp_path, window=2)
        history, state = recording.decisions("history"), recording.decisions("state")
        hybrid = recording.decisions("hybrid")
        assert len(hybrid) == len(history) == len(state) > 5
        for full, card, mixed in zip(history, state, hybrid, strict=True):
            assert "the state is right" in mixed[0].content
            assert mixed[1:-1] == full[1:][-2:]
            # The state view, as the state variant sends it, under a header saying it wins.
            assert mixed[-1].role == card[-1].role == "user"
            assert mixed[-1].content == STATE_HEADER + card[-1].content

    def test_summary_calls_the_provider_every_k_and_replaces_older_messages(
        self, short_and_medium: list[TaskSpec], tmp_path: Path
    ) -> None:
        """A summary call through the provider before decisions K+1, 2K+1...; from then on the
        prompt holds the summary and only the messages that came after it."""
        recording = _record(short_and_medium[1], "history,summary", tmp_path, every=3)
        history = recording.decisions("history")
        calls = [c for c in recording.calls if c.variant == "summary"]
        # Index (1-based) of the decision each summary call preceded.
        before, seen = [], 0
        for call in calls:
            if call.decision:
                seen += 1
            else:
                before.append(seen + 1)
        assert before == list(range(4, len(history) + 1, 3))
        summarized = [c.messages for c in calls if c.decision]
        for k, (full, short) in enumerate(zip(history, summarized, strict=True), start=1):
            if k < 4:
                assert short[1:] == full[1:]  # no summary yet: the whole transcript
                continue
            assert short[1].content.startswith(SUMMARY_HEADER)
            assert "oracle summary" in short[1].content
            tail = short[2:]
            assert full[1:][len(full) - 1 - len(tail) :] == tail  # only the newest messages
            assert len(tail) < len(full) - 1
        first_summary = next(c for c in calls if not c.decision)
        assert first_summary.messages[0].role == "system"
        assert "Goal:" in first_summary.messages[1].content  # the history it compresses
