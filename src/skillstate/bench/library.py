"""A synthetic skill library at scale, a labelled retrieval set, and what a decision costs.

The library is generated from templates: 20 domains × 10 objects × 15 verbs gives
up to 3,000 distinct skills, each declared in YAML like a real one (a description
per verb, params per verb, ``output_keys``, a ``verify`` rule) and run by one
function, :func:`perform`. Skills of the same verb share most of their words, and
so do the 15 skills about one object: the distractors a real large library has.

:data:`LABELLED` pairs requests written the way a user would (not copied from the
descriptions: synonyms, other word orders, extra words) with the skill that should
answer them. :func:`retrieval_rates` reports how often a retriever's top candidate
is that skill (top-1) and how often it is among the ``top_k`` offered.

:func:`measure` is the benchmark (``benchmarks/skill_library.py``): per library
size, per decision, with and without retrieval, the decision's response schema
(characters, tokens, time to build), the view's tokens, the system prompt's tokens,
the time to build the view, and the retrieval's own cost (index once, then per
query); then what keeping the success rates costs a store.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.engine.agent import Agent
from skillstate.engine.policy import ScriptedPolicy, StatePolicy
from skillstate.engine.runtime import Runtime
from skillstate.engine.schema import _decision_schema
from skillstate.library.retrieval import Retriever
from skillstate.library.yaml_skills import load_yaml_skills
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider
from skillstate.llm.tokens import count_tokens
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import Outcome, Skill, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState
from skillstate.state.view import View

__all__ = [
    "LABELLED",
    "Rates",
    "build_agent",
    "fill_params",
    "library_yaml",
    "load_library",
    "measure",
    "perform",
    "retrieval_rates",
    "scripted_model",
]

DOMAINS: dict[str, tuple[str, ...]] = {
    "sales": ("orders", "invoices", "quotes", "leads", "discounts", "revenue", "returns",
              "subscriptions", "price lists", "sales reps"),
    "inventory": ("stock levels", "purchase orders", "suppliers", "warehouse transfers",
                  "reorder points", "product catalog", "stock counts", "batches",
                  "expiry dates", "storage bins"),
    "hr": ("payroll", "leave requests", "job candidates", "employee reviews", "headcount",
           "timesheets", "trainings", "benefits", "employment contracts", "onboarding tasks"),
    "support": ("tickets", "sla breaches", "customer complaints", "refund requests",
                "chat transcripts", "knowledge articles", "satisfaction surveys",
                "escalations", "agent shifts", "reply macros"),
    "finance": ("expenses", "budgets", "journal entries", "cash flow", "tax filings",
                "bank statements", "accounts payable", "accounts receivable",
                "exchange rates", "audit trails"),
    "marketing": ("campaigns", "ad spend", "email opens", "landing pages", "social mentions",
                  "newsletter subscribers", "coupons", "web traffic", "conversion funnels",
                  "brand keywords"),
    "logistics": ("shipments", "delivery routes", "carriers", "customs declarations",
                  "freight costs", "tracking events", "pallets", "drivers", "delivery slots",
                  "return labels"),
    "security": ("login attempts", "access logs", "vulnerabilities", "firewall rules",
                 "api keys", "phishing reports", "user permissions", "security alerts",
                 "certificates", "password resets"),
    "devops": ("deployments", "error logs", "cpu metrics", "incidents", "build pipelines",
               "container images", "database backups", "feature flags", "alert rules",
               "uptime checks"),
    "legal": ("contracts", "nda renewals", "compliance checks", "court deadlines", "patents",
              "privacy requests", "policy documents", "litigation holds", "trademark filings",
              "signatures"),
    "manufacturing": ("production orders", "machine downtime", "quality inspections",
                      "bills of materials", "scrap rates", "shift schedules",
                      "maintenance work orders", "yield reports", "sensor readings", "tooling"),
    "healthcare": ("patient appointments", "lab results", "prescriptions", "insurance claims",
                   "bed occupancy", "vaccination records", "discharge summaries", "referrals",
                   "clinician schedules", "medical devices"),
    "education": ("course enrollments", "exam grades", "attendance records", "assignments",
                  "tuition payments", "class schedules", "teacher evaluations", "library loans",
                  "scholarships", "transcripts"),
    "real_estate": ("property listings", "lease agreements", "rent payments",
                    "maintenance requests", "tenant applications", "property valuations",
                    "occupancy rates", "inspections", "utility bills", "mortgages"),
    "energy": ("meter readings", "power outages", "solar output", "grid load", "tariffs",
               "carbon emissions", "fuel deliveries", "turbine faults", "consumption",
               "billing disputes"),
    "travel": ("flight bookings", "hotel reservations", "itineraries", "visa applications",
               "loyalty points", "cancellations", "travel expenses", "seat maps", "fare rules",
               "traveler profiles"),
    "retail_store": ("till transactions", "store footfall", "shelf planograms",
                     "cashier shifts", "gift cards", "loss prevention reports",
                     "store promotions", "customer receipts", "opening hours", "loyalty cards"),
    "research": ("experiments", "datasets", "paper drafts", "citations", "grant applications",
                 "lab notebooks", "survey responses", "model evaluations", "peer reviews",
                 "ethics approvals"),
    "agriculture": ("crop yields", "soil samples", "irrigation schedules",
                    "weather observations", "harvest logs", "fertilizer usage",
                    "livestock records", "pest reports", "field maps", "equipment hours"),
    "media": ("video uploads", "article drafts", "subscriber churn", "ad impressions",
              "moderation queue", "podcast episodes", "reader comments", "licensing deals",
              "editorial calendar", "view counts"),
}  # fmt: skip

VERBS: dict[str, str] = {
    "fetch": "Fetch the {obj} from the {dom} system for a date range and keep a short summary",
    "aggregate": "Compute totals of the {dom} {obj}, grouped by region, month or channel",
    "validate": "Check the {dom} {obj} for missing fields, duplicate rows and values out of range",
    "summarize": "Write a short plain-language summary of the {dom} {obj} for a status report",
    "export": "Export the {dom} {obj} to a CSV file and return where it was saved",
    "chart": "Draw a chart of the {dom} {obj} over time and save it as an image",
    "forecast": "Predict next month's {dom} {obj} from their history with a seasonal model",
    "dedupe": "Find and merge duplicate entries among the {dom} {obj}",
    "notify": "Send a notification about the {dom} {obj} to the team that owns them",
    "archive": "Move {dom} {obj} older than the retention period to cold storage",
    "compare": "Compare the {dom} {obj} of two periods and flag the biggest changes",
    "reconcile": "Reconcile the {dom} {obj} against the source of record and list mismatches",
    "detect_anomalies": "Detect unusual spikes or drops in the {dom} {obj} and explain outliers",
    "enrich": "Add reference data from the master tables to the {dom} {obj}",
    "schedule": "Schedule a recurring job that refreshes the {dom} {obj} every morning",
}

PARAMS: dict[str, dict[str, Any]] = {
    "fetch": {"start": {"type": "string", "default": "2026-01-01"},
              "end": {"type": "string", "default": "2026-01-31"}},
    "aggregate": {"group_by": {"type": "string", "enum": ["region", "month", "channel"],
                               "default": "month"}},
    "validate": {"strict": {"type": "boolean", "default": False}},
    "summarize": {"max_words": {"type": "integer", "minimum": 20, "maximum": 500,
                                "default": 120}},
    "export": {"path": {"type": "string", "default": "out.csv"}},
    "chart": {"kind": {"type": "string", "enum": ["line", "bar"], "default": "line"}},
    "forecast": {"horizon_days": {"type": "integer", "minimum": 1, "maximum": 365,
                                  "default": 30}},
    "dedupe": {"key_fields": {"type": "array", "items": "string", "required": False}},
    "notify": {"channel": {"type": "string", "enum": ["email", "chat"], "default": "chat"},
               "message": {"type": "string", "default": "see the latest figures"}},
    "archive": {"older_than_days": {"type": "integer", "minimum": 1, "default": 365}},
    "compare": {"period_a": {"type": "string", "default": "last month"},
                "period_b": {"type": "string", "default": "this month"}},
    "reconcile": {"tolerance": {"type": "number", "minimum": 0, "default": 0}},
    "detect_anomalies": {"sensitivity": {"type": "number", "minimum": 1, "maximum": 10,
                                         "default": 3}},
    "enrich": {"tables": {"type": "array", "items": "string", "required": False}},
    "schedule": {"cron": {"type": "string", "pattern": "^[0-9*/ ,-]+$", "default": "0 6 * * *"}},
}  # fmt: skip

LABELLED: tuple[tuple[str, str], ...] = (
    ("Plot the monthly revenue as a chart image", "chart_sales_revenue"),
    ("Which support tickets breached their SLA? Give me a short summary for the weekly "
     "status report", "summarize_support_sla_breaches"),
    ("Merge the duplicated supplier entries", "dedupe_inventory_suppliers"),
    ("Save all payroll records for HR as a CSV file", "export_hr_payroll"),
    ("Estimate next month's ad spend for marketing", "forecast_marketing_ad_spend"),
    ("Tell the owning team that the deployment failed", "notify_devops_deployments"),
    ("Are there strange spikes in the login attempts?",
     "detect_anomalies_security_login_attempts"),
    ("Match the bank statements against the books and list what doesn't agree",
     "reconcile_finance_bank_statements"),
    ("Total the freight costs per region", "aggregate_logistics_freight_costs"),
    ("Look for missing fields or duplicates in the lab results",
     "validate_healthcare_lab_results"),
    ("Move exam grades past retention to cold storage", "archive_education_exam_grades"),
    ("How do rent payments this quarter compare with last quarter?",
     "compare_real_estate_rent_payments"),
    ("Pull the meter readings for last week", "fetch_energy_meter_readings"),
    ("Add master data to the hotel reservations", "enrich_travel_hotel_reservations"),
    ("Refresh the gift cards every morning with a recurring job",
     "schedule_retail_store_gift_cards"),
    ("Draw the crop yields over the seasons", "chart_agriculture_crop_yields"),
    ("Summarize subscriber churn for the media team's report", "summarize_media_subscriber_churn"),
    ("Check the legal contracts for missing fields and bad dates", "validate_legal_contracts"),
    ("Predict machine downtime next month", "forecast_manufacturing_machine_downtime"),
    ("Find duplicated job candidates", "dedupe_hr_job_candidates"),
    ("Export the research datasets to a spreadsheet file", "export_research_datasets"),
    ("Group the invoices by month and compute totals", "aggregate_sales_invoices"),
    ("Let the owners know about the open security alerts", "notify_security_security_alerts"),
    ("Compare CPU metrics between last week and this week", "compare_devops_cpu_metrics"),
    ("Reconcile the tax filings with the records", "reconcile_finance_tax_filings"),
    ("Flag outliers in the solar output", "detect_anomalies_energy_solar_output"),
    ("Get the flight bookings for March", "fetch_travel_flight_bookings"),
    ("Archive old chat transcripts", "archive_support_chat_transcripts"),
    ("Enrich the product catalog with reference data", "enrich_inventory_product_catalog"),
    ("Set up a morning job that refreshes the uptime checks", "schedule_devops_uptime_checks"),
    ("Make a bar chart of store footfall", "chart_retail_store_store_footfall"),
    ("Validate the soil samples", "validate_agriculture_soil_samples"),
    ("Short summary of the grant applications, please",
     "summarize_research_grant_applications"),
    ("Forecast bed occupancy for the hospital", "forecast_healthcare_bed_occupancy"),
    ("Remove duplicate property listings", "dedupe_real_estate_property_listings"),
    ("Send the moderation queue status to the people responsible",
     "notify_media_moderation_queue"),
    ("Compare quality inspections of two periods",
     "compare_manufacturing_quality_inspections"),
    ("List the mismatches between course enrollments and the registrar's records",
     "reconcile_education_course_enrollments"),
    ("Fetch campaign data from the marketing system", "fetch_marketing_campaigns"),
    ("Total the shipments by carrier", "aggregate_logistics_shipments"),
)  # fmt: skip
"""Requests and the skill that should answer each (40; written as a user would ask)."""

TOP_K = 8


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _all_specs() -> list[tuple[str, str, str, str]]:
    """``(name, verb, domain, object)`` of every skill the templates can make (3,000)."""
    return [
        (f"{verb}_{domain}_{_slug(obj)}", verb, domain, obj)
        for domain, objects in DOMAINS.items()
        for obj in objects
        for verb in VERBS
    ]


def _chosen(n: int, seed: int = 26) -> list[tuple[str, str, str, str]]:
    """``n`` skills: the labelled targets first (as many as fit), then a fixed shuffle."""
    import random

    specs = _all_specs()
    if not 1 <= n <= len(specs):
        raise ValueError(f"a library has 1 to {len(specs)} skills, not {n}")
    targets = [name for _, name in LABELLED]
    by_name = {spec[0]: spec for spec in specs}
    missing = [t for t in targets if t not in by_name]
    if missing:
        raise ValueError(f"labelled targets not in the templates: {missing}")
    rest = [spec for spec in specs if spec[0] not in set(targets)]
    random.Random(seed).shuffle(rest)
    ordered = [by_name[t] for t in targets] + rest
    return ordered[:n]


def library_yaml(n: int) -> str:
    """A YAML skill file with ``n`` generated skills (see the module docstring)."""
    skills = []
    for name, verb, domain, obj in _chosen(n):
        dom = domain.replace("_", " ")
        dom = "HR" if dom == "hr" else dom
        skills.append(
            {
                "name": name,
                "description": VERBS[verb].format(dom=dom, obj=obj),
                "version": 1,
                "run": "skillstate.bench.library:perform",
                "input_params": PARAMS[verb],
                "output_keys": [f"facts.{name}"],
                "verify": [{"field": f"facts.{name}", "op": "eq", "value": "done"}],
                "tags": [domain, verb],
            }
        )
    return json.dumps({"skills": skills}, indent=1)  # JSON is YAML


def load_library(n: int) -> list[Skill[Any, Any]]:
    """The ``n``-skill library, written to a temporary file and loaded from it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "library.yaml"
        path.write_text(library_yaml(n), encoding="utf-8")
        return list(load_yaml_skills(path))


