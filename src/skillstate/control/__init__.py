"""Long-running control: what people and clocks do to a task between its steps.

* :mod:`skillstate.control.approvals`: a call that waits for a person's approval
  (``Skill(approval=...)``, ``skillstate approve`` / ``reject``).
* :mod:`skillstate.control.gates`, :mod:`~skillstate.control.tool_approvals`: one tool
  of a skill whose calls wait for a person's approval (``gated(tool, approval=...)``).
* :mod:`skillstate.control.waits`: durable waits (``WaitUntil``, ``WaitFor``): the task
  waits in the store, never in a sleeping process; a timeout escalates.
* :mod:`skillstate.control.signals`: the typed signals an agent declares, delivered
  through the task's inbox (``skillstate signal``).
* :mod:`skillstate.control.inbox`: messages to a running task (``skillstate send``,
  ``Agent(messages=...)``, :mod:`~skillstate.control.strategy`) and cancel
  (``skillstate cancel [--compensate]``), posted to the task's inbox in the store and
  taken at its next step boundary.
* :mod:`skillstate.control.schedules`, :mod:`~skillstate.control.schedule_registry`,
  :mod:`~skillstate.control.ticks`: schedules (``skillstate schedule``), kept in the
  store, ticked by Celery beat (:mod:`skillstate.workers.beat`), one task per tick.

Each module holds one feature's logic; the runtime calls it through thin hooks, so
the step itself (decide, act, settle, commit) stays in :mod:`skillstate.engine`.
"""
