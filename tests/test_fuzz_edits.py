"""Hostile hand edits never crash the CLI or half-write a card (300 of them).

Each edit goes through the real entry point (``skillstate.cli._main``: the argument
check, typer, the one-line error handler) as ``set L PATH=VALUE`` or ``edit L
--file CARD.yaml``, against one ledger task on SQLite. Values carry control
characters (raw and as YAML escapes), DEL, C1 controls, bidi overrides, lone
surrogates, integers past Python's int-string limit, deep nesting, wrong types,
unknown fields, fields nobody may change, and YAML that is not a card.

After each one, either it was accepted (exit 0: the new head loads strictly and
holds no text a person may not write), or it was refused: a non-zero exit, exactly
one ``error:`` line on stderr, no traceback, and the head unchanged. Anything else
is counted as unexpected, and the count must be 0.

Reproduced before: ``set L facts.x=<5,000 digits>`` exited 1 with "unexpected
ValueError: Exceeds the limit (4300 digits)", and ``set``/``edit`` wrote ESC, DEL,
C1 controls and U+202E into the card.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from skillstate import Runtime
from skillstate.cli import _main
from skillstate.examples import ledger
from skillstate.store import open_store

EDITS = 300
SEED = 20261203

CONTROLS = (
    [chr(c) for c in range(0x20) if chr(c) not in "\t\n"]
    + ["\x7f", *(chr(c) for c in range(0x80, 0xA0))]
    + [*"\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]
)
ESCAPES = [r"\e", r"\0", r"\x1b[31m", r"\x7f", r"\x85", r"\N", r"\u202e", r"\u2066", r"\ud800",
           r"\udfff", r"\x9b", r"\a", r"\b", r"\v", r"\f", r"\r"]  # fmt: skip
FIELDS = ["goal", "facts.note", "facts.a.b", "constraints", "appended", "target", "step_delay",
          "ledger", "status", "version", "task_id", "current_step", "agent", "nope",
          "facts", "appended.x", "completed_steps", "errors", "pending_effect", "usage.prompt",
          "facts.x.y.z", "", "a..b", ".", "facts.", "question"]  # fmt: skip


def _hostile_text(rng: random.Random) -> str:
    """A YAML value: a control character raw or escaped, in quotes or not, with text around."""
    around = rng.choice(["", "refund 40", "a\\nb", "x" * 50])
    if rng.random() < 0.5:
        inner = around + rng.choice(ESCAPES) + around
        return f'"{inner}"'
    raw = rng.choice([*CONTROLS, "\t", "\n"])
    return rng.choice([around + raw, f'"{around}{raw}"', f"'{raw}{around}'"])


def _hostile_number(rng: random.Random) -> str:
    digits = "9" * rng.choice([4_301, 5_000, 30_000, 4_000, 19])
    return rng.choice(
        [digits, "-" + digits, "0x" + "f" * 20_000, "1.0e+99999", ".nan", "-.inf", "!!float nan",
         "0b" + "1" * 15_000, f"[1, {digits}]", f"{{k: {digits}}}"]
    )  # fmt: skip


def _hostile_shape(rng: random.Random) -> str:
    depth = rng.choice([31, 33, 200, 20_000])
    return rng.choice(
        ["[" * depth + "]" * depth, "{a: " * depth + "1" + "}" * depth, "&a [*a]", "!!binary aGk=",
         "2001-12-14", "!!set {a}", "!!python/object:os.system x", "{[1]: 2}", "[a, b]", "{}",
         "-1", "true", "null", "''", "abc", "3", "0.5", "{ok: fine}", "P1", "\"\\ta\\nb\""]
    )  # fmt: skip


def _hostile_key(rng: random.Random) -> str:
    return "facts." + rng.choice(
        ["a\tb", "a\nb", "a\x1bb", "\u202ekey", "k\x85", "k\x00", "ok", "with space", "\ud800"]
    )


VALUES = [_hostile_text, _hostile_number, _hostile_shape]
# What no accepted edit may write (the test's own oracle, not skillstate.limits'): C0
# controls but tab and line feed, DEL, C1 controls, bidi controls, lone surrogates.
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _forbidden(document: Any) -> set[str]:
    """Every forbidden character in a card's keys and text, as ``U+XXXX``."""
    found: set[str] = set()
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack += [*node.keys(), *node.values()]
        elif isinstance(node, list):
            stack += node
        elif isinstance(node, str):
            found |= {f"U+{ord(c):04X}" for c in FORBIDDEN.findall(node)}
    return found


