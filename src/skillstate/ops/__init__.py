"""Operations: what running many long tasks needs beyond storage (issue 29).

Each feature is its own module, imported where it is used (this package imports
nothing at start-up, so ``skillstate --help`` and the engine stay light):

- :mod:`skillstate.ops.rules`: the alert rules and their configuration;
- :mod:`skillstate.ops.alerts`: evaluating the rules over a store;
- :mod:`skillstate.ops.sinks`: where firing alerts go (webhook, OpenTelemetry,
  Prometheus text);
- :mod:`skillstate.ops.budgets`: per-task and per-agent budgets (a warning at a
  threshold, a stop at the limit).
- :mod:`skillstate.ops.portable`: reading a task out of a store whole and restoring
  it into another (``import``, ``copy``);
- :mod:`skillstate.ops.archive`: the checksummed, versioned export file.
- :mod:`skillstate.ops.spotchecks`: which verified steps people review (marks
  computed on read); :mod:`skillstate.ops.review`: their verdicts, one audited record
  per agent; :mod:`skillstate.ops.spot_report`: the precision of verify they measure.
"""
