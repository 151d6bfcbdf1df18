"""The ``ticket`` family: triage one helpdesk ticket in a SQLite database (seed 000).

The environment is ``helpdesk.db`` with three tables: ``tickets`` (the ticket to
triage among a few others), ``kb`` (the knowledge base: one current and one
superseded article per category) and ``replies``. The task, for one ticket: set
its category and priority, post one reply that quotes the current knowledge-base
solution for the category word for word, then close it. The ticket already holds
everything needed (there is no user to ask in an evaluation). It is built to
catch exactly what a transcript-driven agent gets wrong:

* **A misleading keyword**: the ticket is an e-mail whose requester's own words
  are about one category, but the subject, the signature and a long quoted thread
  (an older, resolved ticket) are full of another category's keywords, so naive
  keyword matching over the whole text picks the wrong one (:func:`naive_category`
  versus :func:`classify`).
* **A rule stated once, at the start**: the priority follows the form fields
  (``kind``, ``users_affected``, ``blocking``) by the rule in the constraints
  (P1 only for an outage affecting several users), not what the requester shouts
  in the subject or their own ``reported_priority``.
* **A constraint a late step can break**: the requester asks for a refund (or a
  credit); the reply, written three steps later, must not mention one.
* **Near-identical knowledge-base articles**: ``search_kb`` returns the
  superseded article first; only the current one (``superseded_by`` empty) counts.
* **Real effects**: ``update_ticket``, ``post_reply`` and ``close_ticket`` change
  the database; a resumed run must never post a reply twice (``reply_with_kb``
  has ``effects=True`` and a probe).

Everything is derived from ``spec.params`` (``seed``, ``ticket_id``, ``scenario``,
``noise_tickets``); the final checks read the database only.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.errors import UsageError
from skillstate.eval.tasks import CheckResult, Environment, TaskSpec
from skillstate.events import Verdict
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

__all__ = [
    "CATEGORIES",
    "DB",
    "KEYWORDS",
    "MACHINE",
    "PRIORITIES",
    "SCENARIOS",
    "TicketFamily",
    "TicketState",
    "TriageParams",
    "classify",
    "forbidden_words",
    "naive_category",
    "own_message",
    "priority_rule",
    "reply_body",
]

DB = "helpdesk.db"
Category = Literal["network", "hardware", "account", "software"]
Priority = Literal["P1", "P2", "P3", "P4"]
Kind = Literal["incident", "request"]
CATEGORIES: tuple[str, ...] = get_args(Category)
PRIORITIES: tuple[str, ...] = get_args(Priority)
_NOW = "2026-03-03T09:30:00Z"
"""The helpdesk's clock: fixed, so two runs leave byte-identical databases."""

KEYWORDS: dict[str, tuple[str, ...]] = {
    "network": ("network", "vpn", "wifi", "wi-fi", "internet", "connection", "access point"),
    "hardware": ("laptop", "printer", "screen", "keyboard", "docking station", "monitor"),
    "account": ("password", "log in", "login", "account", "locked", "sso", "sign in"),
    "software": ("crash", "crashes", "install", "reinstall", "application", "excel", "outlook"),
}
_FORBIDDEN = re.compile(r"\b(refund\w*|credit\w*|compensat\w*|reimburs\w*)", re.IGNORECASE)


# ---------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class _Scenario:
    """One ticket to triage: the e-mail's parts and the form fields."""

    category: Category
    """What the requester's own words are about (the right category)."""
    decoy: Category
    """What the subject, signature and quoted thread keep mentioning."""
    kind: Kind
    users_affected: int
    blocking: bool
    reported_priority: Priority
    subject: str
    requester: str
    message: str
    signature: str
    quoted: str

    @property
    def body(self) -> str:
        # Top-posted, as mail clients do: the new words, the signature, then the thread.
        return f"{self.message}\n\n{self.signature}\n\n{self.quoted}"


