"""A family's tasks with vs without a template distilled from an earlier task of the family.

    .venv/bin/python benchmarks/templates.py --model MODEL [--base-url URL]
        [--families orders] [--variants skillstate,state] [--tasks 3] [--seeds 0]
        [--source-model oracle] [--context-window N] [--out DIR]

``MODEL`` is what ``skillstate eval --model`` takes: ``local`` (Gemma 3 270M through
llama.cpp, extra ``local``), ``openai:NAME`` with ``--base-url`` for any
OpenAI-compatible server (vLLM, llama.cpp's server, Ollama), or ``oracle``.

For each family and variant: the family's first task is run to completion by
``--source-model`` and distilled (:func:`skillstate.templates.distill`); each of the
next ``--tasks`` tasks (other seeds and params) is then run by ``--model`` twice per
seed, without and with the template's hint on its first card
(:mod:`skillstate.templates.measure`). Prints, per arm: success, decisions per task and
prompt tokens per task, and the with/without ratios measured in the same run.

``--model oracle`` only checks the harness: the oracle follows the reference plan
whatever its prompt says, so both arms take the same decisions by construction, and
the token difference is what the hint costs in the prompt, not what it changes.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from skillstate.eval.models import model_factory
from skillstate.eval.variants import parse_variants
from skillstate.templates.measure import Arm, measure_family
from skillstate.templates.model import dump_template

ORACLE_NOTE = (
    "HARNESS CHECK ONLY: the oracle follows the reference plan whatever the prompt says, "
    "so both arms take the same decisions by construction; the prompt-token difference "
    "is the size of the hint, not an effect of the template."
)


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def summary_rows(arms: Sequence[Arm]) -> list[dict[str, object]]:
    """One row per (variant, arm): runs, success, decisions and tokens per task."""
    rows: list[dict[str, object]] = []
    keys = sorted({(a.variant, a.arm) for a in arms}, key=lambda k: (k[0], k[1] != "without"))
    for variant, arm in keys:
        runs = [a for a in arms if a.variant == variant and a.arm == arm]
        rows.append(
            {
                "variant": variant,
                "arm": arm,
                "runs": len(runs),
                "success": sum(a.success for a in runs),
                "decisions_per_task": round(_mean([a.decisions for a in runs]), 2),
                "prompt_tokens_per_task": round(_mean([a.prompt_tokens for a in runs]), 1),
                "completion_tokens_per_task": round(_mean([a.completion_tokens for a in runs]), 1),
            }
        )
    return rows


def ratios(rows: Sequence[dict[str, object]]) -> dict[str, dict[str, float | None]]:
    """With / without, per variant: decisions and prompt tokens per task."""
    out: dict[str, dict[str, float | None]] = {}
    for variant in sorted({str(r["variant"]) for r in rows}):
        pair = {r["arm"]: r for r in rows if r["variant"] == variant}
        if {"with", "without"} <= pair.keys():
            out[variant] = {
                name: (
                    round(float(pair["with"][name]) / float(pair["without"][name]), 3)  # type: ignore[arg-type]
                    if float(pair["without"][name])  # type: ignore[arg-type]
                    else None
                )
                for name in ("decisions_per_task", "prompt_tokens_per_task")
            }
    return out


def markdown(meta: dict[str, object], rows: Sequence[dict[str, object]]) -> str:
    lines = [f"# Templates: with vs without ({meta['model']})", ""]
    if meta["model"] == "oracle":
        lines += [f"**{ORACLE_NOTE}**", ""]
    lines += [f"Command: `{meta['command']}`", ""]
    lines += [
        "| family | variant | arm | runs | success | decisions / task | prompt tokens / task |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['family']} | {r['variant']} | {r['arm']} | {r['runs']} | {r['success']} | "
            f"{r['decisions_per_task']} | {r['prompt_tokens_per_task']} |"
        )
    return "\n".join(lines) + "\n"


def progress(a: Arm) -> str:
    """One line per run as it ends."""
    return (
        f"{a.variant} {a.task} seed {a.seed} {a.arm:>7}: "
        f"{'ok' if a.success else 'FAILED'} {a.decisions} decisions, "
        f"{a.prompt_tokens} prompt tokens" + (f" ({a.failure})" if a.failure else "")
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--base-url")
    parser.add_argument("--families", default="orders")
    parser.add_argument("--variants", default="skillstate,state")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--source-model", default="oracle")
    parser.add_argument("--context-window", type=int)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    factory, window = model_factory(args.model, args.base_url, args.context_window, None)
    source, _ = model_factory(args.source_model, args.base_url, None, None)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    started = time.perf_counter()
    arms: list[tuple[str, Arm]] = []
    rows: list[dict[str, object]] = []
    templates: dict[str, str] = {}
    if args.model == "oracle":
        print(ORACLE_NOTE)
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        for variant in parse_variants(args.variants):
            template, measured = measure_family(
                family,
                variant,
                factory,
                tasks=args.tasks,
                seeds=seeds,
                source=source,
                context_window=window,
                on_run=lambda a: print(progress(a)),
            )
            templates[template.name] = dump_template(template)
            arms += [(family, a) for a in measured]
            rows += [{"family": family, **r} for r in summary_rows(measured)]
    meta: dict[str, object] = {
        "model": args.model,
        "base_url": args.base_url,
        "source_model": args.source_model,
        "command": "python benchmarks/templates.py " + " ".join(argv or __import__("sys").argv[1:]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}",
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(markdown(meta, rows))
    for family in sorted({f for f, _ in arms}):
        print(family, json.dumps(ratios([r for r in rows if r["family"] == family])))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.md").write_text(markdown(meta, rows), encoding="utf-8")
        report = {
            "meta": meta,
            "rows": rows,
            "ratios": {
                f: ratios([r for r in rows if r["family"] == f]) for f in {f for f, _ in arms}
            },
            "runs": [{"family": f, **a.as_json()} for f, a in arms],
        }
        (args.out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        for name, text in templates.items():
            (args.out / f"{name}.yaml").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
