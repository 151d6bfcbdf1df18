"""Templates from finished tasks: distill (verified steps only, generalised, redacted),
instantiate, the hint in the view, and ``run --template`` end to end.

The agent here is driven by scripted policies (offline); the CLI tests run
``tests.test_templates:model_agent``, whose policy is a real model policy over a
:class:`ScriptedProvider` that writes every prompt it is sent to a file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
)
from skillstate.engine.agent import agent_factory
from skillstate.engine.policy import policy_for
from skillstate.engine.rewind import rollback_task
from skillstate.engine.runtime import Runtime
from skillstate.errors import TemplateMismatch, UsageError
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider
from skillstate.skills.binding import FromState
from skillstate.state.secrets import Sensitive, generate_key
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.templates import (
    Template,
    check_template,
    distill,
    instantiate,
    load_template,
    save_template,
)
from skillstate.templates.model import dump_template
from tests.test_cli import run_cli, store_url

AGENT = "tests.test_templates:crm_agent"
MODEL_AGENT = "tests.test_templates:model_agent"
ROOT = Path(__file__).resolve().parents[1]
TOKEN = "tok-SECRET-5f3a9c1e7b"
PASSWORD = "hunter2-pw-8841"


# ---------------------------------------------------------------- the agent


class CrmState(AgentState):
    customer: str | None = None
    region: str = "emea"
    api_token: Sensitive[str] | None = None
    account: str | None = None
    orders: int | None = None
    report: str | None = None


class Lookup(BaseModel):
    customer: str


class Charge(BaseModel):
    amount: int


class Note(BaseModel):
    text: str


class Fetch(BaseModel):
    account: Annotated[str, FromState("account")]
    region: str
    limit: int


class Report(BaseModel):
    title: str
    tier: str
    password: str


MACHINE = StateMachine(
    {
        "init": ["looking"],
        "looking": ["looking", "charging", "fetching"],
        "charging": ["fetching"],
        "fetching": ["reporting"],
        "reporting": ["done"],
        "done": [],
    },
    initial="init",
)


def _skills() -> SkillRegistry:
    skills = SkillRegistry()

    @skills.skill(outputs=["account", "facts"], step="looking")
    def lookup(state: CrmState, params: Lookup, ctx: SkillContext) -> Outcome:
        """Find the customer's account."""
        account = f"ACC-{1000 + 7 * len(params.customer)}"
        text = f"customer {params.customer}: account {account}, tier gold"
        return Outcome(writes={"account": account, "facts.lookup": text}, summary=text)

    @lookup.verifier
    def _found(state: CrmState, outcome: Outcome) -> Verdict:
        ok = (state.account or "").startswith("ACC-")
        return Verdict.passed() if ok else Verdict.failed("no account")

    @skills.skill(outputs=["facts"], step="charging")
    def charge(state: CrmState, params: Charge, ctx: SkillContext) -> Outcome:
        """Charge an amount."""
        return Outcome(writes={"facts.charged": params.amount}, value=params.amount)

    @charge.verifier
    def _small(state: CrmState, outcome: Outcome) -> Verdict:
        if outcome.value > 100:
            return Verdict.failed("over the limit", permanent=True)
        return Verdict.passed()

    @skills.skill(outputs=["facts"], step="looking")
    def note(state: CrmState, params: Note, ctx: SkillContext) -> Outcome:
        """Keep a note."""
        return Outcome(writes={"facts.note": params.text}, value=params.text)

    @note.verifier
    def _noted(state: CrmState, outcome: Outcome) -> Verdict:
        return Verdict.passed() if state.facts.get("note") == outcome.value else Verdict.failed("x")

    @skills.skill(outputs=["orders"], step="fetching")
    def fetch_orders(state: CrmState, params: Fetch, ctx: SkillContext) -> Outcome:
        """Fetch the account's open orders in a region."""
        return Outcome(writes={"orders": min(3, params.limit)}, summary=f"{params.account}")

    @fetch_orders.verifier
    def _fetched(state: CrmState, outcome: Outcome) -> Verdict:
        return Verdict.passed() if state.orders is not None else Verdict.failed("no orders")

    @skills.skill(outputs=["report"], step="reporting")
    def report(state: CrmState, params: Report, ctx: SkillContext) -> Outcome:
        """Write the report."""
        return Outcome(writes={"report": params.title}, value=params.title)

    @report.verifier
    def _reported(state: CrmState, outcome: Outcome) -> Verdict:
        return Verdict.passed() if state.report == outcome.value else Verdict.failed("x")

    return skills