def perform(state: AgentState, params: Any, ctx: SkillContext) -> Outcome:
    """What every generated skill runs: records that it ran, under its own name."""
    return Outcome(writes={f"facts.{ctx.skill}": "done"}, summary=f"{ctx.skill} done")


def fill_params(params_schema: dict[str, Any]) -> dict[str, Any]:
    """Values for the required params of a schema branch (a scripted model's params)."""
    out: dict[str, Any] = {}
    for name in params_schema.get("required", []):
        prop = params_schema.get("properties", {}).get(name, {})
        if "enum" in prop:
            out[name] = prop["enum"][0]
        else:
            out[name] = {"integer": 1, "number": 1.0, "boolean": False, "array": []}.get(
                prop.get("type", "string"), "x"
            )
    return out


def scripted_model(target: Callable[[], str | None]) -> Callable[..., str]:
    """A deterministic "model": calls ``target()`` if the schema offers it, else the first
    skill offered, and finishes once a skill has run."""

    def rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
        branches = {
            b["properties"]["skill"]["const"]: b
            for b in (schema or {}).get("anyOf", [])
            if "skill" in b.get("properties", {})
        }
        if "Completed: none" not in messages[-1].content or not branches:
            return json.dumps({"kind": "finish", "summary": "done", "reason": "one skill ran"})
        wanted = target()
        name = wanted if wanted in branches else next(iter(branches))
        params = fill_params(branches[name]["properties"]["params"])
        return json.dumps({"kind": "call_skill", "skill": name, "params": params, "reason": "r"})

    return rule