SCENARIOS: dict[str, _Scenario] = {
    "sso_lockout": _Scenario(
        category="account",
        decoy="network",
        kind="incident",
        users_affected=1,
        blocking=True,
        reported_priority="P1",
        subject="RE: FW: network outage?? cannot get in - URGENT P1",
        requester="Dana Whitfield <dana.whitfield@northwind.example>",
        message=(
            "Hi team,\n\nsince 08:10 this morning I cannot log in to anything: the SSO page says "
            "my account is locked after too many attempts, and the password I set yesterday is "
            "refused. My colleagues next to me are fine, it is only me, but I cannot work at "
            "all until this is fixed.\n\nThis is a P1 for me!! Given the lost day I also expect "
            "a refund of this month's service fee for my team.\n\nThanks,\nDana"
        ),
        signature=(
            "--\nDana Whitfield\nSenior Engineer, Network Operations | Northwind Traders\n"
            "Office +1 555 0142 | VPN and Wi-Fi hotline: ext. 4410\n"
            '"Keep the network up, keep the business up."\n'
            "This e-mail and its attachments are confidential. If you received it by mistake, "
            "tell the sender and delete it; do not forward it over an untrusted connection."
        ),
        quoted=(
            "On Mon, 2 Mar 2026 at 17:02, IT Service Desk <servicedesk@northwind.example> wrote:\n"
            "> Hello Dana,\n"
            "> your ticket T-1988 (Wi-Fi drops on floor 3) is resolved: the access point\n"
            "> was replaced and the network is stable again. If the VPN connection drops\n"
            "> again, restart the VPN client and renew the DHCP lease before you call us.\n"
            "> Network status page: status.northwind.example (updated every 5 minutes).\n"
            ">\n"
            "> On Fri, 27 Feb 2026 at 09:41, Dana Whitfield wrote:\n"
            "> > The wifi and the internet connection keep dropping on floor 3, the VPN\n"
            "> > disconnects every few minutes and the shared network drive is unreachable.\n"
            "> > Is there a network outage? The whole floor is affected, please check the\n"
            "> > access point near room 3.14, its light is blinking orange.\n"
            "> >\n"
            "> > --\n"
            "> > Dana Whitfield, Network Operations\n"
            ">\n"
            "> --\n"
            "> IT Service Desk | Northwind Traders | ext. 1000"
        ),
    ),
    "vpn_outage": _Scenario(
        category="network",
        decoy="hardware",
        kind="incident",
        users_affected=14,
        blocking=True,
        reported_priority="P3",
        subject="RE: laptop / docking station loan - and now nothing works in Lyon",
        requester="Marc Aubert <marc.aubert@northwind.example>",
        message=(
            "Hello,\n\nsince the 09:00 maintenance nobody in the Lyon office can reach the VPN: "
            "all 14 of us get 'connection timed out', and the internet only works on the guest "
            "wifi. We cannot reach any internal system.\n\nNot urgent for me personally, but "
            "could we get a credit on our service contract for the downtime?\n\nMarc"
        ),
        signature=(
            "--\nMarc Aubert\nHardware Asset Coordinator | laptop, monitor and printer loans\n"
            "Northwind Traders, Lyon | +33 4 72 00 00 00\n"
            "Need a spare laptop, keyboard or docking station? Book it at assets.northwind.example"
        ),
        quoted=(
            "On Tue, 24 Feb 2026 at 11:20, IT Service Desk <servicedesk@northwind.example> wrote:\n"
            "> Hello Marc,\n"
            "> the replacement laptop and the docking station are ready at the service desk.\n"
            "> The old laptop's screen and keyboard will be repaired by the vendor; the\n"
            "> second monitor you asked for is on back-order, and the printer on floor 2\n"
            "> has a new drum. Please bring the laptop charger back with the docking station.\n"
            ">\n"
            "> On Mon, 23 Feb 2026 at 16:05, Marc Aubert wrote:\n"
            "> > My laptop screen flickers when it sits in the docking station, the keyboard\n"
            "> > misses keys and the printer jams. Can I borrow a laptop and a monitor?\n"
            ">\n"
            "> --\n"
            "> IT Service Desk | Northwind Traders | ext. 1000"
        ),
    ),
}
"""The tickets a spec can ask for (``params.scenario``)."""

# (article_id, category, title, solution, superseded_by): each category's older
# article comes first and reads almost the same as the current one.
_KB: tuple[tuple[str, str, str, str, str | None], ...] = (
    (
        "KB-101",
        "network",
        "VPN or Wi-Fi drops",
        "Restart the VPN client and renew the DHCP lease, then call the network team.",
        "KB-117",
    ),
    (
        "KB-117",
        "network",
        "VPN or Wi-Fi drops (2026)",
        "Restart the VPN client, renew the DHCP lease, then check the access point status at "
        "status.northwind.example before escalating to the network team.",
        None,
    ),
    (
        "KB-203",
        "hardware",
        "Faulty device",
        "Run the vendor diagnostics and send the device back to the vendor.",
        "KB-208",
    ),
    (
        "KB-208",
        "hardware",
        "Faulty device (2026)",
        "Run the vendor diagnostics from the boot menu (F12), note the error code, and swap "
        "the device from the spare pool at the service desk.",
        None,
    ),
    (
        "KB-305",
        "account",
        "Locked account",
        "Verify the requester's identity, reset the password in the admin console and e-mail "
        "the new password to the requester.",
        "KB-311",
    ),
    (
        "KB-311",
        "account",
        "Locked account (2026)",
        "Verify the requester's identity by call-back, clear the lockout counter in the "
        "identity portal, then have the requester set a new password at "
        "id.northwind.example/reset.",
        None,
    ),
    (
        "KB-402",
        "software",
        "Application crashes",
        "Reinstall the application and restart the computer.",
        "KB-409",
    ),
    (
        "KB-409",
        "software",
        "Application crashes (2026)",
        "Uninstall the application, install the current release from the Software Center and "
        "clear the local cache folder.",
        None,
    ),
)