@agent_factory
def crm_agent() -> Agent:
    return Agent(
        name="crm",
        description="Reports a customer's open orders.",
        state_type=CrmState,
        machine=MACHINE,
        skills=_skills(),
        policy=ScriptedPolicy(lambda view: Finish()),
        goal="Report a customer's open orders.",
        constraints=("Never charge more than 100.",),
    )


def _recording(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
    """A model that follows a fixed plan and writes every prompt to $TEMPLATE_PROMPTS."""
    prompts = Path(os.environ["TEMPLATE_PROMPTS"])
    with prompts.open("a", encoding="utf-8") as out:
        out.write(json.dumps([m.content for m in messages]) + "\n")
    done = len(prompts.read_text(encoding="utf-8").splitlines()) - 1
    plan: list[dict[str, Any]] = [
        {"kind": "call_skill", "skill": "lookup", "params": {"customer": "Globex"}},
        {"kind": "call_skill", "skill": "fetch_orders", "params": {"region": "apac", "limit": 5}},
        {
            "kind": "call_skill",
            "skill": "report",
            "params": {"title": "Orders of Globex", "tier": "gold", "password": "<none>"},
        },
        {"kind": "finish", "summary": "reported"},
    ]
    action = plan[min(done, len(plan) - 1)]
    return json.dumps({**action, "reason": "the plan"})


@agent_factory
def model_agent() -> Agent:
    return replace(crm_agent(), policy=policy_for("state", ScriptedProvider(_recording)))


# ---------------------------------------------------------------- a finished task


def _scripted(actions: list[Any]) -> ScriptedPolicy[Any]:
    queue: Iterator[Any] = iter(actions)
    return ScriptedPolicy(lambda view: next(queue))


def finish_task(store: Store, task_id: str = "A") -> None:
    """Task A: lookup, a charge that fails verify, a note that is rolled back, then
    fetch_orders, report and finish."""
    first = replace(
        crm_agent(),
        policy=_scripted(
            [
                CallSkill(skill="lookup", params={"customer": "Acme Corp"}),
                CallSkill(skill="charge", params={"amount": 500}),
                CallSkill(skill="note", params={"text": "remember ACC-1063"}),
            ]
        ),
    )
    runtime = Runtime(first, store, max_steps=3)
    runtime.start(
        task_id,
        goal="Report the open orders of Acme Corp in apac.",
        constraints=("Never charge more than 100.", "Only orders in apac count."),
        customer="Acme Corp",
        region="apac",
        api_token=TOKEN,
    )
    result = runtime.run(task_id)
    assert result.state.facts.get("note") == "remember ACC-1063"
    assert "charged" not in result.state.facts  # the charge failed its verify
    rollback_task(store, task_id, result.state.version - 1)
    second = replace(
        crm_agent(),
        policy=_scripted(
            [
                CallSkill(skill="fetch_orders", params={"region": "apac", "limit": 5}),
                CallSkill(
                    skill="report",
                    params={"title": "Orders of Acme Corp", "tier": "gold", "password": PASSWORD},
                ),
                Finish(summary="done"),
            ]
        ),
    )
    done = Runtime(second, store).run(task_id)
    assert done.stopped == "completed", done.state.errors
    assert "note" not in done.state.facts


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = generate_key()
    monkeypatch.setenv("SKILLSTATE_KEY", value)
    return value


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "state.db")
    yield store
    store.close()