def build_agent(
    skills: Sequence[Skill[Any, Any]],
    *,
    retriever: Retriever | None = None,
    top_k: int = TOP_K,
    policy: Any = None,
    view_budget: int | None = None,
) -> Agent[AgentState]:
    """An agent over ``skills`` (one step, ``main``), decided by ``policy`` (default: a
    model policy over :func:`scripted_model`, so the schema and prompt are built)."""
    if policy is None:
        policy = StatePolicy(ScriptedProvider(scripted_model(lambda: None)))
    return Agent(
        name="library",
        state_type=AgentState,
        machine=StateMachine({"main": ["main"]}, initial="main", final=("main",)),
        skills=SkillRegistry(skills),
        policy=policy,
        description="An assistant with a large library of data skills.",
        retriever=retriever,
        top_k=top_k,
        view_budget=view_budget,
        can_ask=False,
    )


@dataclass(frozen=True)
class Rates:
    """How often retrieval found the labelled skill."""

    queries: int
    top1: int
    topk: int
    misses: tuple[tuple[str, str, tuple[str, ...]], ...]
    """``(query, expected, offered)`` for each query whose skill was not offered."""

    @property
    def top1_rate(self) -> float:
        return self.top1 / self.queries if self.queries else 0.0

    @property
    def topk_rate(self) -> float:
        return self.topk / self.queries if self.queries else 0.0


