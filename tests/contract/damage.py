"""Damage written straight into each backend, the way an outside edit would.

The contract tests about damaged records (checksums, heads that do not belong to
their row, broken audit trails, damaged leases) are written once, against the
:class:`Damage` interface; each backend implements it by editing its own storage
(SQL, Redis commands, files, the memory store's dicts), never through the Store
protocol. That is what makes the tests meaningful: the store must notice damage
it did not write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import pytest
import yaml

from skillstate.store.base import Store
from skillstate.store.chain import digest, dumps

LeaseDamage = Literal["far", "garbage"]
"""``far``: an expiry absurdly far in the future; ``garbage``: one that is not a time."""


class Damage(Protocol):
    def set_head(self, store: Store, task_id: str, text: str, *, rehash: bool = False) -> None:
        """Replace the stored head with ``text``; ``rehash`` also stores its checksum."""

    def set_snapshot(self, store: Store, task_id: str, version: int, text: str) -> None:
        """Replace the stored snapshot body of ``version`` (a snapshot) with ``text``."""

    def set_patch(self, store: Store, task_id: str, version: int, text: str) -> None:
        """Replace the stored patch of ``version`` (a delta) with ``text``."""

    def break_event(self, store: Store, task_id: str, version: int) -> None:
        """Make the stored event of ``version`` text that does not parse."""

    def drop_event(self, store: Store, task_id: str, version: int) -> None:
        """Delete the stored event of ``version``."""

    def drop_checksums(self, store: Store, task_id: str) -> None:
        """Remove every checksum of the task, as if written before checksums existed."""

    def damage_lease(self, store: Store, task_id: str, kind: LeaseDamage) -> None:
        """Damage the expiry of the task's (held) lease."""

    def set_counter(self, store: Store, task_id: str, name: str, value: Any) -> None:
        """Store ``value`` as the head's chain counter ``name`` (chain_len, chain_bytes);
        skips the test when the backend's column cannot hold it."""


FAR_FUTURE_SECONDS = 1e12  # year ~33700


# ---------------------------------------------------------------------- memory


class MemoryDamage:
    def set_head(self, store: Store, task_id: str, text: str, *, rehash: bool = False) -> None:
        task = cast("Any", store)._tasks[task_id]
        task.head = text
        if rehash:
            task.digest = digest(text)

    def set_snapshot(self, store: Store, task_id: str, version: int, text: str) -> None:
        rows = cast("Any", store)._tasks[task_id].rows
        assert rows[version].snapshot is not None
        rows[version] = dataclasses.replace(rows[version], snapshot=text)

    def set_patch(self, store: Store, task_id: str, version: int, text: str) -> None:
        rows = cast("Any", store)._tasks[task_id].rows
        assert rows[version].snapshot is None
        rows[version] = dataclasses.replace(rows[version], patch=text)

    def break_event(self, store: Store, task_id: str, version: int) -> None:
        events = cast("Any", store)._tasks[task_id].events
        events[:] = [(v, "{not json" if v == version else text) for v, text in events]

    def drop_event(self, store: Store, task_id: str, version: int) -> None:
        events = cast("Any", store)._tasks[task_id].events
        events[:] = [(v, text) for v, text in events if v != version]

    def drop_checksums(self, store: Store, task_id: str) -> None:
        task = cast("Any", store)._tasks[task_id]
        task.digest = None
        task.rows = {v: dataclasses.replace(row, digest=None) for v, row in task.rows.items()}

    def damage_lease(self, store: Store, task_id: str, kind: LeaseDamage) -> None:
        record = cast("Any", store)._leases[task_id]
        record.expires = FAR_FUTURE_SECONDS if kind == "far" else "soon"

    def set_counter(self, store: Store, task_id: str, name: str, value: Any) -> None:
        setattr(cast("Any", store)._tasks[task_id], name, value)


# ---------------------------------------------------------------------- sqlite


