"""The ``orders`` family: a customer's largest order of one month (seed 001).

The environment is ``orders.db``, a SQLite database with ``users`` and ``orders``
(several customers, three months, every status, JSON columns full of noise). The
task: look the customer up by e-mail, list their orders of the month, and write
the largest one's id and amount to ``answer.json``. It is built so that the
obvious answer is wrong:

* **A constraint stated once, at the start**: refunded or cancelled orders do not
  count. The single largest order of the month *is* refunded, and the next one is
  cancelled; the answer is the third.
* **Near-identical fields**: ``amount`` (what the customer paid, the one to use),
  ``amount_gross`` (before the coupon) and ``amount_refunded``, plus a payment
  ``captured`` figure. One delivered order with a large coupon is the largest by
  ``amount_gross`` but not by ``amount``.
* **Null-heavy, noisy tool output**: ``list_orders`` returns every order with its
  items, shipping, payment and mostly-empty notes, gift and reference fields.
* **A look-up first**: orders are listed by user id, found from the e-mail; a
  second customer with the same name has a near-identical e-mail, and the
  customer's orders of the neighbouring months (one minutes after the month ends)
  are larger still.

Everything is derived from ``spec.params`` (``seed``, ``email``, ``name``,
``month``, ``users``, ``orders``); the final checks read ``answer.json`` (and the
database, to explain a wrong answer).
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.errors import UsageError
from skillstate.eval.tasks import CheckResult, Environment, TaskSpec
from skillstate.events import Verdict
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

__all__ = [
    "ANSWER",
    "DB",
    "EXCLUDED_STATUSES",
    "MACHINE",
    "OrdersFamily",
    "OrdersState",
    "make_orders",
]

DB = "orders.db"
ANSWER = "answer.json"
EXCLUDED_STATUSES = ("refunded", "cancelled")
"""Orders in these statuses do not count (the task's constraint)."""

_NAMES = ("Anna Berg", "Omar Haddad", "Sofia Rossi", "Kenji Sato", "Maria Lopez", "Tom Baker")
_PRODUCTS = (
    "espresso machine",
    "standing desk",
    "noise-cancelling headphones",
    "office chair",
    "4K monitor",
    "coffee beans 1kg",
    "desk lamp",
    "USB-C dock",
)
_CARRIERS = ("DHL", "UPS", "SF Express", "La Poste")
_SCHEMA = """
CREATE TABLE users (
    id TEXT PRIMARY KEY,
    external_id TEXT NOT NULL,
    name TEXT NOT NULL,
    email TEXT NOT NULL UNIQUE,
    tier TEXT,
    created_at TEXT NOT NULL,
    deleted_at TEXT,
    phone TEXT,
    preferences_json TEXT
);
CREATE TABLE orders (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id),
    created_at TEXT NOT NULL,
    status TEXT NOT NULL,
    currency TEXT NOT NULL,
    amount REAL NOT NULL,
    amount_gross REAL NOT NULL,
    amount_refunded REAL,
    coupon TEXT,
    items_json TEXT NOT NULL,
    shipping_json TEXT,
    payment_json TEXT,
    notes_json TEXT,
    gift_message TEXT,
    external_ref TEXT
);
"""
_ORDER_COLUMNS = (
    "id",
    "user_id",
    "created_at",
    "status",
    "currency",
    "amount",
    "amount_gross",
    "amount_refunded",
    "coupon",
    "items_json",
    "shipping_json",
    "payment_json",
    "notes_json",
    "gift_message",
    "external_ref",
)


# ---------------------------------------------------------------- data


def _shift(month: str, by: int) -> str:
    year, mon = (int(p) for p in month.split("-"))
    index = year * 12 + (mon - 1) + by
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def _last_day(month: str) -> int:
    year, mon = (int(p) for p in month.split("-"))
    if mon == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if mon in {4, 6, 9, 11} else 31


@dataclass(frozen=True)
class OrdersData:
    """The generated database content and what the right answer is."""

    users: list[dict[str, Any]]
    orders: list[dict[str, Any]]
    user_id: str
    answer_id: str
    answer_amount: float
    refunded_id: str
    """The single largest order of the month: refunded, so it does not count."""
    cancelled_id: str
    gross_id: str
    """The largest order by ``amount_gross`` (a coupon makes its ``amount`` smaller)."""

    def month_orders(self, month: str) -> list[dict[str, Any]]:
        return [
            o
            for o in self.orders
            if o["user_id"] == self.user_id and str(o["created_at"]).startswith(month)
        ]


def _order(
    rng: random.Random,
    user_id: str,
    when: str,
    amount: float,
    *,
    status: str,
    coupon: tuple[str, float] | None = None,
) -> dict[str, Any]:
    """One order row, its JSON columns full of near-identical and empty fields."""
    gross = round(amount + (coupon[1] if coupon else 0.0), 2)
    count = rng.randint(1, 3)
    prices = [round(gross / count, 2)] * count
    prices[-1] = round(gross - sum(prices[:-1]), 2)
    items = [
        {
            "sku": f"SKU-{rng.randrange(1000, 9999)}",
            "name": rng.choice(_PRODUCTS),
            "qty": 1,
            "unit_price": price,
            "discount": None,
            "tax_code": None,
        }
        for price in prices
    ]
    refunded = amount if status == "refunded" else rng.choice((None, None, None, 0.0))
    return {
        "id": f"ORD-{when[:7].replace('-', '')}-{rng.randrange(10**4):04d}",
        "user_id": user_id,
        "created_at": when,
        "status": status,
        "currency": "EUR",
        "amount": round(amount, 2),
        "amount_gross": gross,
        "amount_refunded": refunded,
        "coupon": coupon[0] if coupon else None,
        "items_json": json.dumps(items),
        "shipping_json": json.dumps(
            {
                "carrier": rng.choice(_CARRIERS),
                "tracking": f"TRK{rng.getrandbits(40):010x}",
                "eta_days": rng.randint(1, 6),
                "address": {"line2": None, "state": None, "instructions": None},
            }
        ),
        "payment_json": json.dumps(
            {
                "method": rng.choice(("card", "paypal", "bank_transfer")),
                "captured": None if status == "cancelled" else round(amount, 2),
                "refunds": [{"amount": amount, "reason": "returned"}]
                if status == "refunded"
                else [],
                "installments": None,
            }
        ),
        "notes_json": None if rng.random() < 0.8 else json.dumps([{"by": "support", "text": None}]),
        "gift_message": None,
        "external_ref": None if rng.random() < 0.75 else f"MKT-{rng.randrange(10**6):06d}",
    }


def _when(rng: random.Random, month: str, day: int | None = None, hour: int | None = None) -> str:
    day = rng.randint(1, _last_day(month)) if day is None else day
    hour = rng.randrange(24) if hour is None else hour
    return f"{month}-{day:02d}T{hour:02d}:{rng.randrange(60):02d}:00Z"


def make_orders(params: dict[str, Any]) -> OrdersData:
    """The users and orders of a task: deterministic from the spec's params."""
    rng = random.Random(f"{params['seed']}:orders")
    month = str(params["month"])
    email, name = str(params["email"]), str(params.get("name", "Li Wei"))
    local, _, domain = email.partition("@")
    people = [(name, email)]
    # Same name, near-identical e-mail: only the exact address is the customer.
    people.append((name, f"{local.replace('.', '')}@{domain}"))
    people += [
        (n, f"{n.lower().replace(' ', '.')}@{domain}")
        for n in _NAMES[: max(0, int(params.get("users", 6)) - 2)]
    ]
    users: list[dict[str, Any]] = [
        {
            "id": f"U{100000 + rng.randrange(900000)}",
            "external_id": f"CUST-{rng.randrange(10**4):04d}-{rng.choice('ABCD')}",
            "name": person,
            "email": address,
            "tier": rng.choice(("gold", "silver", None)),
            "created_at": f"2023-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
            "deleted_at": None,
            "phone": None,
            "preferences_json": json.dumps({"newsletter": None, "language": None, "sms": False}),
        }
        for person, address in people
    ]
    target = users[0]["id"]
    top = round(rng.uniform(1400.0, 1900.0), 2)  # the right answer's amount
    orders: list[dict[str, Any]] = []
    for user in users:
        for m in (_shift(month, -1), month, _shift(month, 1)):
            for _ in range(int(params.get("orders", 6))):
                status = rng.choice(("paid", "shipped", "delivered", "delivered", "refunded"))
                amount = round(rng.uniform(12.0, top * 0.6), 2)
                orders.append(_order(rng, user["id"], _when(rng, m), amount, status=status))
    answer = _order(rng, target, _when(rng, month, hour=14), top, status="delivered")
    gross = _order(
        rng,
        target,
        _when(rng, month),
        round(top * 0.93, 2),
        status="delivered",
        coupon=("VIP300", 300.0),
    )
    refunded = _order(rng, target, _when(rng, month), round(top * 1.4, 2), status="refunded")
    cancelled = _order(rng, target, _when(rng, month), round(top * 1.15, 2), status="cancelled")
    # Larger orders just outside the month: minutes after it ends, and on its eve.
    after = _order(rng, target, f"{_shift(month, 1)}-01T00:07:00Z", top * 1.2, status="delivered")
    before = _order(
        rng,
        target,
        _when(rng, _shift(month, -1), day=_last_day(_shift(month, -1)), hour=23),
        top * 1.1,
        status="paid",
    )
    orders += [answer, gross, refunded, cancelled, after, before]
    seen: set[str] = set()
    for o in orders:  # order ids are random: make them unique, deterministically
        while o["id"] in seen:
            o["id"] = f"{o['id'][:-4]}{rng.randrange(10**4):04d}"
        seen.add(o["id"])
    orders.sort(key=lambda o: (str(o["created_at"]), str(o["id"])))
    return OrdersData(
        users=users,
        orders=orders,
        user_id=target,
        answer_id=answer["id"],
        answer_amount=answer["amount"],
        refunded_id=refunded["id"],
        cancelled_id=cancelled["id"],
        gross_id=gross["id"],
    )


# ---------------------------------------------------------------- state


class OrdersState(AgentState):
    """The card of an orders task: who, which orders, and the answer."""

    email: str = ""
    """The customer's e-mail (set by the environment's ``initial``)."""
    month: str = ""
    """``YYYY-MM`` (set by the environment's ``initial``)."""
    user_id: str | None = None
    orders_ref: str | None = None
    """Artifact ref of the raw ``list_orders`` output (never copied into the state)."""
    order_count: int | None = None
    excluded: list[str] = Field(default_factory=list)
    """The month's refunded or cancelled orders (they do not count)."""
    order_id: str | None = None
    amount: float | None = None
    answered: bool = False


# ---------------------------------------------------------------- the task


class _Task:
    """One built orders task: its database, its tools, and the re-checks verify and
    check share. The tools are bound methods with plain keyword signatures."""

    def __init__(self, params: dict[str, Any], root: Path) -> None:
        self.params = params
        self.email = str(params["email"])
        self.month = str(params["month"])
        self.root = root
        self.db_path = root / DB
        self.answer_path = root / ANSWER
        self.data = make_orders(params)

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.db_path)) as conn:
            conn.row_factory = sqlite3.Row
            with conn:
                yield conn

    def write_files(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.db_path.unlink(missing_ok=True)
        self.answer_path.unlink(missing_ok=True)
        user_columns = tuple(self.data.users[0])
        with self.connect() as conn:
            conn.executescript(_SCHEMA)
            conn.executemany(
                f"INSERT INTO users ({', '.join(user_columns)}) "
                f"VALUES ({', '.join('?' for _ in user_columns)})",
                [tuple(u[c] for c in user_columns) for u in self.data.users],
            )
            conn.executemany(
                f"INSERT INTO orders ({', '.join(_ORDER_COLUMNS)}) "
                f"VALUES ({', '.join('?' for _ in _ORDER_COLUMNS)})",
                [tuple(o[c] for c in _ORDER_COLUMNS) for o in self.data.orders],
            )

    # ---- tools

    def find_user(self, email: str) -> dict[str, Any]:
        """Look a customer up by exact e-mail address (returns the user record)."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT * FROM users WHERE lower(email) = lower(?)", (email.strip(),)
            ).fetchone()
        if row is None:
            raise LookupError(f"no user with e-mail {email!r}")
        user = dict(row)
        user["preferences"] = json.loads(user.pop("preferences_json") or "null")
        user["addresses"] = [{"type": "billing", "line2": None, "vat_id": None}]
        user["marketing"] = {"segment": None, "consent_at": None}
        return user

    def list_orders(self, user_id: str, month: str) -> list[dict[str, Any]]:
        """All orders of a user placed in a month (YYYY-MM), every status, oldest first."""
        if not re.fullmatch(r"\d{4}-\d{2}", month):
            raise ValueError(f"month must look like 2025-07, not {month!r}")
        with self.connect() as conn:
            if conn.execute("SELECT 1 FROM users WHERE id = ?", (user_id,)).fetchone() is None:
                raise LookupError(f"no user {user_id!r}")
            rows = conn.execute(
                "SELECT * FROM orders WHERE user_id = ? AND substr(created_at, 1, 7) = ? "
                "ORDER BY created_at, id",
                (user_id, month),
            ).fetchall()
        out: list[dict[str, Any]] = []
        for row in rows:
            order = dict(row)
            for column in ("items_json", "shipping_json", "payment_json", "notes_json"):
                raw = order.pop(column)
                order[column.removesuffix("_json")] = None if raw is None else json.loads(raw)
            out.append(order)
        return out

    def write_answer(self, order_id: str, amount: float) -> str:
        """Write answer.json with the order id and its amount."""
        data = {"order_id": order_id.strip(), "amount": round(float(amount), 2)}
        self.answer_path.write_text(json.dumps(data), encoding="utf-8")
        return f"answer.json: {data['order_id']} {data['amount']:.2f}"

    # ---- independent re-checks (straight from the database and the file)

    def db_user_id(self, email: str) -> str | None:
        with self.connect() as conn:
            row = conn.execute(
                "SELECT id FROM users WHERE lower(email) = lower(?)", (email,)
            ).fetchone()
        return None if row is None else str(row["id"])

    def db_month(self, user_id: str | None, month: str) -> list[dict[str, Any]]:
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT id, status, amount, amount_gross FROM orders "
                "WHERE user_id = ? AND substr(created_at, 1, 7) = ? ORDER BY id",
                (user_id, month),
            ).fetchall()
        return [dict(r) for r in rows]

    def db_largest(self, user_id: str | None, month: str) -> tuple[str, float] | None:
        """The right answer, by SQL: the largest counting order of the month by amount."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT id, amount FROM orders WHERE user_id = ? "
                "AND substr(created_at, 1, 7) = ? AND status NOT IN (?, ?) "
                "ORDER BY amount DESC, id LIMIT 1",
                (user_id, month, *EXCLUDED_STATUSES),
            ).fetchone()
        return None if row is None else (str(row["id"]), float(row["amount"]))

    def order(self, order_id: str) -> dict[str, Any] | None:
        with self.connect() as conn:
            row = conn.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
        return None if row is None else dict(row)

    def answer(self) -> tuple[dict[str, Any], str]:
        """answer.json and, when it cannot be read, why."""
        try:
            data = json.loads(self.answer_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError) as exc:
            return {}, f"answer.json unreadable: {type(exc).__name__}"
        if not isinstance(data, dict):
            return {}, "answer.json is not an object"
        if not isinstance(data.get("order_id"), str) or not isinstance(
            data.get("amount"), int | float
        ):
            return {}, "answer.json needs a string order_id and a number amount"
        return data, ""

    def why_wrong(self, order_id: str, user_id: str | None) -> str:
        """Why ``order_id`` is not the answer, from its row in the database."""
        row = self.order(order_id)
        if row is None:
            return f"{order_id} is not an order"
        if row["user_id"] != user_id or not str(row["created_at"]).startswith(self.month):
            return f"{order_id} is not an order of {user_id} placed in {self.month}"
        if row["status"] in EXCLUDED_STATUSES:
            return f"{order_id} is {row['status']}: it does not count"
        counting = [
            r for r in self.db_month(user_id, self.month) if r["status"] not in EXCLUDED_STATUSES
        ]
        if max(counting, key=lambda r: float(r["amount_gross"]))["id"] == order_id:
            return f"{order_id} is the largest by amount_gross, not by amount"
        return f"{order_id} is not the largest counting order by amount"

    def amount_problem(self, amount: Any, order_id: str) -> str:
        row = self.order(order_id)
        if row is None or not isinstance(amount, int | float):
            return f"amount {amount!r} cannot be checked"
        if abs(float(amount) - float(row["amount"])) <= 0.005:
            return ""
        if abs(float(amount) - float(row["amount_gross"])) <= 0.005:
            return f"{amount} is {order_id}'s amount_gross, not its amount {row['amount']}"
        return f"{amount} is not {order_id}'s amount {row['amount']}"

    def check(self, final_state: AgentState) -> list[CheckResult]:
        """The final checks, on answer.json: valid whatever state class a variant used."""
        data, unreadable = self.answer()
        got_id, got_amount = data.get("order_id"), data.get("amount")
        want_id, want_amount = self.data.answer_id, self.data.answer_amount
        excluded = {o["id"]: o["status"] for o in self.data.month_orders(self.month)}
        trap = excluded.get(str(got_id)) in EXCLUDED_STATUSES
        ok_amount = isinstance(got_amount, int | float) and abs(got_amount - want_amount) <= 0.005
        return [
            CheckResult("answer_written", not unreadable, unreadable),
            CheckResult(
                "answer_order",
                got_id == want_id,
                unreadable
                or (
                    f"{got_id}: {self.why_wrong(str(got_id), self.data.user_id)}; "
                    f"expected {want_id}"
                    if got_id != want_id
                    else ""
                ),
            ),
            CheckResult(
                "answer_amount",
                ok_amount,
                unreadable or (f"amount {got_amount}, expected {want_amount:.2f}"),
            ),
            CheckResult(
                "trap_refunded_skipped",
                not trap,
                f"{got_id} is {excluded.get(str(got_id))} and does not count" if trap else "",
            ),
        ]


