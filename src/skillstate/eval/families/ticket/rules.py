"""The helpdesk's domain rules: categories, priorities, and what a reply may say.

Pure functions over text and form fields, shared by the skills' verify, the final
checks and the oracle's plans, so all three apply one rule.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

__all__ = [
    "CATEGORIES",
    "KEYWORDS",
    "PRIORITIES",
    "Category",
    "Kind",
    "Priority",
    "classify",
    "forbidden_words",
    "hits",
    "naive_category",
    "normalized",
    "one_line",
    "own_message",
    "priority_rule",
    "reply_body",
    "why_priority",
]

Category = Literal["network", "hardware", "account", "software"]
Priority = Literal["P1", "P2", "P3", "P4"]
Kind = Literal["incident", "request"]
CATEGORIES: tuple[str, ...] = get_args(Category)
PRIORITIES: tuple[str, ...] = get_args(Priority)

KEYWORDS: dict[str, tuple[str, ...]] = {
    "network": ("network", "vpn", "wifi", "wi-fi", "internet", "connection", "access point"),
    "hardware": ("laptop", "printer", "screen", "keyboard", "docking station", "monitor"),
    "account": ("password", "log in", "login", "account", "locked", "sso", "sign in"),
    "software": ("crash", "crashes", "install", "reinstall", "application", "excel", "outlook"),
}
_FORBIDDEN = re.compile(r"\b(refund\w*|credit\w*|compensat\w*|reimburs\w*)", re.IGNORECASE)


def hits(text: str) -> dict[str, list[str]]:
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
    found = hits(text)
    best = max(CATEGORIES, key=lambda c: len(found[c]))
    return best if found[best] else None


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


def why_priority(kind: str, users_affected: int, blocking: bool) -> str:
    """The reason :func:`priority_rule` gives, in words (for messages and plans)."""
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


def normalized(text: str) -> str:
    """``text`` with every run of whitespace made one space (how quotes are compared)."""
    return " ".join(text.split())


def one_line(text: str, limit: int = 600) -> str:
    """``text`` normalized, cut to ``limit`` characters (what the card keeps of a mail)."""
    flat = normalized(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
