"""``skillstate eval``: run a suite under the variants, with a progress bar, and report."""

from __future__ import annotations

import json
import platform
import random
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from skillstate._render import console
from skillstate.errors import UsageError
from skillstate.eval.models import ModelSpec, model_factory
from skillstate.eval.results import TaskResult
from skillstate.eval.runner import ProviderFactory, run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import GROUPS, TaskSpec
from skillstate.eval.variants import (
    DEFAULT_SUMMARY_EVERY,
    DEFAULT_WINDOW,
    Variant,
    parse_variants,
)

__all__ = ["MODES", "evaluate", "run_eval"]

MODES = ("end-to-end", "forced")
"""``--mode``: each variant runs the task itself, or is teacher-forced along the reference."""


def run_eval(
    *,
    suite: str,
    variants: str,
    seeds: int,
    model: str,
    base_url: str | None,
    out: str,
    tasks: int | None,
    groups: str | None = None,
    context_window: int | None,
    max_repairs: int,
    max_invalid: int | None = 3,
    recovery: bool,
    command: str,
    mode: str = "end-to-end",
    window: int = DEFAULT_WINDOW,
    summary_every: int = DEFAULT_SUMMARY_EVERY,
    inject_faults: float | None = None,
    kills: int = 0,
    bad_steps: float | None = None,
    bind: bool = True,
    decisions: str | None = None,
    record: bool = True,
) -> int:
    """Run and report; returns the exit code (0: the run completed, whatever it measured).

    ``mode`` is ``end-to-end`` (each variant runs the task on its own) or ``forced``
    (teacher-forced decision accuracy along the reference run, see
    :mod:`skillstate.eval.forced`). ``inject_faults`` makes that share of model
    calls fail with a provider error (see :mod:`skillstate.eval.faults`), ``bad_steps``
    that share of effect calls after their effect (:mod:`skillstate.eval.bad_steps`);
    ``kills`` adds a run SIGKILLed that many times to the recovery runs
    (:mod:`skillstate.eval.interrupt`). ``record`` keeps each run's cassettes for
    ``eval --replay`` (:mod:`skillstate.eval.cassettes`).
    """
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose from: {', '.join(MODES)}")
    chosen = parse_variants(variants, window=window, every=summary_every, bind=bind)
    wanted = _parse_groups(groups)

    def suite_for(seed: int) -> list[TaskSpec]:
        # A generated suite gives new tasks per seed; a suite of fixed tasks the same ones.
        specs = [s for s in load_suite(suite, seed) if wanted is None or s.group in wanted]
        return specs[:tasks] if tasks is not None else specs

    per_seed = {seed: suite_for(seed) for seed in range(seeds)}
    if not any(per_seed.values()):
        raise UsageError(f"suite {suite!r} has no tasks in group(s) {groups}")
    factory, context_window = model_factory(model, base_url, context_window, inject_faults)
    if mode == "forced":
        from skillstate.eval.forced import parse_decisions

        ask = parse_decisions(decisions) if decisions else None
        settings = {
            "window": window,
            "summary_every": summary_every,
            "max_repairs": max_repairs,
            "context_window": context_window,
            "bind": bind,
            "decisions": decisions or "all",
        }
        return _run_forced(
            per_seed,
            chosen,
            factory,
            out=Path(out),
            model=model,
            suite=suite,
            command=command,
            context_window=context_window,
            max_repairs=max_repairs,
            settings=settings,
            ask=ask,
        )
    out_dir = Path(out)
    work = out_dir / "runs"
    started_at = datetime.now(timezone.utc)
    started = time.perf_counter()
    results: list[TaskResult] = []
    orders: dict[int, list[str]] = {}
    total = sum(len(specs) for specs in per_seed.values()) * len(chosen)
    with _progress() as progress:
        bar = progress.add_task("eval", total=total)
        for seed in range(seeds):
            order = list(per_seed[seed])
            random.Random(seed).shuffle(order)  # task order shuffled per seed, and recorded
            orders[seed] = [s.id for s in order]
            for spec in order:
                for variant in chosen:
                    progress.update(bar, description=f"seed {seed} {spec.id} {variant.name}")
                    results.append(
                        run_task(
                            spec,
                            variant,
                            seed=seed,
                            factory=factory,
                            workdir=work,
                            context_window=context_window,
                            max_repairs=max_repairs,
                            max_invalid=max_invalid,
                            recovery=recovery,
                            kills=kills,
                            model=ModelSpec(model, base_url, inject_faults),
                            bad_steps=bad_steps,
                            record=record,
                        )
                    )
                    progress.advance(bar)
    from skillstate.eval.report import write_report

    paths = write_report(
        results,
        out_dir,
        model=model,
        suite=suite,
        seeds=list(range(seeds)),
        command=command,
        started_at=started_at,
        duration_s=round(time.perf_counter() - started, 1),
        machine=_machine(),
    )
    # The task order of each seed is part of the record (it is shuffled per seed).
    document = json.loads(paths.json.read_text(encoding="utf-8"))
    document["task_order"] = {str(seed): ids for seed, ids in orders.items()}
    paths.json.write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")
    ok = sum(r.success for r in results)
    console.print(f"{ok}/{len(results)} runs succeeded")
    for variant in chosen:
        mine = [r for r in results if r.variant == variant.name]
        won = sum(r.success for r in mine)
        tokens = [t for r in mine for t in r.prompt_tokens]
        mean = sum(tokens) / len(tokens) if tokens else 0.0
        console.print(
            f"  {variant.name:<10} success {won}/{len(mine)}  prompt tokens/decision {mean:,.0f}"
        )
    console.print(f"report: {paths.markdown} (json, plots beside it)")
    return 0