# ---------------------------------------------------------------- skills


def _skill_library(task: _Task) -> SkillRegistry:
    """The verified skills, in plan order: "refunded or cancelled do not count" lives here."""
    skills = SkillRegistry()
    _add_identify_user(skills, task)
    _add_fetch_orders(skills, task)
    _add_pick_largest(skills, task)
    _add_write_answer(skills, task)
    return skills


def _add_identify_user(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="identifying",
        outputs=["user_id"],
        reads=["email"],
        tools=["find_user"],
        when=lambda s: s.user_id is None,
    )
    def identify_user(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Find the customer's user id from their e-mail."""
        user = ctx.call("find_user", email=state.email)
        return Outcome(
            writes={"user_id": user["id"]},
            summary=f"{state.email} is {user['id']}",
            evidence=[ctx.evidence(f"{state.email} -> {user['id']} ({user['name']})")],
        )

    @identify_user.verifier
    def _user_right(state: OrdersState, outcome: Outcome) -> Verdict:
        want = task.db_user_id(state.email)
        if want is None or state.user_id != want:
            return Verdict.failed(
                f"the user with e-mail {state.email} is {want}, not {state.user_id}"
            )
        return Verdict.passed()


def _add_fetch_orders(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="querying",
        outputs=["orders_ref", "order_count", "excluded"],
        reads=["user_id", "month"],
        tools=["list_orders"],
        when=lambda s: s.user_id is not None and s.orders_ref is None,
    )
    def fetch_orders(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
        """List the customer's orders of the month; keep the raw list as an artifact."""
        orders = ctx.call("list_orders", user_id=state.user_id, month=state.month)
        excluded = sorted(o["id"] for o in orders if o["status"] in EXCLUDED_STATUSES)
        return Outcome(
            writes={
                "orders_ref": ctx.calls[-1].ref,
                "order_count": len(orders),
                "excluded": excluded,
            },
            summary=f"{len(orders)} orders in {state.month}, {len(excluded)} do not count",
            evidence=[ctx.evidence(f"{len(orders)} orders of {state.user_id} in {state.month}")],
        )

    @fetch_orders.verifier
    def _orders_right(state: OrdersState, outcome: Outcome) -> Verdict:
        rows = task.db_month(state.user_id, state.month)
        excluded = sorted(r["id"] for r in rows if r["status"] in EXCLUDED_STATUSES)
        problems: list[str] = []
        if not state.orders_ref:
            problems.append("no artifact of the order list")
        if state.order_count != len(rows):
            problems.append(f"{state.order_count} orders noted, the month has {len(rows)}")
        if state.excluded != excluded:
            problems.append(f"excluded {state.excluded}, refunded or cancelled are {excluded}")
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()


def _add_pick_largest(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="analyzing",
        outputs=["order_id", "amount"],
        reads=["orders_ref", "excluded"],
        when=lambda s: s.orders_ref is not None and s.order_id is None,
    )
    def pick_largest(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Pick the largest order by amount among those that count (not refunded/cancelled)."""
        assert state.orders_ref is not None
        orders = ctx.artifact_json(state.orders_ref)
        counting = [o for o in orders if o["status"] not in EXCLUDED_STATUSES]
        if not counting:
            raise LookupError(f"no counting order in {state.month}")
        best = max(counting, key=lambda o: (float(o["amount"]), o["id"]))
        return Outcome(
            writes={"order_id": best["id"], "amount": float(best["amount"])},
            summary=f"largest counting order: {best['id']} ({best['amount']:.2f})",
        )

    @pick_largest.verifier
    def _largest_right(state: OrdersState, outcome: Outcome) -> Verdict:
        want = task.db_largest(state.user_id, state.month)
        if want is None:
            return Verdict.failed(f"{state.user_id} has no counting order in {state.month}")
        if state.order_id != want[0]:
            return Verdict.failed(task.why_wrong(str(state.order_id), state.user_id))
        problem = task.amount_problem(state.amount, want[0])
        return Verdict.failed(problem) if problem else Verdict.passed()


def _add_write_answer(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="answering",
        outputs=["answered"],
        reads=["order_id", "amount"],
        tools=["write_answer"],
        # One attempt: a retry writes the same file again, and would make the refused
        # answer the "previous" content that rollback restores.
        max_retries=0,
        when=lambda s: s.order_id is not None and not s.answered,
    )
    def write_answer(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Write answer.json with the chosen order's id and amount."""
        previous = (
            task.answer_path.read_text(encoding="utf-8") if task.answer_path.exists() else None
        )
        result = ctx.call("write_answer", order_id=state.order_id, amount=state.amount)
        return Outcome(
            writes={"answered": True},
            summary=str(result),
            evidence=[ctx.evidence(str(result))],
            value={"previous": previous},
        )

    @write_answer.verifier
    def _answer_right(state: OrdersState, outcome: Outcome) -> Verdict:
        data, unreadable = task.answer()
        if unreadable:
            return Verdict.failed(unreadable)
        want = task.db_largest(state.user_id, state.month)
        problems: list[str] = []
        if want is None or data["order_id"] != want[0]:
            problems.append(task.why_wrong(str(data["order_id"]), state.user_id))
        elif problem := task.amount_problem(data["amount"], want[0]):
            problems.append(problem)
        if (data["order_id"], data["amount"]) != (state.order_id, state.amount):
            problems.append("answer.json differs from the card")
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()

    @write_answer.rollbacker
    def _unanswer(state: OrdersState, outcome: Outcome | None, ctx: SkillContext) -> None:
        value = outcome.value if outcome is not None else None
        if not isinstance(value, dict):
            return  # run failed before writing: nothing to undo
        if value["previous"] is None:
            task.answer_path.unlink(missing_ok=True)
        else:
            task.answer_path.write_text(value["previous"], encoding="utf-8")


# ---------------------------------------------------------------- plans


def _plans(task: _Task) -> tuple[list[Action], list[Action], list[dict[str, Any]]]:
    """The oracle's skills plan, its tools plan, and the facts after each skills step."""
    data, month = task.data, task.month
    answer = {"order_id": data.answer_id, "amount": data.answer_amount}
    done = f"largest counting order of {month}: {data.answer_id} ({data.answer_amount:.2f})"
    month_orders = data.month_orders(month)
    excluded = sorted(o["id"] for o in month_orders if o["status"] in EXCLUDED_STATUSES)
    skills_plan: list[Action] = [
        CallSkill(skill="identify_user", reason="orders are listed by user id"),
        CallSkill(skill="fetch_orders", reason="the month's orders"),
        CallSkill(skill="pick_largest", reason="refunded and cancelled orders do not count"),
        CallSkill(skill="write_answer", reason="the answer is known"),
        Finish(summary=done),
    ]
    identified: dict[str, Any] = {"user_id": data.user_id}
    fetched = {**identified, "order_count": len(month_orders), "excluded": excluded}
    picked = {**fetched, **answer}
    answered = {**picked, "answered": True}
    facts: list[dict[str, Any]] = [identified, fetched, picked, answered, answered]
    tools_plan: list[Action] = [
        CallSkill(skill="tool_find_user", params={"email": task.email}, reason="user id first"),
        CallSkill(
            skill="tool_list_orders",
            params={"user_id": data.user_id, "month": month},
            reason="the month's orders",
        ),
        CallSkill(
            skill="remember",
            params={"key": "largest", "value": answer},
            reason=f"largest by amount once {data.refunded_id} (refunded) and "
            f"{data.cancelled_id} (cancelled) are left out",
        ),
        CallSkill(skill="tool_write_answer", params=answer, reason="write the answer"),
        Finish(summary=done),
    ]
    return skills_plan, tools_plan, facts


MACHINE = StateMachine(
    {
        "init": ["identifying"],
        "identifying": ["querying"],
        "querying": ["analyzing"],
        "analyzing": ["answering"],
        "answering": ["done"],
        "done": [],
    },
    initial="init",
)
"""init -> identifying -> querying -> analyzing -> answering -> done."""


def _checked(spec: TaskSpec) -> dict[str, Any]:
    """The spec's params, or a :class:`UsageError` naming what is missing or malformed."""
    params = dict(spec.params)
    missing = [k for k in ("seed", "email", "month") if k not in params]
    if missing:
        raise UsageError(f"orders task {spec.id!r}: params need {', '.join(missing)}")
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", str(params["month"])):
        raise UsageError(f"orders task {spec.id!r}: month must be YYYY-MM, not {params['month']!r}")
    if "@" not in str(params["email"]):
        raise UsageError(f"orders task {spec.id!r}: {params['email']!r} is not an e-mail")
    return params


class OrdersFamily:
    """Builds an orders task: database, tools, skills, machine, plans and checks."""

    name = "orders"

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        task = _Task(_checked(spec), root)
        if fresh:
            task.write_files()
        skills_plan, tools_plan, facts = _plans(task)
        return Environment(
            root=root,
            state_type=OrdersState,
            machine=MACHINE,
            tools={
                "find_user": task.find_user,
                "list_orders": task.list_orders,
                "write_answer": task.write_answer,
            },
            skills=_skill_library(task),
            plan_skills=skills_plan,
            plan_tools=tools_plan,
            check=task.check,
            expected_facts=facts,
            initial={"email": task.email, "month": task.month},
            effect_tools=frozenset({"write_answer"}),
        )
