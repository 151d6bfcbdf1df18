"""Hostile input fails closed: one named error (or a recorded refusal), never a traceback.

Reproduced before:
* a model reply holding a 5,000-digit integer crashed the step with Python's
  ``ValueError: Exceeds the limit (4300 digits) for integer string conversion``;
* a scripted decision with such an integer crashed it too (in the stall guard), and
  one with a lone surrogate failed the commit with a ``StoreError``;
* ``parse_action`` accepted ``NaN`` and ``1e99999`` (infinity) in params;
* a cassette nested 100,000 deep, or with ``1e999`` or a list as its usage, raised
  ``RecursionError``, ``OverflowError`` or ``AttributeError``;
* ``set``/``edit`` wrote control characters, DEL, C1 controls and bidi overrides
  into the card;
* ``load_agent("os:abort")`` called ``os.abort`` (any callable was called).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import Agent, CallSkill, Runtime, ScriptedPolicy
from skillstate.engine.actions import parse_action, validate_decision
from skillstate.engine.edits import check_edit, replace_state, set_fields
from skillstate.engine.policy import StatePolicy
from skillstate.errors import ActionRejected, AgentImportError, UsageError
from skillstate.examples import ledger
from skillstate.limits import edit_problem
from skillstate.llm.base import Message
from skillstate.llm.replay import ReplayProvider, ScriptedProvider
from skillstate.store.memory import MemoryStore

HUGE = "9" * 5_000


class N(BaseModel):
    n: Any = None


def _call(params_json: str) -> str:
    return '{"kind": "call_skill", "skill": "s", "params": {"n": ' + params_json + "}}"


HOSTILE_REPLIES = {
    "huge-int": _call(HUGE),
    "huge-negative-int": _call("-" + HUGE),
    "huge-int-alone": HUGE,
    "huge-int-in-a-list": _call("[1, 2, " + HUGE + "]"),
    "huge-int-reason": '{"kind": "finish", "summary": "x", "reason": ' + HUGE + "}",
    "huge-exponent": _call("1e99999"),
    "huge-negative-exponent": _call("-1e400"),
    "huge-mantissa": _call(HUGE + ".5"),
    "nan": _call("NaN"),
    "infinity": _call("Infinity"),
    "deep-list": "[" * 40_000 + "]" * 40_000,
    "deep-params": _call("[" * 40_000 + "]" * 40_000),
}


class TestModelReplies:
    @pytest.mark.parametrize("reply", HOSTILE_REPLIES.values(), ids=HOSTILE_REPLIES.keys())
    def test_a_hostile_reply_is_refused_with_one_line(self, reply: str) -> None:
        """Every hostile number or nesting: ActionRejected, one line, no raw ValueError."""
        with pytest.raises(ActionRejected) as caught:
            validate_decision(reply, {"s": N}, [])
        assert "\n" not in str(caught.value)
        assert "set_int_max_str_digits" not in str(caught.value)

    def test_a_huge_integer_is_named_in_the_refusal(self) -> None:
        with pytest.raises(ActionRejected, match="more than 4,300 digits"):
            validate_decision(_call(HUGE), {"s": N}, [])

    def test_an_integer_the_card_can_hold_is_still_accepted(self) -> None:
        action = validate_decision(_call("9" * 4_000), {"s": N}, [])
        assert isinstance(action, CallSkill)
        assert action.params["n"] == int("9" * 4_000)

    @pytest.mark.parametrize(
        "text", [_call("NaN"), _call("1e99999"), _call(HUGE), _call("[" * 5_000 + "]" * 5_000)]
    )
    def test_parse_action_refuses_what_a_card_cannot_hold(self, text: str) -> None:
        """parse_action(text) refused NaN and infinity only when a reply was validated."""
        with pytest.raises(ActionRejected):
            parse_action(text)

    def test_a_huge_integer_reply_is_a_recorded_invalid_decision(self) -> None:
        """Through the runtime: the step commits an invalid decision; the task still runs."""
        good = '{"kind": "call_skill", "skill": "append_entry", "params": {"n": 1}}'
        replies = iter([good.replace('{"n": 1}', '{"n": ' + HUGE + "}"), good])
        agent = dataclasses.replace(
            ledger.agent,
            policy=StatePolicy(ScriptedProvider(lambda m, s: next(replies)), max_repairs=0),
        )
        runtime = Runtime(agent, MemoryStore(), max_steps=1)
        runtime.start("t", target=1, ledger="/dev/null")
        report = runtime.step("t")
        assert report.event.action == {"kind": "invalid"}
        message = report.after.errors[-1].message
        assert "more than 4,300 digits" in message
        assert "\n" not in message
        assert runtime.step("t").event.verdict is not None  # the next, good reply runs


class TestCassettes:
    def _cassette(self, tmp_path: Path, text: str) -> Path:
        path = tmp_path / "c.json"
        path.write_text(text, encoding="utf-8")
        return path

    def _entry(self, reply: str, usage: str = '{"prompt": 1}') -> str:
        request = '{"messages": [{"role": "user", "content": "hi"}]}'
        return (
            '[{"request": ' + request + ', "response": {"text": ' + json.dumps(reply) + ', '
            '"usage": ' + usage + ', "model": "m"}}]'
        )  # fmt: skip

    @pytest.mark.parametrize(
        "text",
        [
            "[" * 100_000 + "]" * 100_000,
            '[{"request": ' + "[" * 100_000 + "]" * 100_000 + "}]",
            "[" + HUGE + "]",
        ],
        ids=["deep", "deep-entry", "huge-int"],
    )
    def test_a_cassette_that_does_not_read_is_one_usage_error(
        self, tmp_path: Path, text: str
    ) -> None:
        with pytest.raises(UsageError) as caught:
            ReplayProvider(self._cassette(tmp_path, text))
        assert "\n" not in str(caught.value)

    @pytest.mark.parametrize(
        "usage",
        ["1e999", "[]", '"x"', '{"prompt": 1e999}', '{"prompt": -3}', '{"prompt": true}',
         '{"prompt": ' + HUGE + "}", '{"prompt": "NaN"}'],
    )  # fmt: skip
    def test_a_cassette_with_bad_usage_is_one_usage_error(self, tmp_path: Path, usage: str) -> None:
        with pytest.raises(UsageError, match="cassette") as caught:
            ReplayProvider(self._cassette(tmp_path, self._entry("{}", usage)))
        assert "\n" not in str(caught.value)

    def test_a_recorded_reply_with_a_huge_integer_is_an_invalid_decision(
        self, tmp_path: Path
    ) -> None:
        """The reply text is the model's: replayed, it is refused like any bad reply."""
        provider = ReplayProvider(self._cassette(tmp_path, self._entry(_call(HUGE))))
        completion = provider.complete([Message("user", "hi")])
        assert provider.remaining == 0
        with pytest.raises(ActionRejected, match="4,300 digits"):
            validate_decision(completion.text, {"s": N}, [])