def _set_args(rng: random.Random) -> list[str]:
    if rng.random() < 0.15:
        return [f"{_hostile_key(rng)}={rng.choice(['1', _hostile_text(rng)])}"]
    count = rng.choice([1, 1, 1, 2])
    return [f"{rng.choice(FIELDS)}={rng.choice(VALUES)(rng)}" for _ in range(count)]


def _edit_text(rng: random.Random, card: dict[str, Any]) -> str:
    """A YAML card with one field (or a fact) set to a hostile value, or not a card at all."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(
            ["", "- a list\n", "[" * 50_000, "just text", "\x00\x01", "a: &x 1\nb: *x\n",
             "version: 1\n", yaml.safe_dump({**card, "version": "two"})]
        )  # fmt: skip
    name = rng.choice([*FIELDS[:14], "facts"]).split(".")[0]
    if rng.random() < 0.3:  # a hostile value as PyYAML writes it, when it can
        try:
            edited = {**card, name: _parsed(rng.choice(VALUES)(rng))}
            return yaml.safe_dump(edited, allow_unicode=True, sort_keys=False)
        except (yaml.YAMLError, ValueError):
            pass
    # A hostile value spliced in as YAML text (a later key wins in PyYAML).
    line = f"{name}: {rng.choice(VALUES)(rng)}\n"
    if name == "facts":
        line = f"facts:\n  {_hostile_key(rng).removeprefix('facts.')!r}: 1\n"
    return yaml.safe_dump(card, allow_unicode=True, sort_keys=False) + line


def _parsed(text: str) -> Any:
    """The YAML value (``None`` when PyYAML itself refuses it: it is then spliced raw)."""
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):
        return None


def test_three_hundred_hostile_edits_fail_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """set and edit --file with hostile values: accepted cleanly or refused in one line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKILLSTATE_DEBUG", raising=False)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = open_store(url)
    runtime = Runtime(ledger.agent, store, max_steps=1)
    runtime.start("L", target=5, ledger=str(tmp_path / "ledger.txt"))
    runtime.run("L")
    rng = random.Random(SEED)
    unexpected: list[str] = []
    outcomes = {"accepted": 0, "refused": 0}
    card_file = tmp_path / "card.yaml"
    for number in range(EDITS):
        head = store.load("L")
        if rng.random() < 0.6:
            args = ["set", "L", *_set_args(rng), "--store", url]
        else:
            card = runtime.load("L").model_dump(mode="json")
            card_file.write_text(_edit_text(rng, card), encoding="utf-8", errors="surrogatepass")
            args = ["edit", "L", "--file", str(card_file), "--store", url]
        # The operator names the agent: an accepted edit of the card's `agent` field must
        # not stop the later edits from being checked against it.
        args += ["--agent", "skillstate.examples.ledger:agent"]
        if rng.random() < 0.2:
            args.append("--force")
        code = _main(args)
        out, err = capsys.readouterr()
        after = store.load("L", verify=False)
        what = f"#{number} {ascii(args)[:160]}"
        if "Traceback" in out + err or "unexpected" in err:
            unexpected.append(f"{what}: {err.strip()[:200]}")
        elif code == 0:
            outcomes["accepted"] += 1
            runtime.load("L")  # the new head loads strictly
            written = _forbidden(after.state) - _forbidden(head.state)
            if written:
                unexpected.append(f"{what}: accepted, and wrote {sorted(written)}")
        else:
            outcomes["refused"] += 1
            if err.count("\n") != 1 or not err.startswith("error: "):
                unexpected.append(f"{what}: exit {code} without one error line: {err[:200]!r}")
            if after.version != head.version or after.state != head.state:
                unexpected.append(f"{what}: refused (exit {code}) but the head changed")
    store.close()
    assert unexpected == [], f"{len(unexpected)} unexpected:\n" + "\n".join(unexpected[:20])
    assert outcomes["refused"] > EDITS // 2
    assert outcomes["accepted"] > 10  # plain values still go through