def retrieval_rates(agent: Agent[Any], labelled: Sequence[tuple[str, str]] = LABELLED) -> Rates:
    """Top-1 and top-k hits of ``agent``'s retrieval over ``labelled`` (queries whose
    skill the agent has), each query the goal of a fresh task."""
    top1 = topk = 0
    misses = []
    asked = [(q, e) for q, e in labelled if e in agent.skills]
    for query, expected in asked:
        view = agent.view(agent.new_state("eval", goal=query))
        offered = tuple(c.skill for c in view.candidates)
        top1 += bool(offered) and offered[0] == expected
        topk += expected in offered
        if expected not in offered:
            misses.append((query, expected, offered))
    return Rates(len(asked), top1, topk, tuple(misses))


# ---------------------------------------------------------------------------- the benchmark


@dataclass(frozen=True)
class Row:
    """What one decision costs with one configuration (medians over the decisions)."""

    label: str
    offered: int
    schema_chars: int
    schema_tokens: int
    schema_ms: float
    """Building the response schema from scratch (its cache cleared)."""
    view_tokens: int
    system_tokens: int
    view_ms: float
    """``agent.view(state)`` (retrieval included) and its text rendered."""
    decision_ms: float
    """View, text, system prompt and schema, with the schema cache as a run has it."""