class SQLiteDamage:
    @staticmethod
    def _sql(store: Store, query: str, *args: Any) -> None:
        cast("Any", store)._conn.execute(query, args)

    def set_head(self, store: Store, task_id: str, text: str, *, rehash: bool = False) -> None:
        self._sql(store, "UPDATE tasks SET head = ? WHERE task_id = ?", text, task_id)
        if rehash:
            self._sql(store, "UPDATE tasks SET digest = ? WHERE task_id = ?", digest(text), task_id)

    def set_snapshot(self, store: Store, task_id: str, version: int, text: str) -> None:
        self._sql(
            store,
            "UPDATE versions SET snapshot = ? WHERE task_id = ? AND version = ?",
            text,
            task_id,
            version,
        )

    def set_patch(self, store: Store, task_id: str, version: int, text: str) -> None:
        self._sql(
            store,
            "UPDATE versions SET patch = ? WHERE task_id = ? AND version = ?",
            text,
            task_id,
            version,
        )

    def break_event(self, store: Store, task_id: str, version: int) -> None:
        self._sql(
            store,
            "UPDATE versions SET event = '{not json' WHERE task_id = ? AND version = ?",
            task_id,
            version,
        )

    def drop_event(self, store: Store, task_id: str, version: int) -> None:
        # One row holds a version's event and checkpoint: the event cannot go alone.
        self._sql(store, "DELETE FROM versions WHERE task_id = ? AND version = ?", task_id, version)

    def drop_checksums(self, store: Store, task_id: str) -> None:
        self._sql(store, "UPDATE tasks SET digest = NULL WHERE task_id = ?", task_id)
        self._sql(store, "UPDATE versions SET digest = NULL WHERE task_id = ?", task_id)

    def damage_lease(self, store: Store, task_id: str, kind: LeaseDamage) -> None:
        value: Any = FAR_FUTURE_SECONDS * 1e8 if kind == "far" else "soon"
        self._sql(store, "UPDATE leases SET expires_at = ? WHERE task_id = ?", value, task_id)

    def set_counter(self, store: Store, task_id: str, name: str, value: Any) -> None:
        assert name in {"chain_len", "chain_bytes"}
        self._sql(store, f"UPDATE tasks SET {name} = ? WHERE task_id = ?", value, task_id)


# ---------------------------------------------------------------------- files


class FilesDamage:
    @staticmethod
    def _dir(store: Store, task_id: str) -> Path:
        from skillstate.store.files import FilesStore, task_dir_name

        assert isinstance(store, FilesStore)
        return store.root / task_dir_name(task_id)

    def set_head(self, store: Store, task_id: str, text: str, *, rehash: bool = False) -> None:
        path = self._dir(store, task_id) / "head.json"
        head = json.loads(path.read_text())
        head["state"] = json.loads(text)
        if rehash:
            head["digest"] = digest(dumps(head["state"]))
        path.write_text(json.dumps(head, ensure_ascii=False))

    def set_snapshot(self, store: Store, task_id: str, version: int, text: str) -> None:
        path = self._dir(store, task_id) / f"state_step_{version:04d}.yaml"
        doc = yaml.safe_load(path.read_text())
        assert doc["stored_as"] == "snapshot"
        doc["state"] = json.loads(text)
        path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))

    def set_patch(self, store: Store, task_id: str, version: int, text: str) -> None:
        path = self._dir(store, task_id) / f"state_step_{version:04d}.yaml"
        doc = yaml.safe_load(path.read_text())
        assert doc["stored_as"] == "delta"
        doc["patch"] = json.loads(text)
        path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))

    def _rewrite_events(self, store: Store, task_id: str, version: int, new: str | None) -> None:
        path = self._dir(store, task_id) / "events.jsonl"
        lines = []
        for line in path.read_text().splitlines():
            if json.loads(line)["version"] != version:
                lines.append(line)
            elif new is not None:
                lines.append(new)
        path.write_text("".join(line + "\n" for line in lines))

    def break_event(self, store: Store, task_id: str, version: int) -> None:
        self._rewrite_events(store, task_id, version, '{"task_id": "half an event')

    def drop_event(self, store: Store, task_id: str, version: int) -> None:
        self._rewrite_events(store, task_id, version, None)

    def drop_checksums(self, store: Store, task_id: str) -> None:
        folder = self._dir(store, task_id)
        head = json.loads((folder / "head.json").read_text())
        head.pop("digest", None)
        (folder / "head.json").write_text(json.dumps(head, ensure_ascii=False))
        for path in folder.glob("state_step_*.yaml"):
            doc = yaml.safe_load(path.read_text())
            doc.pop("digest", None)
            path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))

    def damage_lease(self, store: Store, task_id: str, kind: LeaseDamage) -> None:
        path = self._dir(store, task_id) / "lease.json"
        lease = json.loads(path.read_text())
        lease["expires_at"] = "9999-12-31T00:00:00+00:00" if kind == "far" else "soon"
        path.write_text(json.dumps(lease))

    def set_counter(self, store: Store, task_id: str, name: str, value: Any) -> None:
        path = self._dir(store, task_id) / "head.json"
        head = json.loads(path.read_text())
        head[name] = value
        path.write_text(json.dumps(head, ensure_ascii=False))


