"""CPU seconds from ``/proc``: a benchmark's own process, its worker processes, and this
host's PostgreSQL and RabbitMQ (for ``benchmarks/workers.py``).

Wall time on a machine shared with other work says little about a quiet one; CPU
seconds per task say what the work itself costs, and so what it could reach on idle
cores. Linux only: elsewhere every figure reads 0.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["Cpu", "proc_cpu", "services_cpu"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu(pid: int | str, children: bool = False) -> float:
    """CPU seconds ``pid`` has used (``/proc``; 0 where there is none), with its reaped
    children's when ``children`` (a postmaster's exited backends)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    fields = text[text.rfind(b")") + 2 :].split()  # field 3 (state) is fields[0]
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / _TICK


def services_cpu() -> dict[str, float]:
    """CPU seconds used so far by this host's PostgreSQL and RabbitMQ processes.

    Every process of theirs counts, other clients' work too: on a shared machine
    these are upper bounds."""
    found = {"postgres": 0.0, "rabbitmq": 0.0}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm == "postgres":
            found["postgres"] += proc_cpu(entry.name, children=True)
        elif comm == "beam.smp":
            found["rabbitmq"] += proc_cpu(entry.name)
    return found


class Cpu:
    """CPU seconds spent between each :meth:`start` and :meth:`stop`, added up: by the
    runner (this process, or the worker processes), PostgreSQL and RabbitMQ."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._pids: list[int] = []
        self._before: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        own = sum(proc_cpu(pid) for pid in self._pids) if self._pids else time.process_time()
        return {"runner": own, **services_cpu()}

    def start(self, pids: list[int] | None = None) -> None:
        self._pids = list(pids or [])
        self._before = self._now()

    def stop(self) -> None:
        after = self._now()
        for key in after:
            self.spent[key] = self.spent.get(key, 0.0) + after[key] - self._before[key]
