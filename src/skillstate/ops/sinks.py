"""Where firing alerts go: a webhook, OpenTelemetry gauges, Prometheus text.

Every sink gets the same :class:`~skillstate.ops.alerts.Alert` records: ids, the rule,
when and a one-line detail. No card value and no store URL (it may hold a password)
ever leaves through a sink.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from skillstate.errors import UsageError
from skillstate.ops.alerts import Alert, count_by_rule

__all__ = ["METRIC", "OTelAlerts", "Webhook", "WebhookResult", "prometheus_text"]

METRIC = "skillstate_alerts_firing"
"""The gauge's Prometheus name (``skillstate.alerts.firing`` in OpenTelemetry)."""


@dataclass(frozen=True)
class WebhookResult:
    """What one delivery did."""

    delivered: bool
    attempts: int
    error: str | None = None


def _key(alert: Alert) -> tuple[str, str]:
    return alert.rule, alert.task_id


@dataclass
class Webhook:
    """POSTs the alerts that started or stopped firing as JSON to ``url``.

    Each attempt has ``timeout`` seconds and there are at most ``retries`` more after
    the first, ``backoff`` seconds apart (doubling): a dead receiver costs an
    evaluation at most ``(retries + 1) * timeout`` plus the pauses, never forever. A
    delivery that still failed is sent again with the next change (the sink keeps
    what it last delivered, not what it last saw).
    """

    url: str
    timeout: float = 5.0
    retries: int = 2
    backoff: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    _delivered: set[tuple[str, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise UsageError(f"--webhook must be an http:// or https:// URL, not {self.url!r}")
        if self.timeout <= 0 or self.retries < 0:
            raise UsageError("the webhook's timeout must be > 0 and its retries >= 0")

    def payload(self, alerts: Iterable[Alert]) -> dict[str, Any] | None:
        """The body to send for ``alerts`` (``None``: nothing changed since the last
        delivery)."""
        firing = {_key(a): a for a in alerts}
        started = [firing[k].as_json() for k in sorted(set(firing) - self._delivered)]
        stopped = [{"rule": r, "task_id": t} for r, t in sorted(self._delivered - set(firing))]
        if not started and not stopped:
            return None
        return {
            "source": "skillstate",
            "firing": [a.as_json() for a in firing.values()],
            "started": started,
            "resolved": stopped,
            "counts": count_by_rule(list(firing.values())),
        }

    def send(self, alerts: list[Alert]) -> WebhookResult | None:
        """Deliver the change, if any (``None``: nothing to send)."""
        body = self.payload(alerts)
        if body is None:
            return None
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        error: str | None = None
        for attempt in range(1, self.retries + 2):
            request = urllib.request.Request(
                self.url,
                data=data,
                method="POST",
                headers={"Content-Type": "application/json", "User-Agent": "skillstate-alerts"},
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    response.read(1024)
                self._delivered = {_key(a) for a in alerts}
                return WebhookResult(True, attempt)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                error = " ".join(str(getattr(exc, "reason", exc)).split())
            if attempt <= self.retries:
                self.sleep(self.backoff * 2 ** (attempt - 1))
        return WebhookResult(False, self.retries + 1, error)


class OTelAlerts:
    """An OpenTelemetry gauge ``skillstate.alerts.firing`` (attribute ``rule``): the
    latest evaluation's counts, read by the meter provider's reader when it collects.

    ``meter_provider`` defaults to the global one (what ``opentelemetry-instrument`` or
    your own setup installed); needs ``skillstate[otel]``.
    """

    def __init__(self, meter_provider: Any = None) -> None:
        try:
            from opentelemetry import metrics
        except ImportError as exc:  # pragma: no cover - the extra is missing
            raise UsageError("OpenTelemetry metrics need: pip install 'skillstate[otel]'") from exc
        from skillstate import __version__

        self._counts: dict[str, int] = count_by_rule([])
        meter = metrics.get_meter("skillstate", __version__, meter_provider)
        meter.create_observable_gauge(
            "skillstate.alerts.firing",
            callbacks=[self._observe],
            unit="{alert}",
            description="Alerts firing now, by rule.",
        )

    def update(self, alerts: list[Alert]) -> None:
        self._counts = count_by_rule(alerts)

    def _observe(self, _options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation

        return [Observation(count, {"rule": rule}) for rule, count in self._counts.items()]


def prometheus_text(alerts: list[Alert], *, tasks_by_status: dict[str, int] | None = None) -> str:
    """The Prometheus text exposition (format 0.0.4) of ``alerts``' counts by rule,
    and of the tasks by status when given."""
    lines = [
        f"# HELP {METRIC} Alerts firing now, by rule.",
        f"# TYPE {METRIC} gauge",
        *(f'{METRIC}{{rule="{rule}"}} {n}' for rule, n in count_by_rule(alerts).items()),
    ]
    if tasks_by_status is not None:
        lines += [
            "# HELP skillstate_tasks Tasks in the store, by status.",
            "# TYPE skillstate_tasks gauge",
            *(
                f'skillstate_tasks{{status="{_label(status)}"}} {n}'
                for status, n in sorted(tasks_by_status.items())
            ),
        ]
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    """A label value escaped as the exposition format wants."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
