"""A labelled set of transcripts, built from the evaluation families' own conversations.

For each task of a suite, the oracle runs it to the end (the ``skillstate`` variant:
the family's state class and skill library); the conversation a history agent would
have had is rebuilt from its events (:func:`skillstate.engine.transcript.conversation`)
and written as OpenAI chat messages: the opening user message, each decision as an
assistant message, each tool output as a ``tool`` message named after its tool.

The labels come from the task, not from the text: its constraints are the spec's,
its facts the typed fields of the final card that the task set (sensitive fields and
fields left at their default are not facts it established). A fact is *extractable*
when its value can be read off the transcript (each text and number in it occurs in
some turn; a yes/no value, when its key does); the others (an artifact ref, a total
computed inside a skill) no text extractor can find, and recall is reported both ways.

Two renderings of the opening message are built for each task:

* ``history``: as the history agent sends it (``Goal: ...``, then ``Constraints:`` and
  one ``- rule`` line each), :mod:`skillstate.engine.transcript`'s own format;
* ``prose``: the goal and the constraints run together in one paragraph, as a person
  would type them, with no label to lean on.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from skillstate.engine.actions import Action, Finish
from skillstate.engine.agent import Agent
from skillstate.engine.policy import ScriptedPolicy
from skillstate.engine.transcript import conversation
from skillstate.eval.families import build_environment
from skillstate.eval.runner import TASK_ID, run_task
from skillstate.eval.tasks import TaskSpec
from skillstate.eval.variants import VARIANTS, build_agent
from skillstate.extract.check import supports
from skillstate.extract.transcript import Transcript, parse_transcript
from skillstate.state.secrets import sensitive_fields
from skillstate.store.sqlite import SQLiteStore

__all__ = ["RENDERINGS", "Case", "build_cases", "messages_of"]

Rendering = Literal["history", "prose"]
RENDERINGS: tuple[Rendering, ...] = ("history", "prose")
_OUTPUT = "[{tool} output]\n"


@dataclass(frozen=True)
class Case:
    """One labelled transcript."""

    id: str
    family: str
    rendering: Rendering
    transcript: Transcript
    agent: Agent[Any]
    constraints: tuple[str, ...]
    facts: dict[str, Any]
    extractable: frozenset[str]
    """The keys of :attr:`facts` whose values occur in the transcript."""


def build_cases(specs: Sequence[TaskSpec], workdir: Path | None = None) -> list[Case]:
    """Both renderings of each spec's conversation, with its labels."""
    root = Path(workdir or tempfile.mkdtemp(prefix="skillstate-extract-set-"))
    cases: list[Case] = []
    variant = VARIANTS["skillstate"]
    for spec in specs:
        result = run_task(spec, variant, seed=0, workdir=root, recovery=False)
        if not result.success:  # a label set from a failed run would label nothing
            raise RuntimeError(f"the oracle failed task {spec.id}: {result.failure}")
        store = SQLiteStore(root / f"{spec.id}-{variant.name}-0" / "run" / "state.db")
        try:
            history = conversation(store, TASK_ID)
            head = store.load(TASK_ID).state
        finally:
            store.close()
        env = build_environment(spec, root / f"{spec.id}-env")
        agent = build_agent(spec, env, variant, ScriptedPolicy(_unused))
        facts = _facts(env.state_type, head)
        for rendering in RENDERINGS:
            messages = messages_of(history, spec, rendering)
            data = json.dumps(messages, ensure_ascii=False).encode("utf-8")
            transcript = parse_transcript(data, source=f"{spec.id}.json", hint="json")
            text = "\n".join(t.text for t in transcript.turns)
            extractable = frozenset(k for k, v in facts.items() if _readable(text, k, v))
            cases.append(
                Case(
                    id=spec.id,
                    family=spec.family,
                    rendering=rendering,
                    transcript=transcript,
                    agent=agent,
                    constraints=tuple(spec.constraints),
                    facts=facts,
                    extractable=extractable,
                )
            )
    return cases


def messages_of(
    history: Sequence[Any], spec: TaskSpec, rendering: Rendering
) -> list[dict[str, Any]]:
    """The conversation as OpenAI chat messages (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(history):
        content = message.content
        if index == 0 and rendering == "prose":
            content = " ".join([spec.goal.strip(), *(c.strip() for c in spec.constraints)])
        if message.role == "user" and content.startswith("[") and " output]\n" in content:
            head, _, rest = content.partition("\n")
            tool = head[1 : -len(" output]")]
            out.append({"role": "tool", "name": tool, "content": rest})
            continue
        out.append({"role": message.role, "content": content})
    return out


def _facts(state_type: Any, head: dict[str, Any]) -> dict[str, Any]:
    hidden = sensitive_fields(state_type)
    facts = {}
    for name in state_type.custom_fields():
        default = state_type.model_fields[name].get_default(call_default_factory=True)
        value = head.get(name)
        if name in hidden or value is None or value == default:
            continue
        facts[name] = value
    return facts


def _readable(text: str, key: str, value: Any) -> bool:
    """Whether ``value`` can be read off ``text``: its texts and numbers occur there; a
    yes/no value, when its key does (``"closed": true``)."""
    if isinstance(value, bool):
        lowered = text.casefold()
        return key.casefold() in lowered or key.replace("_", " ").casefold() in lowered
    return supports(text, value)


def _unused(view: Any) -> Action:
    return Finish(reason="the labelled set only parses states with this agent")
