"""Context baselines beside the four variants: ``window``, ``summary`` and ``hybrid``.

What the usual alternatives to a full transcript send, built on the same
:class:`~skillstate.engine.policy.ModelPolicy` (same system prompt, response schema
and repair loop), so that only the messages differ:

* ``window`` — the last ``n`` messages of the transcript
  (:class:`~skillstate.engine.policy.WindowPolicy`, shipped with the engine);
* :class:`SummaryPolicy` — every ``every`` decisions, the same model compresses the
  messages since its last summary (plus that summary) into a new one; the prompt is
  the summary followed by the messages that came after it, as summary-based agents do;
* ``hybrid`` — the last ``n`` messages, then the state view, the state stated to win
  (:class:`~skillstate.engine.policy.HybridPolicy`, shipped with the engine and
  re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from skillstate.engine.policy import Decided, HybridPolicy, ModelPolicy
from skillstate.errors import UsageError
from skillstate.llm.base import Message, Provider, Usage
from skillstate.state.view import View

__all__ = ["SUMMARY_PROMPT", "HybridPolicy", "SummaryPolicy"]

SUMMARY_PROMPT = """\
You compress the conversation of an agent working on a task. Write a short plain-text \
summary (no JSON) that keeps everything the agent needs to go on: the goal, every \
constraint, the results obtained so far and what remains to do."""

SUMMARY_HEADER = "Summary of the task so far (the older messages were replaced by it):\n"


def _transcript(view: View[Any]) -> list[Message]:
    if view.transcript is None:
        raise UsageError("this policy needs the task's transcript; run it through the Runtime")
    return list(view.transcript())


class SummaryPolicy(ModelPolicy):
    """The transcript, compressed by the model itself every ``every`` decisions.

    The summary call goes through the same provider (no response schema); its tokens
    are added to the usage of the decision that triggered it, so its cost is counted.
    A new policy (a resumed task) starts without a summary and makes one at its first
    decision if the transcript already holds ``every`` decisions or more.
    """

    kind = "summary"

    def __init__(
        self,
        provider: Provider,
        every: int,
        *,
        max_repairs: int = 2,
        summary_tokens: int = 512,
    ) -> None:
        if every < 1:
            raise UsageError("summary interval must be >= 1")
        super().__init__(provider, max_repairs=max_repairs)
        self.every = every
        self.summary_tokens = summary_tokens
        self.summary: str | None = None
        self.summaries = 0
        """Summary calls made so far."""
        self._cut = 0  # transcript messages the summary covers
        self._covered = 0  # decisions the summary covers
        self._pending = Usage()
        self._pending_calls = 0

    def messages(self, view: View[Any]) -> list[Message]:
        transcript = _transcript(view)
        decisions = sum(1 for m in transcript if m.role == "assistant")
        if decisions - self._covered >= self.every:
            self._summarize(transcript)
            self._covered = decisions
        system = Message("system", self.system_prompt(view))
        if self.summary is None:
            return [system, *transcript]
        return [system, Message("user", SUMMARY_HEADER + self.summary), *transcript[self._cut :]]

    def _summarize(self, transcript: Sequence[Message]) -> None:
        earlier = f"Summary so far:\n{self.summary}\n\n" if self.summary is not None else ""
        body = "\n\n".join(f"[{m.role}] {m.content}" for m in transcript[self._cut :])
        completion = self.provider.complete(
            [Message("system", SUMMARY_PROMPT), Message("user", f"{earlier}Messages:\n{body}")],
            schema=None,
            max_tokens=self.summary_tokens,
        )
        self._pending = self._pending + completion.usage
        self._pending_calls += 1
        self.summary = completion.text.strip() or "(empty summary)"
        self._cut = len(transcript)
        self.summaries += 1

    def decide(self, view: View[Any]) -> Decided:
        decided = super().decide(view)
        if not self._pending_calls:
            return decided
        usage, calls = decided.usage + self._pending, decided.calls + self._pending_calls
        self._pending, self._pending_calls = Usage(), 0
        return replace(decided, usage=usage, calls=calls)