@pytest.fixture
def template(sqlite: SQLiteStore, key: str) -> Template:
    finish_task(sqlite)
    return distill(sqlite, "A", crm_agent())


# ---------------------------------------------------------------- distill


class TestDistill:
    def test_the_plan_is_the_verified_steps_only(self, template: Template) -> None:
        """The failed charge and the rolled-back note are not in the plan."""
        assert [s.skill for s in template.plan] == ["lookup", "fetch_orders", "report"]
        assert template.path == ("init", "looking", "fetching", "reporting", "done")
        assert (template.source.task, template.source.version) == ("A", template.source.version)
        assert template.source.definition == crm_agent().definition.ref
        assert set(template.skills) == {"lookup", "fetch_orders", "report"}

    def test_given_values_become_parameters(self, template: Template) -> None:
        """Initial fields become parameters; the goal and params use them; a bound param
        is a state reference, a value read from a tool's text a $from, a constant stays."""
        assert template.goal == "Report the open orders of {{customer}} in {{region}}."
        assert template.constraints == (
            "Never charge more than 100.",
            "Only orders in {{region}} count.",
        )
        assert template.fields == {
            "customer": "{{customer}}",
            "region": "{{region}}",
            "api_token": "{{api_token}}",
        }
        lookup, fetch, report = (s.params for s in template.plan)
        assert lookup == {"customer": "{{customer}}"}
        assert fetch == {"account": "$state.account", "region": "{{region}}", "limit": 5}
        assert report["title"] == "Orders of {{customer}}"
        assert report["tier"] == "$from.facts.lookup"
        customer = template.parameters["customer"]
        assert (customer.type, customer.required, customer.field) == ("string", True, "customer")

    def test_secrets_never_reach_the_yaml(self, template: Template, tmp_path: Path) -> None:
        """A Sensitive field and a masked param become secret parameters without values."""
        assert template.parameters["api_token"].secret
        assert template.parameters["api_token"].field == "api_token"
        assert template.plan[2].params["password"] == "{{password}}"
        assert template.parameters["password"].secret
        path = tmp_path / "t.yaml"
        save_template(template, path)
        text = path.read_text(encoding="utf-8")
        for secret in (TOKEN, PASSWORD, "enc:v1:", "***"):
            assert secret not in text
        assert load_template(path) == template

    def test_a_running_task_is_refused(self, sqlite: SQLiteStore, key: str) -> None:
        Runtime(crm_agent(), sqlite).start("R", customer="X")
        with pytest.raises(UsageError, match="is created, not completed"):
            distill(sqlite, "R", crm_agent())


# ---------------------------------------------------------------- instantiate


class TestInstantiate:
    def test_parameters_are_substituted_back(self, template: Template) -> None:
        fields = instantiate(
            template,
            {"customer": "Globex", "region": "emea", "api_token": "tok-OTHER-1", "password": "p"},
            agent=crm_agent(),
        )
        assert fields["goal"] == "Report the open orders of Globex in emea."
        assert fields["constraints"] == (
            "Never charge more than 100.",
            "Only orders in emea count.",
        )
        assert (fields["customer"], fields["region"], fields["api_token"]) == (
            "Globex",
            "emea",
            "tok-OTHER-1",
        )
        steps = fields["template"]["steps"]
        assert steps[0] == {"skill": "lookup", "params": {"customer": "Globex"}}
        assert steps[2]["params"]["password"] == "***"  # a secret never goes into the hint
        assert "tok-OTHER-1" not in json.dumps(fields["template"])

    def test_a_missing_parameter_is_one_line(self, template: Template) -> None:
        with pytest.raises(UsageError, match=r"needs parameter\(s\) customer, password"):
            instantiate(template, {"region": "emea", "api_token": "t-1234"})

    def test_a_wrong_type_is_refused(self, template: Template) -> None:
        with pytest.raises(UsageError, match="is a string, not int"):
            instantiate(template, {"customer": 3, "region": "x", "api_token": "t", "password": "p"})

    def test_another_agents_template_is_refused(self, template: Template) -> None:
        other = template.model_copy(
            update={"plan": (*template.plan, template.plan[0].model_copy(update={"skill": "gone"}))}
        )
        with pytest.raises(TemplateMismatch, match="uses skill\\(s\\) gone"):
            check_template(other, crm_agent())

    def test_another_definition_is_a_warning_naming_what_differs(self, template: Template) -> None:
        skills = dict(template.skills)
        skills["lookup"] = {**skills["lookup"], "version": "0"}
        source = template.source.model_copy(update={"definition": "sha256:" + "0" * 64})
        older = template.model_copy(update={"skills": skills, "source": source})
        (warning,) = check_template(older, crm_agent())
        assert "skill 'lookup' version 0 -> 1" in warning
        assert "000000000000" in warning