@dataclass(frozen=True)
class SizeReport:
    skills: int
    load_s: float
    agent_s: float
    index_ms: float
    query_ms: float
    rows: tuple[Row, ...]
    rates: Rates


def _median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000


def _row(label: str, agent: Agent[Any], goals: Sequence[str]) -> Row:
    policy = agent.policy
    assert isinstance(policy, StatePolicy)
    views: list[View[Any]] = []
    view_s, schema_s, decision_s = [], [], []
    for goal in goals:
        state = agent.new_state("bench", goal=goal)
        begun = time.perf_counter()
        view = agent.view(state)
        text = view.text
        policy.system_prompt(view)
        schema = view.action_schema
        decision_s.append(time.perf_counter() - begun)
        views.append(view)
        assert text
        assert schema
        begun = time.perf_counter()
        agent.view(state).text  # noqa: B018 (timed for its side effects)
        view_s.append(time.perf_counter() - begun)
        _decision_schema.cache_clear()
        begun = time.perf_counter()
        view.action_schema  # noqa: B018
        schema_s.append(time.perf_counter() - begun)
    first = views[0]
    schema_text = json.dumps(first.action_schema, ensure_ascii=False)
    return Row(
        label=label,
        offered=int(statistics.median(len(v.skills) for v in views)),
        schema_chars=int(statistics.median(len(json.dumps(v.action_schema)) for v in views)),
        schema_tokens=count_tokens(schema_text),
        schema_ms=_median_ms(schema_s),
        view_tokens=int(statistics.median(v.tokens for v in views)),
        system_tokens=int(statistics.median(count_tokens(policy.system_prompt(v)) for v in views)),
        view_ms=_median_ms(view_s),
        decision_ms=_median_ms(decision_s),
    )