# Other tickets in the queue: (subject, body, category, kind).
_NOISE = (
    ("Printer on floor 2 jams", "The printer jams on every second page.", "hardware", "incident"),
    ("Excel crashes on open", "Excel crashes when I open the budget file.", "software", "incident"),
    ("New starter account", "Please create an account for our new intern.", "account", "request"),
    ("Slow Wi-Fi in room 4.02", "The wifi is slow in the big meeting room.", "network", "incident"),
    ("Second monitor", "Could I get a second monitor for my desk?", "hardware", "request"),
    ("Outlook asks for password", "Outlook keeps asking for my password.", "account", "incident"),
    ("Install Visio", "Please install Visio on my laptop.", "software", "request"),
    ("VPN slow from home", "The VPN is slow from home in the evening.", "network", "incident"),
)

_TICKET_COLUMNS = (
    "id",
    "subject",
    "requester",
    "status",
    "kind",
    "reported_priority",
    "users_affected",
    "blocking",
    "category",
    "priority",
    "created_at",
    "body",
    "assignee",
    "asset_tag",
    "location",
    "cc",
    "sla_due_at",
    "merged_into",
    "closed_at",
)

_SCHEMA = f"""
CREATE TABLE tickets (
    id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    requester TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('open', 'pending', 'closed')),
    kind TEXT NOT NULL CHECK (kind IN ('incident', 'request')),
    reported_priority TEXT,
    users_affected INTEGER,
    blocking INTEGER,
    category TEXT CHECK (category IS NULL OR category IN ({", ".join(map(repr, CATEGORIES))})),
    priority TEXT CHECK (priority IS NULL OR priority IN ({", ".join(map(repr, PRIORITIES))})),
    created_at TEXT NOT NULL,
    body TEXT NOT NULL,
    assignee TEXT, asset_tag TEXT, location TEXT, cc TEXT,
    sla_due_at TEXT, merged_into TEXT, closed_at TEXT
);
CREATE TABLE kb (
    article_id TEXT PRIMARY KEY,
    category TEXT NOT NULL,
    title TEXT NOT NULL,
    solution TEXT NOT NULL,
    superseded_by TEXT,
    updated_at TEXT NOT NULL
);
CREATE TABLE replies (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id TEXT NOT NULL REFERENCES tickets (id),
    author TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


# ---------------------------------------------------------------- the domain rules


def _hits(text: str) -> dict[str, list[str]]:
    """Each category's keywords found in ``text``, once per occurrence."""
    lowered = text.lower()
    found: dict[str, list[str]] = {}
    for category, words in KEYWORDS.items():
        found[category] = [
            word
            for word in words
            for _ in re.finditer(rf"(?<![a-z0-9]){re.escape(word)}(?![a-z0-9])", lowered)
        ]
    return found


def _best(text: str) -> str | None:
    hits = _hits(text)
    best = max(CATEGORIES, key=lambda c: len(hits[c]))
    return best if hits[best] else None


def naive_category(subject: str, body: str) -> str | None:
    """Keyword matching over the whole ticket: what a careless triage would pick."""
    return _best(f"{subject}\n{body}")


def own_message(body: str) -> str:
    """The requester's own words: the body up to the signature or the quoted thread."""
    kept: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped in {"--", "-- "} or stripped.startswith(">"):
            break
        if re.match(r"^On .+ wrote:$", stripped):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def classify(body: str) -> str | None:
    """The category of a ticket: keyword matching over the requester's own words only."""
    return _best(own_message(body))


def priority_rule(kind: str, users_affected: int, blocking: bool) -> Priority:
    """The constraints' rule: P1 only for an outage of several users, then P2, P3; P4 requests."""
    if kind == "request":
        return "P4"
    if users_affected >= 2:
        return "P1"
    return "P2" if blocking else "P3"


def _why_priority(kind: str, users_affected: int, blocking: bool) -> str:
    if kind == "request":
        return "a request"
    if users_affected >= 2:
        return f"an outage affecting {users_affected} users"
    return f"one user who {'cannot' if blocking else 'can still'} work"


def forbidden_words(text: str) -> list[str]:
    """Words a reply must never contain (refunds, credits, compensation)."""
    return [m.group(0) for m in _FORBIDDEN.finditer(text)]


