"""The view budget: how a view is fitted into its token budget.

A budgeted view (``Agent(view_budget=...)``; on by default for model policies,
:data:`DEFAULT_VIEW_BUDGET` tokens) hides what it may, lowest priority first, until
it fits:

===================  ========  ==========================================
what                 priority  within the same priority
===================  ========  ==========================================
evidence summaries   10        oldest first
memory (other tasks) 15        least recently written first
already tried        20        oldest first
template plan hint   25        last entry first (the next one stays longest)
completed steps      30        oldest first (they join "(N earlier)")
shared records       35        last field first (the header stays)
facts                40        oldest first
children (fan-out)   45        oldest first
typed fields         50        last declared first
===================  ========  ==========================================

A typed field declares its own priority with :class:`ViewPriority` (``Annotated[str |
None, ViewPriority(60)]``) or ``Field(json_schema_extra={"view_priority": 60})``:
higher stays longer. What is hidden leaves a marker (``(3 more facts hidden by the
view budget)``), so the model knows something was cut and what kind. The goal, the
constraints, the status and step, the skills that apply now, the open question and
the user's replies and messages are never hidden. A view still over its budget once
everything hideable is hidden has an *overrun*: ``view.overrun`` says by how many
tokens, and the decision's event records it (``Event.view_overrun``).

Fitting is not quadratic: each hideable line is counted once, the lines to hide are
chosen from those counts, and the whole text is counted again only to confirm (a
search outwards from the estimate, doubling its step, then halving, corrects one
that missed: a few renders, however many lines there are).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from skillstate.llm.tokens import count_tokens

__all__ = [
    "DEFAULT_VIEW_BUDGET",
    "PRIORITIES",
    "Fitted",
    "Hideable",
    "ViewPriority",
    "field_priorities",
    "fit",
]

DEFAULT_VIEW_BUDGET = 2000
"""Tokens of the prompt view of a model policy unless the agent sets ``view_budget``:
room for a goal, a dozen constraints, the plan, two dozen facts and a dozen skills,
and an eighth of a small model's 16k context."""

PRIORITIES: dict[str, int] = {
    "evidence": 10,
    "memory": 15,  # facts recalled from other tasks (issue 27): before the task's own
    "tried": 20,
    "template": 25,  # a template's plan: a hint (issue 27), after failures, before steps
    "steps": 30,
    "shared": 35,  # shared records (issue 28): after the steps, before the task's facts
    "facts": 40,
    "children": 45,  # a parent's child tasks (issue 28): their results, before typed fields
    "fields": 50,
}
"""The default priority of each kind of hideable line (higher stays longer)."""


@dataclass(frozen=True)
class ViewPriority:
    """Field metadata: how long a typed field stays in a budgeted view (higher stays
    longer; facts are 40, typed fields 50 unless they say otherwise)::

        class Report(AgentState):
            draft: Annotated[str | None, ViewPriority(45)] = None
    """

    value: int


_PRIORITIES: dict[type[Any], dict[str, int]] = {}


def field_priorities(cls: type[Any]) -> dict[str, int]:
    """The view priority of each field of ``cls`` that declares one (cached per class)."""
    cached = _PRIORITIES.get(cls)
    if cached is not None:
        return cached
    found: dict[str, int] = {}
    for name, info in cls.model_fields.items():
        marks = [m.value for m in info.metadata if isinstance(m, ViewPriority)]
        extra = info.json_schema_extra
        if isinstance(extra, dict) and isinstance(extra.get("view_priority"), int):
            marks.append(int(extra["view_priority"]))
        if marks:
            found[name] = marks[-1]
    if cls.__pydantic_complete__:  # forward references still pending: ask again later
        _PRIORITIES[cls] = found
    return found


class Hideable(NamedTuple):
    """One line (or list entry) of the view that the budget may hide."""

    group: str
    """``evidence``, ``tried``, ``template`` (the template's hint), ``steps`` or ``fields``
    (facts and typed fields)."""
    position: int
    """Its position in its group, as rendered."""
    priority: int
    order: int
    """Among equal priorities, the lower goes first."""
    text: str
    """What it renders as (what hiding it saves)."""
    name: str
    """What :attr:`View.dropped` calls it: the group, ``facts.KEY`` or a field's name."""


class Fitted(NamedTuple):
    """A view's text fitted into its budget."""

    text: str
    tokens: int
    dropped: tuple[str, ...]
    """What was hidden, in the order it was chosen."""
    overrun: int
    """Tokens still over the budget once everything hideable was hidden (0: it fits)."""


MARKER_TOKENS = 12
"""About what the marker of a kind of hidden line costs (``- (3 more facts hidden ...)``)."""

Build = Callable[[Collection[tuple[str, int]]], str]
"""Renders the view with the given ``(group, index)`` lines hidden."""


def fit(build: Build, items: Sequence[Hideable], budget: int) -> Fitted:
    """The text ``build`` renders, with as few of ``items`` hidden as fit ``budget``."""
    text = build(())
    tokens = count_tokens(text)
    if tokens <= budget:
        return Fitted(text, tokens, (), 0)
    order = sorted(items, key=lambda item: (item.priority, item.order))
    tried: dict[int, tuple[str, int]] = {0: (text, tokens)}

    def render(hidden: int) -> tuple[str, int]:
        if hidden not in tried:
            shown = build({(item.group, item.position) for item in order[:hidden]})
            tried[hidden] = (shown, count_tokens(shown))
        return tried[hidden]

    def fits(hidden: int) -> bool:
        return render(hidden)[1] <= budget

    def smallest(low: int, high: int) -> int:
        """The fewest hidden lines in (low, high] that fit: ``low`` does not, ``high`` does."""
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if fits(middle) else (middle, high)
        return high

    # An estimate from each line's own count (and a marker's for each kind hidden), then
    # a search outwards from it: a few renders when the estimate is close, as it is.
    excess, saved, guess = tokens - budget, 0, 0
    kinds: set[str] = set()
    while guess < len(order) and saved < excess:
        item = order[guess]
        saved += count_tokens(item.text)
        if item.group not in kinds:
            kinds.add(item.group)
            excess += MARKER_TOKENS
        guess += 1
    step = 1
    if fits(guess):  # the fewest that fit may be fewer: look below
        high = guess
        while high > 0 and fits(max(high - step, 0)):
            high, step = max(high - step, 0), step * 2
        hidden = high if high == 0 else smallest(max(high - step, 0), high)
    else:  # more are needed: look above, up to everything
        low = guess
        while low < len(order) and not fits(min(low + step, len(order))):
            low, step = min(low + step, len(order)), step * 2
        hidden = len(order) if low == len(order) else smallest(low, min(low + step, len(order)))
    text, tokens = render(hidden)
    dropped = tuple(item.name for item in order[:hidden])
    return Fitted(text, tokens, dropped, max(tokens - budget, 0))