class TestScriptedDecisions:
    @pytest.mark.parametrize(
        "value",
        [10**5_000, -(10**5_000), float("nan"), float("inf"), "x\ud800", [["not", "an", "int"]]],
        ids=["huge-int", "huge-negative", "nan", "inf", "surrogate", "wrong-type"],
    )
    def test_a_scripted_decision_the_card_cannot_hold_is_refused(self, value: Any) -> None:
        """Python values need no parsing, but must still be storable: refused, recorded."""
        decide = lambda view: CallSkill(skill="append_entry", params={"n": value})  # noqa: E731
        agent = dataclasses.replace(ledger.agent, policy=ScriptedPolicy(decide))
        store = MemoryStore()
        runtime = Runtime(agent, store, max_steps=1)
        runtime.start("t", target=1, ledger="/dev/null")
        report = runtime.step("t")  # any exception fails the test
        assert report.after.version == 2
        assert store.load("t").version == 2
        message = report.after.errors[-1].message
        assert "\n" not in message


class TestLoadAgent:
    @pytest.mark.parametrize(
        "ref",
        ["os:getcwd", "builtins:dict", "builtins:object", "skillstate.examples.ledger:decide",
         "skillstate.examples.ledger:LedgerState", "skillstate:Agent"],
    )  # fmt: skip
    def test_anything_but_an_agent_is_refused_and_never_called(self, ref: str) -> None:
        from skillstate.engine.agent import load_agent

        with pytest.raises(AgentImportError) as caught:
            load_agent(ref)
        assert "not a skillstate Agent" in str(caught.value)
        assert "\n" not in str(caught.value)

    def test_a_declared_factory_is_called(self, tmp_path: Path, monkeypatch: Any) -> None:
        from skillstate.engine.agent import agent_factory, load_agent

        (tmp_path / "my_factory.py").write_text(
            "from skillstate import agent_factory\n"
            "from skillstate.examples.ledger import agent as ledger_agent\n"
            "calls = []\n\n"
            "@agent_factory\n"
            "def build():\n"
            "    calls.append(1)\n"
            "    return ledger_agent\n\n"
            "def plain():\n"
            "    calls.append(2)\n"
            "    return ledger_agent\n\n"
            "@agent_factory\n"
            "def wrong():\n"
            "    return 42\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        assert isinstance(load_agent("my_factory:build"), Agent)
        with pytest.raises(AgentImportError, match="not a skillstate Agent"):
            load_agent("my_factory:plain")
        with pytest.raises(AgentImportError, match="returned int"):
            load_agent("my_factory:wrong")
        import my_factory  # type: ignore[import-not-found]

        assert my_factory.calls == [1]  # the undeclared one was never called
        assert agent_factory(my_factory.build) is my_factory.build
        # The factory handed out the ledger module's own agent: it keeps its reference
        # (overwriting it sent every later ledger task to "my_factory:build").
        from skillstate.examples.ledger import agent as ledger_agent

        assert ledger_agent.ref == "skillstate.examples.ledger:agent"


class TestHandEdits:
    """set and edit refuse text a person should not write into a card, in one line."""

    @pytest.fixture
    def task(self) -> tuple[MemoryStore, Runtime[Any]]:
        store = MemoryStore()
        runtime = Runtime(ledger.agent, store, max_steps=1)
        # Text a model or user put in the card: it must not block later edits.
        runtime.start("t", target=3, ledger="/dev/null", facts={"said": "\x1b[31mred"})
        return store, runtime

    @pytest.mark.parametrize(
        ("path", "value"),
        [
            ("goal", "pay \x1b[2J now"),
            ("goal", "nul \x00"),
            ("goal", "carriage\rreturn"),
            ("goal", "del \x7f"),
            ("goal", "c1 \x85 \x9b"),
            ("goal", "refund \u202e04"),
            ("goal", "isolate \u2066x\u2069"),
            ("goal", "lone \ud800"),
            ("facts.note", ["fine", {"deep": "\x1b"}]),
            ("facts.a\nb", "key with a line break"),
            ("facts.a\tb", "key with a tab"),
            ("facts.\u202ek", "key with an override"),
            ("facts.n", 10**5_000),
            ("facts.n", float("nan")),
            ("agent", "os\x1b:abort"),
        ],
        ids=["esc", "nul", "cr", "del", "c1", "rlo", "isolate", "surrogate", "nested", "key-lf",
             "key-tab", "key-rlo", "huge-int", "nan", "agent"],
    )  # fmt: skip
    def test_set_refuses_it(
        self, task: tuple[MemoryStore, Runtime[Any]], path: str, value: Any
    ) -> None:
        store, _ = task
        before = store.load("t")
        with pytest.raises(UsageError) as caught:
            set_fields(store, ledger.agent, "t", {path: value})
        assert "\n" not in str(caught.value)
        assert "refused" in str(caught.value)
        assert store.load("t") == before

    def test_line_breaks_and_tabs_are_fine_in_values(
        self, task: tuple[MemoryStore, Runtime[Any]]
    ) -> None:
        store, _ = task
        state = set_fields(store, ledger.agent, "t", {"goal": "two\nlines\tand a tab"})
        assert state.goal == "two\nlines\tand a tab"

    def test_edit_refuses_it_in_what_changed_only(
        self, task: tuple[MemoryStore, Runtime[Any]]
    ) -> None:
        """An edit may keep text already in the card; what it adds is checked."""
        store, runtime = task
        card = runtime.load("t").model_dump(mode="json")
        version = card["version"]
        with pytest.raises(UsageError, match="value of 'goal' refused: it holds a bidi"):
            replace_state(store, ledger.agent, "t", version, {**card, "goal": "x \u202e y"})
        facts = {**card["facts"], "new": "\x9b"}
        with pytest.raises(UsageError, match="value of 'facts' refused: it holds a control"):
            replace_state(store, ledger.agent, "t", version, {**card, "facts": facts})
        assert store.load("t").version == version
        edited = replace_state(store, ledger.agent, "t", version, {**card, "target": 4})
        assert edited is not None
        assert edited.facts["said"] == "\x1b[31mred"  # kept, not refused

    def test_one_function_checks_a_value(self) -> None:
        """What the web inspector calls: skillstate.limits.edit_problem (and check_edit)."""
        assert edit_problem("plain\ntext") is None
        assert edit_problem({"k": ["\x1b"]}) == "it holds a control character (U+001B)"
        assert edit_problem({"a\tb": 1}) == "it holds a line break or tab in a key (U+0009)"
        with pytest.raises(UsageError, match="value of 'goal' refused"):
            check_edit("goal", "\u202e")