def measure_size(n: int, *, decisions: int, retriever: Callable[[], Retriever]) -> SizeReport:
    """Every figure for an ``n``-skill library (see the module docstring)."""
    begun = time.perf_counter()
    skills = load_library(n)
    load_s = time.perf_counter() - begun
    begun = time.perf_counter()
    plain = build_agent(skills)
    agent_s = time.perf_counter() - begun
    found = retriever()
    with_retrieval = replace(plain, retriever=found)
    from skillstate.library.retrieval import skill_document

    documents = [skill_document(s) for s in skills]
    begun = time.perf_counter()
    found.index(documents)
    index_ms = (time.perf_counter() - begun) * 1000
    goals = [query for query, _ in LABELLED][:decisions]
    query_s = []
    for goal in goals:
        begun = time.perf_counter()
        found.scores(goal)
        query_s.append(time.perf_counter() - begun)
    rows = (
        _row(f"all {n} skills (no retriever)", plain, goals),
        _row(f"top {TOP_K} by BM25", with_retrieval, goals),
    )
    return SizeReport(
        skills=n,
        load_s=load_s,
        agent_s=agent_s,
        index_ms=index_ms,
        query_ms=_median_ms(query_s),
        rows=rows,
        rates=retrieval_rates(with_retrieval),
    )


@dataclass(frozen=True)
class StatsReport:
    tasks: int
    events: int
    first_ms: float
    unchanged_ms: float
    one_moved_ms: float


def measure_stats(tasks: int, store_url: str) -> StatsReport:
    """What :class:`~skillstate.library.stats.SuccessRates` costs on a store of ``tasks``
    finished tasks (three skill calls each): the first refresh, a refresh with nothing
    new, and one after a single task moved."""
    from skillstate.library.stats import SuccessRates
    from skillstate.store import open_store

    skills = load_library(30)
    names = [s.name for s in skills[:3]]

    def decide(view: View[Any]) -> Action:
        done = len(view.state.completed_steps)
        if done < len(names):
            return CallSkill(skill=names[done], params={})
        return Finish(summary="done")

    agent = build_agent(skills, policy=ScriptedPolicy(decide))
    store = open_store(store_url)
    try:
        runtime = Runtime(agent, store)
        for i in range(tasks):
            runtime.start(f"t{i}")
            runtime.run(f"t{i}")
        events = sum(len(store.events(f"t{i}")) for i in range(tasks))
        rates = SuccessRates(store, max_age=0)
        begun = time.perf_counter()
        rates.refresh()
        first = time.perf_counter() - begun
        begun = time.perf_counter()
        rates.refresh()
        unchanged = time.perf_counter() - begun
        runtime.start("extra")
        runtime.step("extra")
        begun = time.perf_counter()
        rates.refresh()
        moved = time.perf_counter() - begun
        assert rates.record(names[0]).attempts == tasks + 1
    finally:
        store.close()
    return StatsReport(tasks, events, first * 1000, unchanged * 1000, moved * 1000)