# ---------------------------------------------------------------- the hint in the view


class TestHint:
    def test_the_view_shows_the_hint_and_done_entries_drop_out(
        self, template: Template, tmp_path: Path
    ) -> None:
        store = SQLiteStore(tmp_path / "b.db")
        seen: list[str] = []

        def decide(view: Any) -> Any:
            seen.append(view.text)
            if view.state.account is None:
                return CallSkill(skill="lookup", params={"customer": "Globex"})
            return Finish()

        agent = replace(crm_agent(), policy=ScriptedPolicy(decide))
        fields = instantiate(
            template,
            {"customer": "Globex", "region": "emea", "api_token": "t-12345", "password": "p"},
        )
        runtime = Runtime(agent, store)
        runtime.start("B", **fields)
        runtime.run("B")
        store.close()
        first, second = seen[0], seen[1]
        assert "Template plan (hint from task A" in first
        assert '- next: lookup(customer="Globex")' in first
        assert 'fetch_orders(region="emea", limit=5, account=(from account, not set yet))' in first
        assert 'lookup(customer="Globex")' not in second
        assert (
            '- next: fetch_orders(region="emea", limit=5, account="ACC-1042" (from account))'
            in second
        )
        assert "1 of 3 done" in second

    def test_the_budget_hides_the_hint_after_evidence_before_facts(
        self, template: Template
    ) -> None:
        from skillstate.state.view import render_view

        agent = crm_agent()
        fields = instantiate(
            template,
            {"customer": "Globex", "region": "emea", "api_token": "t-12345", "password": "p"},
        )
        state = agent.new_state("V", **fields).evolve(
            facts={"a": "x" * 200},
            evidence=[{"kind": "tool", "source": "s", "summary": "y" * 200, "ref": None}],
        )
        full = render_view(state, machine=MACHINE, skills=list(agent.skills))
        assert "- then: report(" in full.text
        # Over by about the evidence and two hint lines: those go, the next entry and
        # the facts stay.
        view = render_view(
            state, machine=MACHINE, skills=list(agent.skills), budget=full.tokens - 70
        )
        assert view.dropped == ("evidence", "template", "template")
        assert "- next: lookup(" in view.text
        assert "- a: xxx" in view.text
        assert "- (2 later hinted steps hidden by the view budget)" in view.text
        tight = render_view(state, machine=MACHINE, skills=list(agent.skills), budget=150)
        assert tight.dropped.index("template") < tight.dropped.index("facts.a")
        assert "Constraints" in tight.text
        assert "Goal: Report the open orders of Globex" in tight.text