# ---------------------------------------------------------------------- postgres


class PostgresDamage:
    @staticmethod
    def _sql(store: Store, query: str, *args: Any) -> None:
        schema = cast("Any", store)._sql.schema
        with cast("Any", store)._connection() as conn:
            conn.execute(query.replace("S.", f"{schema}."), args)

    def set_head(self, store: Store, task_id: str, text: str, *, rehash: bool = False) -> None:
        self._sql(
            store, "UPDATE S.tasks SET head = %s, head_z = NULL WHERE task_id = %s", text, task_id
        )
        if rehash:
            self._sql(
                store, "UPDATE S.tasks SET digest = %s WHERE task_id = %s", digest(text), task_id
            )

    def set_snapshot(self, store: Store, task_id: str, version: int, text: str) -> None:
        self._sql(
            store,
            "UPDATE S.checkpoints SET snapshot = %s, snapshot_z = NULL "
            "WHERE task_id = %s AND version = %s",
            text,
            task_id,
            version,
        )

    def set_patch(self, store: Store, task_id: str, version: int, text: str) -> None:
        self._sql(
            store,
            "UPDATE S.checkpoints SET patch = %s, patch_z = NULL "
            "WHERE task_id = %s AND version = %s",
            text,
            task_id,
            version,
        )

    def break_event(self, store: Store, task_id: str, version: int) -> None:
        self._sql(
            store,
            "UPDATE S.events SET event = '{not json', event_z = NULL "
            "WHERE task_id = %s AND version = %s",
            task_id,
            version,
        )

    def drop_event(self, store: Store, task_id: str, version: int) -> None:
        self._sql(
            store, "DELETE FROM S.events WHERE task_id = %s AND version = %s", task_id, version
        )

    def drop_checksums(self, store: Store, task_id: str) -> None:
        self._sql(store, "UPDATE S.tasks SET digest = NULL WHERE task_id = %s", task_id)
        self._sql(store, "UPDATE S.checkpoints SET digest = NULL WHERE task_id = %s", task_id)

    def damage_lease(self, store: Store, task_id: str, kind: LeaseDamage) -> None:
        # timestamptz cannot hold text: "garbage" is the other value no claim writes.
        value = "5000-01-01 00:00:00+00" if kind == "far" else "infinity"
        self._sql(store, "UPDATE S.leases SET expires_at = %s WHERE task_id = %s", value, task_id)

    def set_counter(self, store: Store, task_id: str, name: str, value: Any) -> None:
        if type(value) is not int:
            pytest.skip(f"a PostgreSQL integer column cannot hold {str(value)[:20]!r}")
        assert name in {"chain_len", "chain_bytes"}
        self._sql(store, f"UPDATE S.tasks SET {name} = %s WHERE task_id = %s", value, task_id)


# ---------------------------------------------------------------------- redis