def markdown(reports: Sequence[SizeReport], stats: StatsReport | None, command: str) -> str:
    """The run as the markdown ``docs/benchmarks.md`` publishes."""
    lines = [
        "## Skill library at scale (issue 26)",
        "",
        "```bash",
        command,
        "```",
        "",
        "### Per decision, with and without retrieval (medians over the decisions)",
        "",
        "| skills | offered | schema chars | schema tokens | schema build ms | view tokens "
        "| system prompt tokens | view ms | decision ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for report in reports:
        for row in report.rows:
            lines.append(
                f"| {row.label} | {row.offered} | {row.schema_chars:,} | {row.schema_tokens:,} "
                f"| {row.schema_ms:.2f} | {row.view_tokens:,} | {row.system_tokens:,} "
                f"| {row.view_ms:.2f} | {row.decision_ms:.2f} |"
            )
    lines += [
        "",
        "### Ratios, all skills / top 8 (same run)",
        "",
        "| skills | schema tokens | system prompt tokens | view tokens | decision time |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for report in reports:
        full, top = report.rows
        lines.append(
            f"| {report.skills} | {full.schema_tokens / top.schema_tokens:.1f}× "
            f"| {full.system_tokens / top.system_tokens:.1f}× "
            f"| {full.view_tokens / top.view_tokens:.1f}× "
            f"| {full.decision_ms / top.decision_ms:.1f}× |"
        )
    lines += [
        "",
        "### Retrieval cost and quality",
        "",
        "| skills | load YAML s | build Agent s | BM25 index ms (once) | BM25 query ms "
        f"| labelled queries | top-1 | top-{TOP_K} |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in reports:
        lines.append(
            f"| {r.skills} | {r.load_s:.2f} | {r.agent_s:.2f} | {r.index_ms:.1f} "
            f"| {r.query_ms:.3f} | {r.rates.queries} | {r.rates.top1_rate:.0%} "
            f"| {r.rates.topk_rate:.0%} |"
        )
    if stats is not None:
        lines += [
            "",
            "### Keeping the success rates (SuccessRates.refresh on SQLite)",
            "",
            "| finished tasks | events | first refresh ms | nothing new ms | one task moved ms |",
            "| ---: | ---: | ---: | ---: | ---: |",
            f"| {stats.tasks} | {stats.events} | {stats.first_ms:.1f} | {stats.unchanged_ms:.2f} "
            f"| {stats.one_moved_ms:.2f} |",
        ]
    misses = [m for r in reports[-1:] for m in r.rates.misses]
    if misses:
        lines += [
            "",
            f"Missed at {reports[-1].skills} skills (query → expected; offered first):",
            "",
        ]
        lines += [f"- {q!r} → `{e}`; first: `{o[0] if o else '-'}`" for q, e, o in misses]
    return "\n".join(lines) + "\n"


def measure(
    sizes: Sequence[int] = (30, 300, 3000),
    *,
    decisions: int = len(LABELLED),
    stats_tasks: int = 200,
    store_url: str | None = None,
    command: str = "",
    progress: Callable[[str], None] = lambda line: None,
) -> str:
    """The whole benchmark as markdown."""
    from skillstate.library.bm25 import BM25Retriever

    reports = []
    for n in sizes:
        progress(f"{n} skills ...")
        reports.append(measure_size(n, decisions=decisions, retriever=BM25Retriever))
    stats = None
    if stats_tasks:
        progress(f"success rates over {stats_tasks} tasks ...")
        with tempfile.TemporaryDirectory() as tmp:
            url = store_url or f"sqlite:///{tmp}/stats.db"
            stats = measure_stats(stats_tasks, url)
    return markdown(reports, stats, command)
