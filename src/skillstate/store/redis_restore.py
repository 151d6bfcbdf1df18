"""``restore`` on the Redis stores, as an operation both drivers run (:mod:`.redis_ops`).

``WATCH`` on the task's hash, a check that the task is absent (or ``overwrite``),
then one ``MULTI``/``EXEC``: the old keys of the task are deleted and every record of
the restored one written, in the layout :mod:`skillstate.store.redis` describes.
Redis applies a transaction whole or not at all, so after a crash of the writer at
any instant the task is whole or absent (or still the old one). A task created or
changed meanwhile aborts the transaction, and the check runs again.
"""

from __future__ import annotations

from skillstate.errors import Conflict, TaskExists
from skillstate.store.redis_codec import pack_bytes
from skillstate.store.redis_io import Call, Exec, Layout, Ops, Watch
from skillstate.store.restoring import RestorePlan

__all__ = ["restore"]

_ATTEMPTS = 100


def restore(store: Layout, plan: RestorePlan, *, overwrite: bool) -> Ops[int]:
    from redis.exceptions import WatchError

    task_id = plan.task_id
    keys = {kind: store._key(kind, task_id) for kind in ("task", "cp", "snap", "sum", "ev")}
    keys["inbox"] = store._key("inbox", task_id)
    for _ in range(_ATTEMPTS):
        yield Watch((keys["task"],))
        try:
            exists = yield Call(("EXISTS", keys["task"]))
            if exists and not overwrite:
                yield Exec(())
                raise TaskExists(
                    f"task {task_id!r} already exists in {store.url}; nothing was written"
                )
            yield Exec(_writes(store, keys, plan))
        except WatchError:
            continue
        store._chains.pop(task_id, None)
        return plan.version
    raise Conflict(f"task {task_id!r} changed during each of {_ATTEMPTS} restore attempts")


def _writes(store: Layout, keys: dict[str, str], plan: RestorePlan) -> tuple[Call, ...]:
    calls = [Call(("DEL", *keys.values()))]
    for row in plan.rows:
        patch = pack_bytes(row.patch or "")
        created = row.created_at.isoformat().encode()
        if row.snapshot is not None:
            body = pack_bytes(row.snapshot)
            calls.append(Call(("HSET", keys["snap"], str(row.version), body)))
            record = b"S %d %s %s" % (len(body), created, patch)
        else:
            record = b"D %d %s %s" % (len(patch), created, patch)
        calls.append(Call(("HSET", keys["cp"], str(row.version), record)))
        calls.append(Call(("HSET", keys["sum"], str(row.version), row.digest)))
    for event in plan.events:
        calls.append(Call(("HSET", keys["ev"], str(event.version), pack_bytes(event.text))))
    for m in plan.inbox:
        kind = m.kind.replace('"', "")  # a kind is a checked lower-case name
        text = f'{{"kind":"{kind}","at":"{m.at.isoformat()}","body":{m.body}}}'
        calls.append(Call(("RPUSH", keys["inbox"], text.encode())))
    calls.append(Call(("ZADD", store._key("tasks"), 0, plan.task_id)))
    calls.append(
        Call(
            (
                "HSET",
                keys["task"],
                "version",
                plan.version,
                "head",
                plan.head,
                "chain_len",
                plan.chain_len,
                "chain_bytes",
                plan.chain_bytes,
                "updated_at",
                plan.updated_at.isoformat(),
                "digest",
                plan.head_digest,
            )
        )
    )
    return tuple(calls)