# ---------------------------------------------------------------- the CLI


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: str) -> Path:
    """The CLI subprocesses import the test agents and record prompts here."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    prompts = tmp_path / "prompts.jsonl"
    monkeypatch.setenv("TEMPLATE_PROMPTS", str(prompts))
    return prompts


class TestCli:
    def test_distill_then_run_with_the_template(self, tmp_path: Path, cli_env: Path) -> None:
        """distill writes the YAML and a summary; run --template starts a task whose model
        sees the hint, and a hinted step it completed leaves the hint."""
        url = store_url(tmp_path)
        store = SQLiteStore(tmp_path / "state.db")
        finish_task(store)
        store.close()
        out_file = tmp_path / "crm.yaml"
        code, out, err = run_cli(
            tmp_path, "distill", "A", "--agent", AGENT, "--store", url, "-o", str(out_file)
        )
        assert code == 0, out + err
        assert "parameters of crm-from-A" in out
        assert "fetch_orders" in out
        assert TOKEN not in out_file.read_text(encoding="utf-8")
        code, out, err = run_cli(
            tmp_path, "run", MODEL_AGENT, "--template", str(out_file), "--task-id", "B",
            "--param", "customer=Globex", "--param", "region=apac", "--param",
            "api_token=tok-B-0000", "--param", "password=pw-B", "--store", url, "-q",
        )  # fmt: skip
        assert code == 0, out + err
        assert "completed" in out
        prompts = [json.loads(line)[-1] for line in cli_env.read_text().splitlines()]
        assert "Template plan (hint from task A" in prompts[0]
        assert '- next: lookup(customer="Globex")' in prompts[0]
        assert 'lookup(customer="Globex")' not in prompts[1]
        assert "- next: fetch_orders(" in prompts[1]
        assert all("tok-B-0000" not in p and "pw-B" not in p for p in prompts)
        store = SQLiteStore(tmp_path / "state.db")
        head = store.load("B").state
        store.close()
        assert head["template"]["steps"] == []
        assert head["goal"] == "Report the open orders of Globex in apac."

    def test_a_missing_parameter_is_exit_2_and_nothing_written(
        self, tmp_path: Path, cli_env: Path
    ) -> None:
        url = store_url(tmp_path)
        path = tmp_path / "t.yaml"
        store = SQLiteStore(tmp_path / "state.db")
        finish_task(store)
        save_template(distill(store, "A", crm_agent()), path)
        store.close()
        code, _, err = run_cli(
            tmp_path, "run", AGENT, "--template", str(path), "--task-id", "C",
            "--param", "region=apac", "--store", url,
        )  # fmt: skip
        assert code == 2
        assert "needs parameter(s) customer, api_token, password" in err
        assert len(err.strip().splitlines()) == 1
        store = SQLiteStore(tmp_path / "state.db")
        assert "C" not in store.tasks()
        store.close()

    def test_distill_refuses_an_unfinished_task(self, tmp_path: Path, cli_env: Path) -> None:
        url = store_url(tmp_path)
        store = SQLiteStore(tmp_path / "state.db")
        Runtime(crm_agent(), store).start("R", customer="X")
        store.close()
        code, _, err = run_cli(tmp_path, "distill", "R", "--agent", AGENT, "--store", url)
        assert code == 2
        assert "not completed" in err
        assert len(err.strip().splitlines()) == 1

    def test_a_template_of_another_agent_is_refused(self, tmp_path: Path, cli_env: Path) -> None:
        path = tmp_path / "other.yaml"
        other = Template(
            name="other",
            source={"task": "Z", "version": 3, "definition": "sha256:" + "1" * 64},
            plan=[{"skill": "send_invoice", "params": {}}],
        )
        path.write_text(dump_template(other), encoding="utf-8")
        code, _, err = run_cli(
            tmp_path, "run", AGENT, "--template", str(path), "--store", store_url(tmp_path)
        )
        assert code == 2
        assert "uses skill(s) send_invoice that agent 'crm' does not have" in err


# ---------------------------------------------------------------- more of the log and the file


class TestMore:
    def test_a_fork_starts_with_its_sources_steps(self, sqlite: SQLiteStore, key: str) -> None:
        """A task forked after the lookup keeps the lookup in its plan, then its own steps."""
        from skillstate.engine.rewind import fork_task

        first = replace(
            crm_agent(),
            policy=_scripted([CallSkill(skill="lookup", params={"customer": "Acme Corp"})]),
        )
        runtime = Runtime(first, sqlite, max_steps=1)
        runtime.start("S", customer="Acme Corp", region="apac")
        looked = runtime.run("S").state
        fork_task(sqlite, crm_agent(), "S", looked.version, "F")
        rest = replace(
            crm_agent(),
            policy=_scripted(
                [
                    CallSkill(skill="fetch_orders", params={"region": "apac", "limit": 2}),
                    CallSkill(skill="report", params={"title": "t", "tier": "x", "password": "n"}),
                    Finish(),
                ]
            ),
        )
        assert Runtime(rest, sqlite).run("F").stopped == "completed"
        template = distill(sqlite, "F", crm_agent())
        assert [s.skill for s in template.plan] == ["lookup", "fetch_orders", "report"]
        assert template.plan[0].params == {"customer": "{{customer}}"}

    def test_params_read_back_from_a_goal(self, template: Template) -> None:
        from skillstate.templates import params_from_text

        goal = "Report the open orders of Initech Ltd in latam."
        assert params_from_text(template.goal, goal) == {
            "customer": "Initech Ltd",
            "region": "latam",
        }
        assert params_from_text(template.goal, "Something else entirely.") is None

    def test_a_file_of_another_kind_or_a_newer_format_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "t.yaml"
        path.write_text("kind: other\nname: x\n", encoding="utf-8")
        with pytest.raises(UsageError, match="not a skillstate template"):
            load_template(path)
        path.write_text("kind: skillstate/template\nformat: 99\nname: x\n", encoding="utf-8")
        with pytest.raises(UsageError, match="has format 99"):
            load_template(path)
        path.write_text(
            "kind: skillstate/template\nname: x\nsource: {task: A, version: 1}\n"
            "goal: 'for {{who}}'\n",
            encoding="utf-8",
        )
        with pytest.raises(UsageError, match="not a declared parameter"):
            load_template(path)

    def test_param_without_template_is_refused(self, tmp_path: Path, cli_env: Path) -> None:
        code, _, err = run_cli(
            tmp_path, "run", AGENT, "--param", "a=b", "--store", store_url(tmp_path)
        )
        assert code == 2
        assert "needs --template FILE" in err

    def test_a_stale_step_is_not_in_the_plan(self, tmp_path: Path) -> None:
        """A step whose file changed behind the task's back is redone: the plan has the
        step that stayed, once."""

        class FileState(AgentState):
            path: str = ""
            written: bool = False

        skills = SkillRegistry()

        @skills.skill(outputs=["written"], step="writing")
        def write_file(state: FileState, params: Any, ctx: SkillContext) -> Outcome:
            """Write the file."""
            Path(state.path).write_text("v1", encoding="utf-8")
            ctx.fingerprint(state.path)
            return Outcome(writes={"written": True})

        @write_file.verifier
        def _written(state: FileState, outcome: Outcome) -> Verdict:
            ok = Path(state.path).read_text(encoding="utf-8") == "v1"
            return Verdict.passed() if ok else Verdict.failed("not written")

        def decide(view: Any) -> Any:
            if "write_file" in view.state.pending_steps:
                return CallSkill(skill="write_file")
            return Finish()

        agent = Agent(
            name="files",
            state_type=FileState,
            machine=StateMachine(
                {"init": ["writing"], "writing": ["writing", "done"], "done": []}, initial="init"
            ),
            skills=skills,
            policy=ScriptedPolicy(decide),
            plan=("write_file",),
        )
        store = SQLiteStore(tmp_path / "f.db")
        target = tmp_path / "out.txt"
        runtime = Runtime(agent, store, max_steps=1)
        runtime.start("W", path=str(target))
        runtime.run("W")
        target.write_text("someone else's edit", encoding="utf-8")
        assert Runtime(agent, store).run("W").stopped == "completed"
        kinds = [e.action.get("kind") for e in store.events("W")]
        assert "recheck" in kinds
        assert kinds.count("call_skill") == 2
        template = distill(store, "W", agent)
        store.close()
        assert [s.skill for s in template.plan] == ["write_file"]
        assert template.fields == {"path": "{{path}}"}
