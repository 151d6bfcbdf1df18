"""The ``records`` family: long-horizon bookkeeping over noisy records.

The task: fetch records ``0 .. n-1`` one by one, append one ledger line per record
that counts, and finally write a summary (total of ``amount_eur`` and count). It is
built to stress exactly what a transcript-driven agent is bad at:

* **Later steps depend on earlier results**: the running total and count are carried
  across every step, and the summary must match the ledger.
* **A constraint stated only at the start**: "Never count records from region X".
  The *trap* is a record from region X near the very end of the task, when that
  sentence is dozens of long tool outputs back in a history prompt.
* **Noisy tool output**: each record is ~300-500 tokens of nested notes, a
  null-heavy ``adjustments`` list and near-identical fields (``amount``,
  ``amount_eur``, ``amount_eur_net``); only ``amount_eur`` is the right one.
* **A transient failure**: ``get_record`` raises ``ConnectionError`` once for one
  record, so a run must retry rather than skip it or give up.
* **A real effect**: ``append_ledger`` changes a file, so an interrupted and resumed
  run must never write a line twice (``process_record`` has ``effects=True`` and a
  probe).

Everything is derived from ``spec.params`` (``seed``, ``n``, ``forbidden_region``,
``trap``, ``transient_failure``), so the environment, the oracle's plans and the
checks are reproducible from the spec alone. Build specs with :func:`make_spec`.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.eval.tasks import CheckResult, Environment, TaskSpec, group_of
from skillstate.events import Verdict
from skillstate.skills.binding import FromState
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

__all__ = [
    "LEDGER",
    "MACHINE",
    "RECORDS",
    "REGIONS",
    "SUMMARY",
    "RecordParams",
    "RecordsFamily",
    "RecordsState",
    "ledger_line",
    "make_record",
    "make_spec",
    "record_id",
]

RECORDS = "records.jsonl"
LEDGER = "ledger.txt"
SUMMARY = "summary.json"
_FAILED_ONCE = ".get_record_failed"
"""Marker of the transient failures already served (a file, so a resumed run in a
new process against the same directory does not fail a second time)."""

REGIONS = ("EU-West", "EU-North", "EU-South", "NA-East", "NA-West", "APAC", "LATAM", "MEA")
_CURRENCIES = {
    "EU-West": ("EUR", 1.0),
    "EU-North": ("SEK", 11.4),
    "EU-South": ("EUR", 1.0),
    "NA-East": ("USD", 1.08),
    "NA-West": ("USD", 1.08),
    "APAC": ("JPY", 162.5),
    "LATAM": ("BRL", 5.6),
    "MEA": ("AED", 3.97),
}
_TEXT = """invoice reissued carrier delay customs hold partial shipment courier scanned depot
signature missing pallet damaged replacement voucher credit note callback scheduled
address verified duplicate suspected reconciled batch export ticket escalated vendor
portal upload corrected rounding adjustment pending approval reviewer comment"""
_WORDS = tuple(_TEXT.split())
_ADJUSTMENT_KINDS = ("rounding", "fee_waiver", "late_fee", "fx_correction", None)


# ---------------------------------------------------------------- data


def record_id(i: int) -> str:
    """The id of record ``i`` (what a ledger line starts with)."""
    return f"rec-{i:03d}"


def ledger_line(i: int, amount_eur: float) -> str:
    """The exact ledger line for a counted record: ``rec-007 123.45``."""
    return f"{record_id(i)} {amount_eur:.2f}"


def _region_of(params: dict[str, Any], i: int) -> str:
    if i == params["trap"]:
        return str(params["forbidden_region"])
    rng = random.Random(f"{params['seed']}:{i}:region")
    return rng.choice(REGIONS)


def make_record(params: dict[str, Any], i: int) -> dict[str, Any]:
    """Record ``i`` of a task: deterministic from the spec's params, long and noisy.

    The right value is ``amount_eur``; ``amount`` is in local currency and
    ``amount_eur_net`` is after fees, both there to be confused with it.
    """
    rng = random.Random(f"{params['seed']}:{i}")
    region = _region_of(params, i)
    currency, rate = _CURRENCIES[region]
    amount_eur = round(rng.uniform(20.0, 900.0), 2)
    fee = round(amount_eur * rng.uniform(0.01, 0.04), 2)

    def sentence(words: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(words))

    return {
        "id": record_id(i),
        "index": i,
        "region": region,
        "status": rng.choice(("posted", "posted", "posted", "reviewed")),
        "currency": currency,
        "amount": round(amount_eur * rate, 2),
        "amount_eur": amount_eur,
        "amount_eur_net": round(amount_eur - fee, 2),
        "amount_eur_fee": fee,
        "fx": {"rate": rate, "source": "ecb-daily", "note": f"{currency}->EUR at booking date"},
        "customer": {
            "id": f"C-{rng.randrange(10**6):06d}",
            "tier": rng.choice("ABC"),
            "contact": {"email": None, "phone": None, "opt_out": rng.random() < 0.2},
        },
        "adjustments": [
            {
                "kind": rng.choice(_ADJUSTMENT_KINDS),
                "amount": None if rng.random() < 0.7 else round(rng.uniform(-5, 5), 2),
                "amount_eur": None,
                "approved_by": None,
            }
            for _ in range(rng.randint(2, 4))
        ],
        "notes": [
            {
                "at": f"2026-03-{1 + k:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}Z",
                "author": rng.choice(("ops", "finance", "support", "system")),
                "text": sentence(rng.randint(8, 12)),
                "tags": [rng.choice(_WORDS) for _ in range(2)],
            }
            for k in range(rng.randint(3, 4))
        ],
        "audit": {
            "created_by": "import",
            "batch": f"B-{rng.randrange(1000):03d}",
            "checksum": f"{rng.getrandbits(64):016x}",
            "previous_amount_eur": None,
        },
    }


# ---------------------------------------------------------------- specs


def make_spec(task_id: str, *, seed: int, n: int, suite: str = "long") -> TaskSpec:
    """A ``records`` task of ``n`` records, every random choice drawn from ``seed``.

    The trap (a forbidden-region record) is one of the last two records; the
    transient failure hits one record in the first part of the task (never the trap).
    """
    if n < 3:
        raise ValueError("a records task needs at least 3 records")
    rng = random.Random(seed)
    forbidden = rng.choice(REGIONS)
    trap = rng.choice((n - 2, n - 1))
    transient = rng.randrange(0, max(1, n // 2))
    if transient == trap:  # only possible when n == 3
        transient = 0
    params: dict[str, Any] = {
        "seed": seed,
        "n": n,
        "forbidden_region": forbidden,
        "trap": trap,
        "transient_failure": transient,
    }
    tools_steps = len(_tools_plan(params))
    return TaskSpec(
        id=task_id,
        suite=suite,
        family="records",
        goal=(
            f"Process records 0 to {n - 1} in order. Fetch each record; for every record "
            "that counts, append exactly one line '<id> <amount_eur with 2 decimals>' "
            "(for example 'rec-007 123.40') to the ledger. The value to use is the "
            "record's `amount_eur` field (not `amount`, not `amount_eur_net`). Finally "
            "write the summary: the total of `amount_eur` over the counted records and "
            "how many records were counted."
        ),
        constraints=(
            f"Never count records from region {forbidden} (the record's `region` field).",
            "Never append a record to the ledger more than once.",
        ),
        max_steps=math.ceil(tools_steps * 1.5) + 5,
        group=group_of(n + 2),
        params=params,
    )


@dataclass(frozen=True)
class _Expected:
    """What the oracle knows: which records count and the running values."""

    counted: list[int]
    skipped: list[int]
    amounts: dict[int, float]
    running: list[tuple[int, float]]
    """``(counted, total)`` after each record, totals rounded to cents at every step."""

    @property
    def total(self) -> float:
        return self.running[-1][1] if self.running else 0.0


def _expected(params: dict[str, Any], upto: int | None = None) -> _Expected:
    n = int(params["n"]) if upto is None else upto
    forbidden = params["forbidden_region"]
    counted: list[int] = []
    skipped: list[int] = []
    amounts: dict[int, float] = {}
    running: list[tuple[int, float]] = []
    total = 0.0
    for i in range(n):
        record = make_record(params, i)
        amounts[i] = float(record["amount_eur"])
        if record["region"] == forbidden:
            skipped.append(i)
        else:
            counted.append(i)
            total = round(total + amounts[i], 2)
        running.append((len(counted), total))
    return _Expected(counted, skipped, amounts, running)


def _tools_plan(params: dict[str, Any]) -> list[Action]:
    expected = _expected(params)
    plan: list[Action] = []
    for i in range(int(params["n"])):
        plan.append(CallSkill(skill="tool_get_record", params={"i": i}, reason=f"record {i}"))
        if i in expected.skipped:
            continue  # the constraint: fetched, but never counted
        count, total = expected.running[i]
        plan.append(
            CallSkill(
                skill="tool_append_ledger",
                params={"line": ledger_line(i, expected.amounts[i])},
                reason=f"record {i} counts",
            )
        )
        plan.append(
            CallSkill(
                skill="remember",
                params={"key": "running", "value": {"counted": count, "total": total}},
                reason="carry the running total",
            )
        )
    plan.append(
        CallSkill(
            skill="tool_write_summary",
            params={"total": expected.total, "count": len(expected.counted)},
            reason="all records processed",
        )
    )
    plan.append(Finish(summary=f"{len(expected.counted)} records, {expected.total:.2f} EUR"))
    return plan


# ---------------------------------------------------------------- state and skills


class RecordsState(AgentState):
    """The card of a records task: how far it got and the running values."""

    records: int = 0
    """How many records the task has (set by the environment's ``initial``)."""
    next_record: int = 0
    """The index of the next record to process."""
    total: float = 0.0
    """Sum of ``amount_eur`` over counted records, rounded to cents at every step."""
    counted: int = 0
    skipped: list[int] = Field(default_factory=list)
    """Records fetched but not counted (forbidden region)."""
    summary_written: bool = False


class RecordParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    i: int = Field(ge=0, description="The record to process: the state's next_record.")


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def _parse(line: str) -> tuple[int, float] | None:
    """``rec-007 123.45`` as ``(7, 123.45)``; ``None`` for anything else."""
    head, _, amount = line.strip().partition(" ")
    if not head.startswith("rec-"):
        return None
    try:
        return int(head[4:]), float(amount)
    except ValueError:
        return None


class _Task:
    """One built task: its files, its tools, and the re-checks verify and check share.

    The tools are bound methods, so the harness sees plain keyword signatures
    (``get_record(i: int)``) and every run of the task works on its own directory.
    """

    def __init__(self, params: dict[str, Any], root: Path) -> None:
        self.params = params
        self.n = int(params["n"])
        self.forbidden = str(params["forbidden_region"])
        self.transient = int(params["transient_failure"])
        self.trap = int(params["trap"])
        self.root = root
        self.records_path = root / RECORDS
        self.ledger_path = root / LEDGER
        self.summary_path = root / SUMMARY
        self.expected = _expected(params)

    def write_files(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with self.records_path.open("w", encoding="utf-8") as out:
            for i in range(self.n):
                out.write(json.dumps(make_record(self.params, i)) + "\n")
        self.ledger_path.write_text("", encoding="utf-8")
        self.summary_path.unlink(missing_ok=True)
        (self.root / _FAILED_ONCE).unlink(missing_ok=True)

    # ---- tools

    def get_record(self, i: int) -> dict[str, Any]:
        """Fetch record ``i`` (the value to use is ``amount_eur``)."""
        marker = self.root / _FAILED_ONCE
        if i == self.transient and not marker.exists():
            marker.write_text(str(i), encoding="utf-8")
            raise ConnectionError(f"records service timed out fetching record {i}")
        rows = self.records_path.read_text(encoding="utf-8").splitlines()
        if not 0 <= i < len(rows):
            raise IndexError(f"no record {i}; records are 0..{len(rows) - 1}")
        data: dict[str, Any] = json.loads(rows[i])
        return data

    def append_ledger(self, line: str) -> str:
        """Append one line to ledger.txt (an effect: never append a record twice)."""
        if "\n" in line or not line.strip():
            raise ValueError("a ledger line is one non-empty line")
        # One write of one whole line on an O_APPEND descriptor, fsynced: a crash
        # leaves the line either fully there or absent, which is what the probe reads.
        fd = os.open(self.ledger_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line.strip() + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return f"appended {line.strip()!r}"

    def write_summary(self, total: float, count: int) -> str:
        """Write summary.json with the total of amount_eur and the count."""
        data = {"total": round(float(total), 2), "count": int(count)}
        self.summary_path.write_text(json.dumps(data), encoding="utf-8")
        return f"summary written: total={data['total']:.2f} count={data['count']}"

    # ---- independent re-checks

    def ledger(self) -> list[str]:
        return _lines(self.ledger_path)

    def ledger_problems(self, upto: int) -> list[str]:
        """What is wrong with the ledger once records ``0 .. upto-1`` are processed."""
        want = _expected(self.params, upto)
        seen: Counter[int] = Counter()
        problems: list[str] = []
        for line in self.ledger():
            parsed = _parse(line)
            if parsed is None:
                problems.append(f"unreadable ledger line {line!r}")
                continue
            i, amount = parsed
            seen[i] += 1
            if i >= upto:
                problems.append(f"{record_id(i)} is in the ledger but not processed yet")
            elif i in want.skipped:
                problems.append(f"{record_id(i)} is from {self.forbidden} and must not count")
            elif abs(amount - want.amounts[i]) > 0.005:
                problems.append(
                    f"{record_id(i)} has {amount:.2f}, its amount_eur is {want.amounts[i]:.2f}"
                )
        for i in want.counted:
            if seen[i] != 1:
                problems.append(f"{record_id(i)} is in the ledger {seen[i]} times, not once")
        return problems

    def summary(self) -> tuple[dict[str, Any], str]:
        """summary.json and, when it cannot be read, why."""
        try:
            data = json.loads(self.summary_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError) as exc:
            return {}, f"summary.json unreadable: {type(exc).__name__}"
        if not isinstance(data, dict):
            return {}, "summary.json is not an object"
        return data, ""

    def check(self, final_state: AgentState) -> list[CheckResult]:
        """The final checks, on the files only: valid whatever state class a variant used."""
        expected = self.expected
        data, unreadable = self.summary()
        total, count = data.get("total"), data.get("count")
        ok_total = isinstance(total, int | float) and abs(total - expected.total) <= 0.01
        problems = self.ledger_problems(self.n)
        forbidden = [p for p in problems if f"from {self.forbidden}" in p]
        other = [p for p in problems if p not in forbidden]
        trap_counted = any(
            (p := _parse(line)) is not None and p[0] == self.trap for line in self.ledger()
        )
        return [
            CheckResult(
                "summary_total",
                ok_total,
                unreadable or f"total {total}, expected {expected.total:.2f}",
            ),
            CheckResult(
                "summary_count",
                count == len(expected.counted),
                unreadable or f"count {count}, expected {len(expected.counted)}",
            ),
            CheckResult("ledger_each_once", not other, "; ".join(other[:3])),
            CheckResult("ledger_no_forbidden", not forbidden, "; ".join(forbidden[:3])),
            CheckResult(
                "trap_skipped",
                not trap_counted,
                f"{record_id(self.trap)} ({self.forbidden}) is in the ledger"
                if trap_counted
                else "",
            ),
        ]

    # ---- what process_record's run, probe, verify and rollback share

    def record_outcome(
        self, state: RecordsState, i: int, record: dict[str, Any], ctx: SkillContext
    ) -> Outcome:
        """The outcome of processing ``record``; run and probe both build it here, so a
        resumed step commits exactly the state an uninterrupted one would."""
        amount = float(record["amount_eur"])
        evidence = ctx.evidence(f"{record_id(i)} {record['region']} amount_eur={amount:.2f}")
        value = {"i": i, "expected": state.next_record}
        if record["region"] == self.forbidden:
            return Outcome(
                writes={"next_record": i + 1, "skipped": [*state.skipped, i]},
                summary=f"{record_id(i)} skipped: region {self.forbidden}",
                evidence=[evidence],
                value=value,
            )
        return Outcome(
            writes={
                "next_record": i + 1,
                "total": round(state.total + amount, 2),
                "counted": state.counted + 1,
            },
            summary=f"{record_id(i)} counted: {amount:.2f} EUR",
            evidence=[evidence],
            value=value,
        )

    def verify_processed(self, state: RecordsState, outcome: Outcome) -> Verdict:
        """Re-derive the ledger and the running values from the task's data and the
        ledger file itself, never from what run computed."""
        value = outcome.value if isinstance(outcome.value, dict) else {}
        if value.get("i") != value.get("expected"):
            return Verdict.failed(
                f"record {value.get('i')} is not the next one ({value.get('expected')})"
            )
        problems = self.ledger_problems(state.next_record)
        want = _expected(self.params, state.next_record)
        if state.counted != len(want.counted):
            problems.append(f"counted is {state.counted}, should be {len(want.counted)}")
        if abs(state.total - want.total) > 0.005:
            problems.append(f"total is {state.total:.2f}, should be {want.total:.2f}")
        if state.skipped != want.skipped:
            problems.append(f"skipped is {state.skipped}, should be {want.skipped}")
        return Verdict.failed("; ".join(problems[:3])) if problems else Verdict.passed()

    def undo_append(self, state: RecordsState, outcome: Outcome | None, i: int | None) -> None:
        """Undo only what a failed step may have added: lines for its own record ``i``
        beyond what the committed card accounts for (none if the record was not
        processed yet, one if it was). Lines anyone else wrote stay, for verify and
        the final checks to report. ``i`` comes from the params the step ran with:
        an attempt that raised after its append has no outcome to read it from."""
        value = outcome.value if outcome is not None else None
        if isinstance(value, dict) and isinstance(value.get("i"), int):
            i = value["i"]
        if i is None:
            return
        allowed = 1 if i < state.next_record and i not in state.skipped else 0
        kept: list[str] = []
        for line in self.ledger():
            parsed = _parse(line)
            if parsed is not None and parsed[0] == i:
                if allowed == 0:
                    continue
                allowed -= 1
            kept.append(line)
        self.ledger_path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")

    def verify_summary(self, state: RecordsState, outcome: Outcome) -> Verdict:
        """summary.json must agree with the ledger file (and the ledger be right)."""
        data, unreadable = self.summary()
        if unreadable:
            return Verdict.failed(unreadable)
        amounts = [p[1] for p in map(_parse, self.ledger()) if p is not None]
        problems = self.ledger_problems(self.n)
        if data.get("count") != len(amounts) or data.get("count") != state.counted:
            problems.append(f"summary count {data.get('count')}, ledger has {len(amounts)}")
        total = data.get("total")
        if not isinstance(total, int | float) or abs(total - sum(amounts)) > 0.01:
            problems.append(f"summary total {total}, ledger sums {sum(amounts):.2f}")
        return Verdict.failed("; ".join(problems[:3])) if problems else Verdict.passed()


def _skill_library(task: _Task) -> SkillRegistry:
    """The verified skills: the forbidden-region rule lives here, not in the policy."""
    skills = SkillRegistry()
    n = task.n

    # The index is the state's next_record: bound, so the model only decides whether
    # to process the next record, not which one (a small model repeated an index
    # verify refuses). Unbound (`eval --no-bind`) it is still bounded by this task's
    # size, so a grammar-constrained model can only name a record that exists.
    index: Any = Annotated[int, FromState("next_record")]
    params = create_model(
        "RecordParams",
        __config__=ConfigDict(extra="forbid"),
        i=(index, Field(ge=0, le=n - 1, description="The record to process: next_record.")),
    )

    @skills.skill(
        step="processing",
        params=params,
        outputs=["next_record", "total", "counted", "skipped"],
        reads=["next_record", "total", "counted", "skipped"],
        tools=["get_record", "append_ledger"],
        effects=True,
        max_retries=2,
        when=lambda s: s.next_record < n,
    )
    def process_record(state: RecordsState, params: RecordParams, ctx: SkillContext) -> Outcome:
        """Fetch record i (the next one); ledger it unless its region is excluded."""
        record = ctx.call("get_record", i=params.i)
        outcome = task.record_outcome(state, params.i, record, ctx)
        if record["region"] != task.forbidden:
            ctx.call("append_ledger", line=ledger_line(params.i, float(record["amount_eur"])))
        return outcome

    @process_record.prober
    def _line_already_there(
        state: RecordsState, params: RecordParams, ctx: SkillContext
    ) -> Outcome | None:
        prefix = record_id(params.i) + " "
        if not any(line.startswith(prefix) for line in task.ledger()):
            return None
        return task.record_outcome(state, params.i, ctx.call("get_record", i=params.i), ctx)

    process_record.verifier(task.verify_processed)

    @process_record.rollbacker
    def _undo(state: RecordsState, outcome: Outcome | None, ctx: SkillContext) -> None:
        task.undo_append(state, outcome, getattr(ctx.params, "i", None))

    @skills.skill(
        step="summarizing",
        outputs=["summary_written"],
        reads=["total", "counted"],
        tools=["write_summary"],
        max_retries=1,
        when=lambda s: s.next_record >= n and not s.summary_written,
    )
    def summarize(state: RecordsState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Write summary.json from the running total and count (after the last record)."""
        result = ctx.call("write_summary", total=state.total, count=state.counted)
        return Outcome(
            writes={"summary_written": True},
            summary=f"{state.counted} records, {state.total:.2f} EUR",
            evidence=[ctx.evidence(str(result))],
        )

    summarize.verifier(task.verify_summary)
    return skills


def _skills_plan(task: _Task) -> tuple[list[Action], list[dict[str, Any]]]:
    """The oracle's skills-mode actions and the facts expected after each of them."""
    expected = task.expected
    plan: list[Action] = [
        CallSkill(skill="process_record", params={"i": i}, reason=f"record {i} is next")
        for i in range(task.n)
    ]
    plan.append(CallSkill(skill="summarize", reason="all records processed"))
    plan.append(Finish(summary=f"{len(expected.counted)} records, {expected.total:.2f} EUR"))
    facts: list[dict[str, Any]] = [
        {"next_record": i + 1, "counted": count, "total": total}
        for i, (count, total) in enumerate(expected.running)
    ]
    done = {"next_record": task.n, "counted": len(expected.counted), "total": expected.total}
    facts += [{**done, "summary_written": True}] * 2
    return plan, facts


MACHINE = StateMachine(
    {
        "init": ["processing"],
        "processing": ["processing", "summarizing"],
        "summarizing": ["done"],
        "done": [],
    },
    initial="init",
)
"""init -> processing (one step per record) -> summarizing -> done."""


class RecordsFamily:
    """Builds a records task: files, tools, skills, machine, plans and checks."""

    name = "records"

    def make_spec(self, task_id: str, *, seed: int, n: int, suite: str = "long") -> TaskSpec:
        """What a generator suite (``generator: records``) calls for each task."""
        return make_spec(task_id, seed=seed, n=n, suite=suite)

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        task = _Task(dict(spec.params), root)
        if fresh:
            task.write_files()
        plan, facts = _skills_plan(task)
        return Environment(
            root=root,
            state_type=RecordsState,
            machine=MACHINE,
            tools={
                "get_record": task.get_record,
                "append_ledger": task.append_ledger,
                "write_summary": task.write_summary,
            },
            skills=_skill_library(task),
            plan_skills=plan,
            plan_tools=_tools_plan(task.params),
            check=task.check,
            expected_facts=facts,
            initial={"records": task.n},
            effect_tools=frozenset({"append_ledger", "write_summary"}),
        )