class RedisDamage:
    @staticmethod
    def _client(store: Store) -> Any:
        return cast("Any", store)._client

    @staticmethod
    def _key(store: Store, kind: str, task_id: str) -> str:
        return cast("str", cast("Any", store)._key(kind, task_id))

    def set_head(self, store: Store, task_id: str, text: str, *, rehash: bool = False) -> None:
        fields = {"head": text, **({"digest": digest(text)} if rehash else {})}
        self._client(store).hset(self._key(store, "task", task_id), mapping=fields)

    def set_snapshot(self, store: Store, task_id: str, version: int, text: str) -> None:
        self._client(store).hset(self._key(store, "snap", task_id), str(version), text)

    def set_patch(self, store: Store, task_id: str, version: int, text: str) -> None:
        key = self._key(store, "cp", task_id)
        kind, _, created, _ = self._client(store).hget(key, str(version)).split(b" ", 3)
        assert kind == b"D"
        record = b" ".join([kind, str(len(text)).encode(), created, text.encode()])
        self._client(store).hset(key, str(version), record)

    def break_event(self, store: Store, task_id: str, version: int) -> None:
        self._client(store).hset(self._key(store, "ev", task_id), str(version), "{not json")

    def drop_event(self, store: Store, task_id: str, version: int) -> None:
        self._client(store).hdel(self._key(store, "ev", task_id), str(version))

    def drop_checksums(self, store: Store, task_id: str) -> None:
        self._client(store).hdel(self._key(store, "task", task_id), "digest")
        self._client(store).delete(self._key(store, "sum", task_id))

    def damage_lease(self, store: Store, task_id: str, kind: LeaseDamage) -> None:
        value = str(int(FAR_FUTURE_SECONDS * 1000)) if kind == "far" else "soon"
        self._client(store).hset(self._key(store, "lease", task_id), "expires", value)

    def set_counter(self, store: Store, task_id: str, name: str, value: Any) -> None:
        self._client(store).hset(self._key(store, "task", task_id), name, str(value))


class ThroughSync:
    """An async backend's damage: the sync backend's, on a sync store over the same data.

    The async store under test is reached through a ``BlockingStore``; the damage is
    written by the synchronous store of the same kind opened on the same URL (the
    same schema or key prefix), or, for a ``ThreadedStore``, by the store it wraps.
    """

    def __init__(self, damage: Damage) -> None:
        self.damage = damage

    @contextlib.contextmanager
    def _sync(self, store: Store) -> Iterator[Store]:
        from skillstate.store import open_store
        from skillstate.store.aio import BlockingStore, ThreadedStore

        inner = store.store if isinstance(store, BlockingStore) else store
        if isinstance(inner, ThreadedStore):
            yield inner.store
            return
        opened = open_store(store.url, create=False)
        try:
            yield opened
        finally:
            opened.close()

    def set_head(self, store: Store, task_id: str, text: str, *, rehash: bool = False) -> None:
        with self._sync(store) as sync:
            self.damage.set_head(sync, task_id, text, rehash=rehash)

    def set_snapshot(self, store: Store, task_id: str, version: int, text: str) -> None:
        with self._sync(store) as sync:
            self.damage.set_snapshot(sync, task_id, version, text)

    def set_patch(self, store: Store, task_id: str, version: int, text: str) -> None:
        with self._sync(store) as sync:
            self.damage.set_patch(sync, task_id, version, text)

    def break_event(self, store: Store, task_id: str, version: int) -> None:
        with self._sync(store) as sync:
            self.damage.break_event(sync, task_id, version)

    def drop_event(self, store: Store, task_id: str, version: int) -> None:
        with self._sync(store) as sync:
            self.damage.drop_event(sync, task_id, version)

    def drop_checksums(self, store: Store, task_id: str) -> None:
        with self._sync(store) as sync:
            self.damage.drop_checksums(sync, task_id)

    def damage_lease(self, store: Store, task_id: str, kind: LeaseDamage) -> None:
        with self._sync(store) as sync:
            self.damage.damage_lease(sync, task_id, kind)

    def set_counter(self, store: Store, task_id: str, name: str, value: Any) -> None:
        with self._sync(store) as sync:
            self.damage.set_counter(sync, task_id, name, value)


DAMAGE: dict[str, Damage] = {
    "memory": MemoryDamage(),
    "sqlite": SQLiteDamage(),
    "files": FilesDamage(),
    "postgres": PostgresDamage(),
    "redis": RedisDamage(),
    "sqlite-async": ThroughSync(SQLiteDamage()),
    "postgres-async": ThroughSync(PostgresDamage()),
    "redis-async": ThroughSync(RedisDamage()),
}
"""Each backend's way of damaging what it stored (keys as in ``backends.BACKENDS``)."""