def reply_body(ticket_id: str, category: str, priority: str, article_id: str, solution: str) -> str:
    """The reply the oracle posts (and ``reply_with_kb`` writes): short, KB quoted verbatim."""
    return (
        f"Hello, we triaged ticket {ticket_id} as {category}, priority {priority}. "
        f'Knowledge-base article {article_id} says: "{solution}" '
        "Reply to this message if it does not help. IT Service Desk"
    )


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _one_line(text: str, limit: int = 600) -> str:
    flat = _normalized(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ---------------------------------------------------------------- data


def _noise_tickets(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The other tickets of the queue, deterministic from the seed (never to be touched)."""
    rng = random.Random(f"{params['seed']}:noise")
    number = int(str(params["ticket_id"]).rsplit("-", 1)[-1])
    templates = list(_NOISE)
    rng.shuffle(templates)
    rows: list[dict[str, Any]] = []
    for k in range(int(params.get("noise_tickets", 6))):
        subject, body, category, kind = templates[k % len(templates)]
        status = rng.choice(("open", "pending", "closed", "closed"))
        users, blocking = rng.randint(1, 3), rng.random() < 0.3
        triaged = status != "open"
        rows.append(
            {
                "id": f"T-{number - k - 1}",
                "subject": subject,
                "requester": f"user{rng.randrange(100, 999)}@northwind.example",
                "status": status,
                "kind": kind,
                "reported_priority": rng.choice(("P1", "P2", "P3", None)),
                "users_affected": users,
                "blocking": int(blocking),
                "category": category if triaged else None,
                "priority": priority_rule(kind, users, blocking) if triaged else None,
                "created_at": f"2026-03-0{1 + k % 2}T{8 + k:02d}:{rng.randrange(60):02d}:00Z",
                "body": f"{body}\n\n--\nsent from my phone",
                "assignee": rng.choice((None, None, "j.doe", "a.lee")),
                "asset_tag": None if rng.random() < 0.7 else f"NW-{rng.randrange(10**5):05d}",
                "location": rng.choice((None, "Paris", "Lyon", None)),
                "cc": None,
                "sla_due_at": None,
                "merged_into": None,
                "closed_at": "2026-03-02T18:00:00Z" if status == "closed" else None,
            }
        )
    return rows


def _target_row(params: dict[str, Any]) -> dict[str, Any]:
    scenario = SCENARIOS[str(params["scenario"])]
    return {
        "id": str(params["ticket_id"]),
        "subject": scenario.subject,
        "requester": scenario.requester,
        "status": "open",
        "kind": scenario.kind,
        "reported_priority": scenario.reported_priority,
        "users_affected": scenario.users_affected,
        "blocking": int(scenario.blocking),
        "category": None,
        "priority": None,
        "created_at": "2026-03-03T08:17:00Z",
        "body": scenario.body,
        "assignee": None,
        "asset_tag": None,
        "location": None,
        "cc": None,
        "sla_due_at": None,
        "merged_into": None,
        "closed_at": None,
    }


# ---------------------------------------------------------------- state


class TicketState(AgentState):
    """The card of a ticket task: what was read, decided and done."""

    ticket_id: str = ""
    """The ticket to triage (set by the environment's ``initial``)."""
    message: str | None = None
    """The requester's own words, without the quoted thread and the signature."""
    kind: Kind | None = None
    users_affected: int | None = None
    blocking: bool | None = None
    """The requester cannot work at all."""
    category: Category | None = None
    priority: Priority | None = None
    reply_id: int | None = None
    kb_article: str | None = None
    closed: bool = False


class TriageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: Category = Field(description="What the requester's own message is about.")
    priority: Priority = Field(description="By the priority rule of the constraints.")


# ---------------------------------------------------------------- the task


class _Task:
    """One built ticket task: its database, its tools, and the re-checks verify and
    check share. The tools are bound methods with plain keyword signatures."""

    def __init__(self, params: dict[str, Any], root: Path) -> None:
        self.params = params
        self.scenario = SCENARIOS[str(params["scenario"])]
        self.ticket_id = str(params["ticket_id"])
        self.root = root
        self.db_path = root / DB
        self.noise = _noise_tickets(params)
        self.target = _target_row(params)
        self.expected_category: str = self.scenario.category
        self.expected_priority: Priority = priority_rule(
            self.scenario.kind, self.scenario.users_affected, self.scenario.blocking
        )
        article = next(a for a in _KB if a[1] == self.expected_category and a[4] is None)
        self.expected_article, self.expected_solution = article[0], article[3]

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.db_path)) as conn:
            conn.row_factory = sqlite3.Row
            with conn:  # one transaction per use: committed, or rolled back on error
                yield conn

    def write_files(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.db_path.unlink(missing_ok=True)
        rows = sorted([*self.noise, self.target], key=lambda r: str(r["id"]))
        with self.connect() as conn:
            conn.executescript(_SCHEMA)
            conn.executemany(
                f"INSERT INTO tickets ({', '.join(_TICKET_COLUMNS)}) "
                f"VALUES ({', '.join('?' for _ in _TICKET_COLUMNS)})",
                [tuple(r[c] for c in _TICKET_COLUMNS) for r in rows],
            )
            conn.executemany(
                "INSERT INTO kb VALUES (?, ?, ?, ?, ?, ?)",
                [(*a, "2026-01-15" if a[4] is None else "2024-06-01") for a in _KB],
            )
            conn.executemany(
                "INSERT INTO replies (ticket_id, author, body, created_at) VALUES (?, ?, ?, ?)",
                [
                    (r["id"], "servicedesk", f"Fixed: {r['subject'].lower()}.", r["closed_at"])
                    for r in self.noise
                    if r["status"] == "closed"
                ],
            )

    @property
    def seeded_replies(self) -> int:
        return sum(1 for r in self.noise if r["status"] == "closed")

    # ---- tools

    def get_ticket(self, ticket_id: str) -> dict[str, Any]:
        """Read one ticket (all its columns, the full e-mail body included)."""
        row = self.row(ticket_id)
        if row is None:
            raise LookupError(f"no ticket {ticket_id!r}")
        row["blocking"] = None if row["blocking"] is None else bool(row["blocking"])
        row["custom_fields"] = {"vip": None, "cost_center": None, "survey": None}
        return row

    def search_kb(self, category: str) -> list[dict[str, Any]]:
        """The knowledge-base articles of a category, oldest first."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; one of {', '.join(CATEGORIES)}")
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT * FROM kb WHERE category = ? ORDER BY article_id", (category,)
            ).fetchall()
        return [
            {**dict(r), "views": 40 + 7 * i, "tags": [category], "attachments": None, "owner": None}
            for i, r in enumerate(rows)
        ]

    def update_ticket(self, ticket_id: str, category: str, priority: str) -> str:
        """Set a ticket's category and priority."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; one of {', '.join(CATEGORIES)}")
        if priority not in PRIORITIES:
            raise ValueError(f"unknown priority {priority!r}; one of {', '.join(PRIORITIES)}")
        with self.connect() as conn:
            done = conn.execute(
                "UPDATE tickets SET category = ?, priority = ? WHERE id = ?",
                (category, priority, ticket_id),
            ).rowcount
        if not done:
            raise LookupError(f"no ticket {ticket_id!r}")
        return f"{ticket_id}: category={category} priority={priority}"

    def post_reply(self, ticket_id: str, body: str) -> dict[str, Any]:
        """Post a reply to the ticket's requester (an effect: post once per ticket)."""
        if not body.strip():
            raise ValueError("a reply needs a body")
        if self.row(ticket_id) is None:
            raise LookupError(f"no ticket {ticket_id!r}")
        with self.connect() as conn:
            cursor = conn.execute(
                "INSERT INTO replies (ticket_id, author, body, created_at) VALUES (?, ?, ?, ?)",
                (ticket_id, "servicedesk", body.strip(), _NOW),
            )
        return {"reply_id": cursor.lastrowid, "ticket_id": ticket_id, "status": "posted"}

    def close_ticket(self, ticket_id: str) -> str:
        """Close a ticket."""
        with self.connect() as conn:
            done = conn.execute(
                "UPDATE tickets SET status = 'closed', closed_at = COALESCE(closed_at, ?) "
                "WHERE id = ?",
                (_NOW, ticket_id),
            ).rowcount
        if not done:
            raise LookupError(f"no ticket {ticket_id!r}")
        return f"{ticket_id} closed"

    # ---- independent re-checks (straight from the database)

    def row(self, ticket_id: str) -> dict[str, Any] | None:
        with self.connect() as conn:
            found = conn.execute("SELECT * FROM tickets WHERE id = ?", (ticket_id,)).fetchone()
        return None if found is None else dict(found)

    def replies(self, ticket_id: str) -> list[dict[str, Any]]:
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT * FROM replies WHERE ticket_id = ? ORDER BY id", (ticket_id,)
            ).fetchall()
        return [dict(r) for r in rows]

    def kb(self) -> list[dict[str, Any]]:
        with self.connect() as conn:
            return [dict(r) for r in conn.execute("SELECT * FROM kb ORDER BY article_id")]

    def reply_problems(self, category: str | None) -> list[str]:
        """What is wrong with the replies on the ticket, for ``category``."""
        replies = self.replies(self.ticket_id)
        if len(replies) != 1:
            return [f"{self.ticket_id} has {len(replies)} replies, not exactly one"]
        text = _normalized(str(replies[0]["body"]))
        problems = [f"the reply mentions {w!r}" for w in forbidden_words(text)]
        articles = [a for a in self.kb() if a["category"] == category]
        current = [a for a in articles if a["superseded_by"] is None]
        if not current:
            return [*problems, f"no current knowledge-base article for {category!r}"]
        if _normalized(str(current[0]["solution"])) not in text:
            old = [a["article_id"] for a in articles if _normalized(a["solution"]) in text]
            where = f" (it quotes superseded {old[0]})" if old else ""
            problems.append(
                f"the reply does not quote {current[0]['article_id']}, the current "
                f"{category} solution{where}"
            )
        return problems

    def check(self, final_state: AgentState) -> list[CheckResult]:
        """The final checks, on the database only: valid whatever state class a variant used."""
        row = self.row(self.ticket_id) or {}
        category, priority = row.get("category"), row.get("priority")
        replies = self.replies(self.ticket_id)
        texts = [_normalized(str(r["body"])) for r in replies]
        quoted = [t for t in texts if _normalized(self.expected_solution) in t]
        said = sorted({w.lower() for t in texts for w in forbidden_words(t)})
        s = self.scenario
        why = _why_priority(s.kind, s.users_affected, s.blocking)
        touched = self.touched_others()
        return [
            CheckResult(
                "ticket_category",
                category == self.expected_category,
                f"category {category!r}, expected {self.expected_category!r} (the requester's "
                f"own words; the subject, signature and quoted thread are about {s.decoy})",
            ),
            CheckResult(
                "ticket_priority",
                priority == self.expected_priority,
                f"priority {priority!r}, expected {self.expected_priority} ({why}; "
                f"the requester asked for {s.reported_priority})",
            ),
            CheckResult(
                "reply_posted_once",
                len(replies) == 1,
                f"{len(replies)} replies on {self.ticket_id}, expected exactly one",
            ),
            CheckResult(
                "reply_quotes_kb",
                bool(quoted),
                f"no reply quotes {self.expected_article} (the current "
                f"{self.expected_category} solution)"
                if not quoted
                else "",
            ),
            CheckResult(
                "reply_no_refund",
                not said,
                f"a reply mentions {', '.join(said)} (never in a reply)" if said else "",
            ),
            CheckResult(
                "ticket_closed",
                row.get("status") == "closed",
                f"{self.ticket_id} is {row.get('status', 'missing')!r}",
            ),
            CheckResult(
                "other_tickets_untouched",
                not touched,
                f"changed: {', '.join(touched)}" if touched else "",
            ),
        ]

    def touched_others(self) -> list[str]:
        """The other tickets whose row or replies differ from how they were built."""
        changed: list[str] = []
        for want in self.noise:
            got = self.row(str(want["id"]))
            seeded = 1 if want["status"] == "closed" else 0
            if got != want or len(self.replies(str(want["id"]))) != seeded:
                changed.append(str(want["id"]))
        return changed


# ---------------------------------------------------------------- skills


def _skill_library(task: _Task) -> SkillRegistry:
    """The verified skills, in plan order: the triage and reply rules live in their verify."""
    skills = SkillRegistry()
    _add_read_ticket(skills, task)
    _add_triage_ticket(skills, task)
    _add_reply_with_kb(skills, task)
    _add_close_ticket(skills, task)
    return skills


def _add_read_ticket(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="reading",
        outputs=["message", "kind", "users_affected", "blocking"],
        reads=["ticket_id"],
        tools=["get_ticket"],
        when=lambda s: s.message is None,
    )
    def read_ticket(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Read the ticket: the requester's own words (no quoted mail or signature), form fields."""
        row = ctx.call("get_ticket", ticket_id=state.ticket_id)
        return Outcome(
            writes={
                "message": _one_line(own_message(row["body"])),
                "kind": row["kind"],
                "users_affected": row["users_affected"],
                "blocking": bool(row["blocking"]),
            },
            summary=f"{state.ticket_id}: {row['kind']}, {row['users_affected']} user(s)",
            evidence=[ctx.evidence(f"{state.ticket_id} read ({len(row['body'])} chars of mail)")],
        )

    @read_ticket.verifier
    def _read_right(state: TicketState, outcome: Outcome) -> Verdict:
        row = task.row(state.ticket_id)
        if row is None:
            return Verdict.failed(f"no ticket {state.ticket_id!r} in the database")
        want = {
            "message": _one_line(own_message(str(row["body"]))),
            "kind": row["kind"],
            "users_affected": row["users_affected"],
            "blocking": bool(row["blocking"]),
        }
        wrong = [k for k, v in want.items() if getattr(state, k) != v]
        if wrong:
            return Verdict.failed(f"differs from the ticket: {', '.join(wrong)}")
        return Verdict.passed()


def _add_triage_ticket(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="triaging",
        outputs=["category", "priority"],
        reads=["ticket_id", "message", "kind", "users_affected", "blocking"],
        tools=["update_ticket"],
        max_retries=0,  # the same params give the same verdict: retrying cannot help
        when=lambda s: s.message is not None and s.category is None,
    )
    def triage_ticket(state: TicketState, params: TriageParams, ctx: SkillContext) -> Outcome:
        """Set the category (from the requester's own words) and the priority (by the rule)."""
        before = task.row(state.ticket_id) or {}
        result = ctx.call(
            "update_ticket",
            ticket_id=state.ticket_id,
            category=params.category,
            priority=params.priority,
        )
        return Outcome(
            writes={"category": params.category, "priority": params.priority},
            summary=f"{params.category}, {params.priority}",
            evidence=[ctx.evidence(str(result))],
            value={"before": {k: before.get(k) for k in ("category", "priority")}},
        )

    @triage_ticket.verifier
    def _triage_right(state: TicketState, outcome: Outcome) -> Verdict:
        row = task.row(state.ticket_id)
        if row is None:
            return Verdict.failed(f"no ticket {state.ticket_id!r} in the database")
        problems: list[str] = []
        if (row["category"], row["priority"]) != (state.category, state.priority):
            problems.append(f"the database has {row['category']}, {row['priority']}")
        words = own_message(str(row["body"]))
        want = classify(str(row["body"]))
        if state.category != want:
            found = ", ".join(dict.fromkeys(_hits(words).get(str(want), [])))
            problems.append(
                f"the requester's own words are about {want} ({found}), not {state.category}; "
                "the subject, the signature and the quoted thread do not count"
            )
        kind, users, blocking = row["kind"], int(row["users_affected"]), bool(row["blocking"])
        rule = priority_rule(kind, users, blocking)
        if state.priority != rule:
            problems.append(
                f"priority is {rule} for {_why_priority(kind, users, blocking)}, "
                f"not {state.priority}"
            )
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()

    @triage_ticket.rollbacker
    def _untriage(state: TicketState, outcome: Outcome | None, ctx: SkillContext) -> None:
        value = outcome.value if outcome is not None else None
        if not isinstance(value, dict):
            return  # run failed before update_ticket: nothing changed
        before = value["before"]
        with task.connect() as conn:
            conn.execute(
                "UPDATE tickets SET category = ?, priority = ? WHERE id = ?",
                (before["category"], before["priority"], state.ticket_id),
            )


def _add_reply_with_kb(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="replying",
        outputs=["reply_id", "kb_article"],
        reads=["ticket_id", "category", "priority"],
        tools=["search_kb", "post_reply"],
        effects=True,
        max_retries=1,
        when=lambda s: s.category is not None and s.reply_id is None,
    )
    def reply_with_kb(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Post one reply quoting the current knowledge-base solution for the category."""
        articles = ctx.call("search_kb", category=state.category)
        current = next(a for a in articles if a["superseded_by"] is None)
        body = reply_body(
            state.ticket_id,
            str(state.category),
            str(state.priority),
            current["article_id"],
            current["solution"],
        )
        posted = ctx.call("post_reply", ticket_id=state.ticket_id, body=body)
        return _reply_outcome(int(posted["reply_id"]), str(current["article_id"]), ctx)

    @reply_with_kb.prober
    def _reply_already_there(
        state: TicketState, params: NoParams, ctx: SkillContext
    ) -> Outcome | None:
        articles = ctx.call("search_kb", category=state.category)
        current = next(a for a in articles if a["superseded_by"] is None)
        solution = _normalized(current["solution"])
        # Newest first: a crashed run's reply is the latest one that quotes the article.
        for reply in reversed(task.replies(state.ticket_id)):
            if solution in _normalized(str(reply["body"])):
                return _reply_outcome(int(reply["id"]), str(current["article_id"]), ctx)
        return None

    @reply_with_kb.verifier
    def _reply_right(state: TicketState, outcome: Outcome) -> Verdict:
        problems = task.reply_problems(state.category)
        replies = task.replies(state.ticket_id)
        if replies and replies[-1]["id"] != state.reply_id:
            problems.append(f"reply {state.reply_id} is not the ticket's reply")
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()

    @reply_with_kb.rollbacker
    def _unpost(state: TicketState, outcome: Outcome | None, ctx: SkillContext) -> None:
        # Only the reply this step posted: anyone else's stays, for the checks to report.
        value = outcome.value if outcome is not None else None
        if isinstance(value, dict) and isinstance(value.get("reply_id"), int):
            with task.connect() as conn:
                conn.execute("DELETE FROM replies WHERE id = ?", (value["reply_id"],))


def _add_close_ticket(skills: SkillRegistry, task: _Task) -> None:
    @skills.skill(
        step="closing",
        outputs=["closed"],
        reads=["ticket_id", "reply_id"],
        tools=["close_ticket"],
        when=lambda s: s.reply_id is not None and not s.closed,
    )
    def close_ticket(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Close the ticket (once it is triaged and answered)."""
        result = ctx.call("close_ticket", ticket_id=state.ticket_id)
        return Outcome(
            writes={"closed": True},
            summary=str(result),
            evidence=[ctx.evidence(str(result))],
        )

    @close_ticket.verifier
    def _closed_right(state: TicketState, outcome: Outcome) -> Verdict:
        row = task.row(state.ticket_id) or {}
        problems = [] if row.get("status") == "closed" else ["the ticket is not closed"]
        if (row.get("category"), row.get("priority")) != (state.category, state.priority):
            problems.append("closed without the triage in the database")
        problems += task.reply_problems(state.category)
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()

    @close_ticket.rollbacker
    def _reopen(state: TicketState, outcome: Outcome | None, ctx: SkillContext) -> None:
        if not state.closed:  # the committed card: it was open before this step
            with task.connect() as conn:
                conn.execute(
                    "UPDATE tickets SET status = 'open', closed_at = NULL WHERE id = ?",
                    (state.ticket_id,),
                )


def _reply_outcome(reply_id: int, article_id: str, ctx: SkillContext) -> Outcome:
    """What posting the reply commits; run and probe both build it here."""
    return Outcome(
        writes={"reply_id": reply_id, "kb_article": article_id},
        summary=f"reply {reply_id} quotes {article_id}",
        evidence=[ctx.evidence(f"reply {reply_id} quotes {article_id}")],
        value={"reply_id": reply_id},
    )


# ---------------------------------------------------------------- plans


def _plans(task: _Task) -> tuple[list[Action], list[Action], list[dict[str, Any]]]:
    """The oracle's skills plan, its tools plan, and the facts after each skills step."""
    s, tid = task.scenario, task.ticket_id
    category, priority = task.expected_category, task.expected_priority
    why = _why_priority(s.kind, s.users_affected, s.blocking)
    done = f"{tid} triaged {category} {priority}, answered with {task.expected_article}, closed"
    skills_plan: list[Action] = [
        CallSkill(skill="read_ticket", reason="nothing is known yet"),
        CallSkill(
            skill="triage_ticket",
            params={"category": category, "priority": priority},
            reason=f"the requester's own words are about {category}; {why}",
        ),
        CallSkill(skill="reply_with_kb", reason="triaged: answer with the KB solution"),
        CallSkill(skill="close_ticket", reason="answered"),
        Finish(summary=done),
    ]
    read = {
        "ticket_id": tid,
        "kind": s.kind,
        "users_affected": s.users_affected,
        "blocking": s.blocking,
    }
    triaged = {**read, "category": category, "priority": priority}
    replied = {**triaged, "reply_id": task.seeded_replies + 1, "kb_article": task.expected_article}
    closed = {**replied, "closed": True}
    facts: list[dict[str, Any]] = [read, triaged, replied, closed, closed]
    body = reply_body(tid, category, priority, task.expected_article, task.expected_solution)
    tools_plan: list[Action] = [
        CallSkill(skill="tool_get_ticket", params={"ticket_id": tid}, reason="read the ticket"),
        CallSkill(
            skill="remember",
            params={"key": "triage", "value": {"category": category, "priority": priority}},
            reason="the requester's own words and the priority rule, not the quoted mail",
        ),
        CallSkill(
            skill="tool_update_ticket",
            params={"ticket_id": tid, "category": category, "priority": priority},
            reason="triage",
        ),
        CallSkill(skill="tool_search_kb", params={"category": category}, reason="KB solution"),
        CallSkill(
            skill="tool_post_reply",
            params={"ticket_id": tid, "body": body},
            reason="quote the current article, no refund",
        ),
        CallSkill(skill="tool_close_ticket", params={"ticket_id": tid}, reason="answered"),
        Finish(summary=done),
    ]
    return skills_plan, tools_plan, facts


MACHINE = StateMachine(
    {
        "init": ["reading"],
        "reading": ["triaging"],
        "triaging": ["replying"],
        "replying": ["closing"],
        "closing": ["done"],
        "done": [],
    },
    initial="init",
)
"""init -> reading -> triaging -> replying -> closing -> done."""


def _checked(spec: TaskSpec) -> dict[str, Any]:
    """The spec's params, or a :class:`UsageError` naming what is missing or malformed."""
    params = dict(spec.params)
    missing = [k for k in ("seed", "ticket_id", "scenario") if k not in params]
    if missing:
        raise UsageError(f"ticket task {spec.id!r}: params need {', '.join(missing)}")
    if params["scenario"] not in SCENARIOS:
        raise UsageError(
            f"ticket task {spec.id!r}: unknown scenario {params['scenario']!r}; "
            f"one of {', '.join(SCENARIOS)}"
        )
    if not re.fullmatch(r"T-\d+", str(params["ticket_id"])):
        raise UsageError(f"ticket task {spec.id!r}: ticket_id must look like T-2047")
    return params


class TicketFamily:
    """Builds a ticket task: database, tools, skills, machine, plans and checks."""

    name = "ticket"

    def build(self, spec: TaskSpec, root: Path) -> Environment:
        task = _Task(_checked(spec), root)
        task.write_files()
        skills_plan, tools_plan, facts = _plans(task)
        return Environment(
            root=root,
            state_type=TicketState,
            machine=MACHINE,
            tools={
                "get_ticket": task.get_ticket,
                "search_kb": task.search_kb,
                "update_ticket": task.update_ticket,
                "post_reply": task.post_reply,
                "close_ticket": task.close_ticket,
            },
            skills=_skill_library(task),
            plan_skills=skills_plan,
            plan_tools=tools_plan,
            check=task.check,
            expected_facts=facts,
            initial={"ticket_id": task.ticket_id},
            effect_tools=frozenset({"update_ticket", "post_reply", "close_ticket"}),
        )