def _parse_groups(text: str | None) -> set[str] | None:
    if text is None:
        return None
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = names - set(GROUPS)
    if unknown or not names:
        raise UsageError(
            f"unknown length group(s) {', '.join(sorted(unknown)) or '(none)'}; "
            f"choose from: {', '.join(GROUPS)}"
        )
    return names


def _progress() -> Progress:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return Progress(*columns, console=console, transient=False)


def _machine() -> str:
    return f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"


def _run_forced(
    per_seed: dict[int, list[TaskSpec]],
    chosen: list[Variant],
    factory: ProviderFactory,
    *,
    out: Path,
    model: str,
    suite: str,
    command: str,
    context_window: int | None,
    max_repairs: int,
    settings: dict[str, Any],
    ask: Callable[[int], bool] | None = None,
) -> int:
    """Teacher-force every task of every seed under every variant, and report."""
    from skillstate.eval.forced import ForcedRun, run_forced_task
    from skillstate.eval.forced_metrics import summarize_forced
    from skillstate.eval.forced_report import write_forced_report

    started_at = datetime.now(timezone.utc)
    started = time.perf_counter()
    runs: list[ForcedRun] = []
    total = sum(len(specs) for specs in per_seed.values()) * len(chosen)
    with _progress() as progress:
        bar = progress.add_task("forced", total=total)
        for seed, specs in per_seed.items():
            for spec in specs:
                for variant in chosen:
                    progress.update(bar, description=f"seed {seed} {spec.id} {variant.name}")
                    runs.append(
                        run_forced_task(
                            spec,
                            variant,
                            seed=seed,
                            factory=factory,
                            workdir=out / "runs",
                            context_window=context_window,
                            max_repairs=max_repairs,
                            ask=ask,
                        )
                    )
                    progress.advance(bar)
    paths = write_forced_report(
        runs,
        out,
        model=model,
        suite=suite,
        seeds=sorted(per_seed),
        command=command,
        started_at=started_at,
        duration_s=round(time.perf_counter() - started, 1),
        machine=_machine(),
        settings=settings,
    )
    for name, item in summarize_forced([d for r in runs for d in r.decisions]).items():
        exact = item["overall"]["exact"]["rate"]
        shown = "—" if exact is None else f"{exact:.2f}"
        console.print(
            f"  {name:<10} exact {shown} over {item['decisions']} decisions  "
            f"drop k {item['drop_k']['exact'] or '—'}"
        )
    console.print(f"report: {paths.markdown} (json, plots beside it)")
    return 0


def evaluate(
    *,
    compare: str | None,
    fail_under: list[str],
    allow_mismatch: bool,
    report: str | None,
    replay: str | None,
    out: str | None,
    **run: Any,
) -> int:
    """``skillstate eval``: run (:func:`run_eval`), compare with a baseline, or replay.

    Everything the gate needs (the baseline, the ``--fail-under`` values) is read
    and checked before a run starts: a typo must not cost an hour of evaluation.
    """
    if replay is not None:
        if compare is not None or report is not None or fail_under:
            raise UsageError("--replay does not combine with --compare, --report or --fail-under")
        from skillstate.eval.replay_report import default_out, replay_all

        target = Path(replay)
        replay_all(target, Path(out) if out else default_out(target))
        return 0
    if compare is None and (fail_under or report is not None or allow_mismatch):
        raise UsageError("--fail-under, --report and --allow-mismatch need --compare BASELINE")
    from skillstate.eval.gate import load_report, parse_gates, refuse_early

    gates = parse_gates(fail_under)
    baseline = load_report(compare, "baseline") if compare is not None else None
    if baseline is not None and report is not None:
        return _gate(baseline, load_report(report), gates, allow_mismatch)
    if baseline is not None:
        if run.get("mode", "end-to-end") != "end-to-end":
            raise UsageError(
                "--compare gates end-to-end runs (--mode forced writes another report)"
            )
        names = [v.name for v in parse_variants(run["variants"])]
        planned = {
            "suite": run["suite"],
            "model": run["model"],
            "variants": dict.fromkeys(names),
            "seeds": list(range(run["seeds"])),
        }
        refuse_early(baseline, planned, allow_mismatch)
    directory = out or "eval-out"
    code = run_eval(out=directory, **run)
    if baseline is None or code != 0:
        return code
    return _gate(baseline, load_report(Path(directory) / "report.json"), gates, allow_mismatch)


def _gate(
    baseline: dict[str, Any], new: dict[str, Any], gates: list[Any], allow_mismatch: bool
) -> int:
    """Compare, print the table, write it into the new report; raise on a breach."""
    from skillstate.eval.gate import compare_reports
    from skillstate.eval.gate_report import print_comparison, write_comparison

    comparison = compare_reports(baseline, new, gates, allow_mismatch=allow_mismatch)
    print_comparison(comparison)
    json_path, md_path = write_comparison(comparison, new["_path"])
    console.print(f"comparison written into {json_path}" + (f" and {md_path}" if md_path else ""))
    comparison.check()
    return 0
