"""A probe for worlds that keep no keys: read the world back and look for the effect.

When the outside world cannot record an idempotency key (a plain file, a third-party
API without an ``Idempotency-Key`` header, a device), the only way to answer "did
this effect already happen?" is to read the world and recognise the effect in it::

    @send.prober
    def _sent(state, params, ctx):
        return read_back(
            lambda: outbox.list(to=params.to),
            lambda mails: any(m.subject == params.subject for m in mails),
            Outcome(writes={"sent": True}, summary=f"mail to {params.to} sent"),
        )

This is weaker than a key (see docs/effects.md): ``matches`` must recognise *this*
effect and not an equal one made by someone else, and nothing stops another writer
between the read and the skill's next run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from skillstate.skills.skill import Outcome

__all__ = ["read_back"]

T = TypeVar("T")


def read_back(
    read: Callable[[], T], matches: Callable[[T], bool], outcome: Outcome
) -> Outcome | None:
    """``outcome`` when what ``read()`` returns shows the effect (``matches``), else ``None``.

    Usable directly as the body of a probe. An error while reading propagates on
    purpose: ``None`` means "it did not happen, run it again", which a failed read
    cannot know. The runtime records the error and probes again on the next attempt.
    """
    return outcome if matches(read()) else None
