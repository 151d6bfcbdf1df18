"""The extraction measurement: its scoring rules, and ``benchmarks/extract_eval.py`` end to
end on the ``seeds`` suite (a regression check of the rules' published figures there)."""

from __future__ import annotations

import json
from pathlib import Path

from skillstate.extract.score import same, score_constraints, score_facts
from tests.test_benchmarks import ROOT, run_benchmark

LABELS = [
    "Never mention a refund, a credit or compensation in a reply.",
    "Post exactly one reply per ticket. Change no other ticket.",
]


class TestConstraints:
    def test_a_rule_split_in_two_is_recalled_once_both_halves_are_there(self) -> None:
        counts = score_constraints(
            ["Post exactly one reply per ticket.", "Change no other ticket."], LABELS
        )
        assert (counts.proposed, counts.right, counts.labelled, counts.recalled) == (2, 2, 2, 1)

    def test_a_sentence_mostly_outside_every_label_is_wrong(self) -> None:
        counts = score_constraints(["Never mention the weather or the football scores."], LABELS)
        assert (counts.right, counts.recalled) == (0, 0)
        assert counts.precision == 0.0
        assert counts.recall == 0.0

    def test_half_a_rule_is_right_but_not_recalled(self) -> None:
        counts = score_constraints(["Never mention a refund."], LABELS)
        assert (counts.right, counts.recalled) == (1, 0)


class TestFacts:
    def test_key_and_equal_value(self) -> None:
        counts = score_facts(
            {"priority": "p2", "total": 10.0, "closed": True, "city": "Lisbon"},
            {"priority": "P2", "total": 10, "closed": False, "nights": 3},
        )
        assert (counts.proposed, counts.right, counts.labelled) == (4, 2, 4)
        assert counts.extra == {"right_keys": 3}

    def test_values_compare_by_kind(self) -> None:
        assert same(1, 1.0)
        assert not same(True, 1)
        assert same([1, "A"], [1.0, "a"])
        assert not same({"a": 1}, {"a": 2})


def test_the_benchmark_on_the_seeds_suite(tmp_path: Path) -> None:
    """The seeds suite only (4 tasks), both renderings: the rules' figures there."""
    result = run_benchmark(
        "--seeds", "0", "--out", str(tmp_path), script=ROOT / "benchmarks" / "extract_eval.py"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| rendering | transcripts | constraints P |" in result.stdout
    report = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert report["model"] == "heuristic"
    assert len(report["cases"]) == 8
    for rendering in ("history", "prose"):
        summary = report["summary"][rendering]
        assert summary["constraints"] == {"precision": 1.0, "recall": 0.8}
        assert summary["facts"]["precision"] == 8 / 9
        assert summary["failed"] == 0
    assert (
        (tmp_path / "report.md")
        .read_text(encoding="utf-8")
        .startswith("## skillstate extract: heuristic")
    )
