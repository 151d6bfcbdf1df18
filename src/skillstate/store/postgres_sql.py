"""The SQL of the PostgreSQL store: its migrations and every statement it runs.

Kept apart from :mod:`skillstate.store.postgres` (the store's logic) so each stays
readable. Nothing here imports psycopg.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "Queries", "quote"]


def quote(identifier: str) -> str:
    """``identifier`` as a quoted SQL identifier."""
    return '"' + identifier.replace('"', '""') + '"'


# Versioned, append-only: a new schema change is a new entry, never an edit.
# Scripts run with ``search_path`` set to the store's schema, so they name no schema.
# ``COLLATE "C"`` makes ORDER BY task_id byte order, the order ``sorted()`` gives
# in the other backends, whatever the database's default collation.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE tasks (
            task_id     TEXT COLLATE "C" PRIMARY KEY,
            version     BIGINT NOT NULL,
            updated_at  TIMESTAMPTZ NOT NULL,
            head        TEXT,
            head_z      BYTEA,
            chain_len   INTEGER NOT NULL DEFAULT 0,
            chain_bytes BIGINT NOT NULL DEFAULT 0,
            CHECK (num_nonnulls(head, head_z) = 1)
        ) WITH (
            -- room on the page to rewrite the head in place (HOT updates)
            fillfactor = 50,
            -- Every commit rewrites the head, so a large (TOASTed) head leaves a dead
            -- copy per commit until vacuum: vacuum after a fixed number of updates,
            -- not after a fraction of the table, so the garbage stays bounded.
            autovacuum_vacuum_scale_factor = 0,
            autovacuum_vacuum_threshold = 1000,
            toast.autovacuum_vacuum_scale_factor = 0,
            toast.autovacuum_vacuum_threshold = 1000
        );
        CREATE TABLE checkpoints (
            task_id    TEXT COLLATE "C" NOT NULL,
            version    BIGINT NOT NULL,
            snapshot   TEXT,
            snapshot_z BYTEA,
            patch      TEXT,
            patch_z    BYTEA,
            created_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (task_id, version)
        );
        CREATE TABLE events (
            task_id TEXT COLLATE "C" NOT NULL,
            version BIGINT NOT NULL,
            event   TEXT,
            event_z BYTEA,
            PRIMARY KEY (task_id, version),
            CHECK (num_nonnulls(event, event_z) = 1)
        );
        -- zlib output does not compress again: keep TOAST from trying.
        ALTER TABLE tasks ALTER COLUMN head_z SET STORAGE EXTERNAL;
        ALTER TABLE checkpoints ALTER COLUMN snapshot_z SET STORAGE EXTERNAL,
                                ALTER COLUMN patch_z SET STORAGE EXTERNAL;
        ALTER TABLE events ALTER COLUMN event_z SET STORAGE EXTERNAL;
        CREATE TABLE leases (
            task_id    TEXT COLLATE "C" PRIMARY KEY,
            worker     TEXT NOT NULL,
            expires_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE artifacts (
            ref        TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            data       BYTEA NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        # Checksums: the head's and each version's (the state it is, snapshot or
        # delta); NULL for versions written before. Fencing: a lease row keeps its
        # generation after a release, which sets worker to NULL. Leases held when
        # this runs keep their holder, with generation 0.
        2,
        """
        ALTER TABLE tasks ADD COLUMN digest TEXT;
        ALTER TABLE checkpoints ADD COLUMN digest TEXT;
        ALTER TABLE leases ADD COLUMN generation BIGINT NOT NULL DEFAULT 0,
                           ALTER COLUMN worker DROP NOT NULL;
        """,
    ),
    (
        # The inbox (Store.post): one row per message, numbered per task from 1. The
        # number comes from a counter row per task (inboxes), bumped by an upsert:
        # concurrent posts queue on that row's lock, never on the task's (which every
        # commit updates), so a post never slows the worker holding the task.
        3,
        """
        CREATE TABLE inboxes (
            task_id  TEXT COLLATE "C" PRIMARY KEY,
            last_seq BIGINT NOT NULL
        );
        CREATE TABLE inbox (
            task_id   TEXT COLLATE "C" NOT NULL,
            seq       BIGINT NOT NULL,
            kind      TEXT NOT NULL,
            body      TEXT NOT NULL,
            posted_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (task_id, seq)
        );
        """,
    ),
)


class Queries:
    """Every statement, with the schema spelled into its table names once.

    Table names are qualified rather than relying on ``search_path`` so that a
    pooled connection (or a transaction-mode pgbouncer) can never point a query
    at another store's tables.
    """

    def __init__(self, schema: str) -> None:
        s = quote(schema)
        tasks, checkpoints, events = f"{s}.tasks", f"{s}.checkpoints", f"{s}.events"
        leases, artifacts = f"{s}.leases", f"{s}.artifacts"
        inboxes, inbox = f"{s}.inboxes", f"{s}.inbox"
        self.schema = s
        self.migrations = f"{s}.schema_migrations"

        self.load = (
            "SELECT version, head, head_z, updated_at, digest, chain_len, chain_bytes "
            f"FROM {tasks} WHERE task_id = %s"
        )
        # Why a commit wrote nothing: the head's version and the lease, read afterwards.
        self.refused = f"""
            SELECT (SELECT version FROM {tasks} WHERE task_id = %(task_id)s),
                   l.worker, l.generation
            FROM (SELECT 1) one LEFT JOIN {leases} l ON l.task_id = %(task_id)s
        """

        # The fencing check, shared by both commit statements: the lease row, if it is
        # held with the commit's generation, locked FOR SHARE until the commit ends. A
        # claim that moves the generation concurrently either waits for this commit
        # or, having committed first, makes this lock re-read its new row, which no
        # longer matches: no commit with an old fence lands after the claim returns.
        fence = f"""
            fence AS (
                SELECT 1 FROM {leases}
                WHERE task_id = %(task_id)s AND worker IS NOT NULL
                  AND generation = %(fence)s::bigint
                FOR SHARE
            )"""
        fenced = "(%(fence)s::bigint IS NULL OR EXISTS (SELECT 1 FROM fence))"

        # ``forced`` is take_snapshot() with an empty chain. Past that, its rule only
        # compares the (never negative) counters with thresholds, so a snapshot forced
        # at (0, 0) is forced at any counters and the SQL needs only the thresholds.
        # Counters made negative outside skillstate (load refuses them) force one
        # too: a repair's commit resets them rather than carrying the damage on.
        snapshot = (
            "(%(forced)s OR chain_len < 0 OR chain_bytes < 0 "
            "OR chain_len + 1 > %(max_chain)s "
            "OR chain_bytes + %(patch_len)s >= %(state_len)s)"
        )
        # chain_len is 0 after the update exactly when this version is a snapshot.
        # The snapshot body is the compressed state (snapshot_z) when the client sent
        # one, else the head text: a state under 768 characters, or (when the client's
        # guess of the counters was stale) a state the client did not compress.
        self.advance = f"""
            WITH {fence}, head AS (
                UPDATE {tasks} SET
                    version = %(version)s, head = %(head)s::text, head_z = %(head_z)s::bytea,
                    digest = %(digest)s::text, updated_at = now(),
                    chain_len = CASE WHEN {snapshot} THEN 0 ELSE chain_len + 1 END,
                    chain_bytes = CASE WHEN {snapshot} THEN 0
                                  ELSE chain_bytes + %(patch_len)s END
                WHERE task_id = %(task_id)s AND version = %(expected)s AND {fenced}
                RETURNING chain_len = 0 AS snapshot, chain_len, chain_bytes, updated_at
            ), checkpoint AS (
                INSERT INTO {checkpoints}
                    (task_id, version, snapshot, snapshot_z, patch, patch_z, created_at, digest)
                SELECT %(task_id)s, %(version)s,
                       CASE WHEN head.snapshot AND %(snapshot_z)s::bytea IS NULL
                            THEN %(head)s::text END,
                       CASE WHEN head.snapshot THEN %(snapshot_z)s::bytea END,
                       %(patch)s::text, %(patch_z)s::bytea, head.updated_at,
                       %(version_digest)s::text
                FROM head
            ), event AS (
                INSERT INTO {events} (task_id, version, event, event_z)
                SELECT %(task_id)s, %(version)s, %(event)s::text, %(event_z)s::bytea FROM head
            )
            SELECT chain_len, chain_bytes FROM head
        """
        self.create = f"""
            WITH {fence}, head AS (
                INSERT INTO {tasks}
                    (task_id, version, updated_at, head, head_z, chain_len, chain_bytes, digest)
                SELECT %(task_id)s::text, %(version)s::bigint, now(), %(head)s::text,
                       %(head_z)s::bytea, %(chain_len)s::integer, %(chain_bytes)s::bigint,
                       %(digest)s::text
                WHERE {fenced}
                ON CONFLICT (task_id) DO NOTHING
                RETURNING chain_len, chain_bytes, updated_at
            ), checkpoint AS (
                INSERT INTO {checkpoints}
                    (task_id, version, snapshot, snapshot_z, patch, patch_z, created_at, digest)
                SELECT %(task_id)s, %(version)s, %(snapshot)s::text, %(snapshot_z)s::bytea,
                       %(patch)s::text, %(patch_z)s::bytea, head.updated_at,
                       %(version_digest)s::text
                FROM head
            ), event AS (
                INSERT INTO {events} (task_id, version, event, event_z)
                SELECT %(task_id)s, %(version)s, %(event)s::text, %(event_z)s::bytea FROM head
            )
            SELECT chain_len, chain_bytes FROM head
        """

        # The version's rows from the greatest snapshot at or before it. Without any
        # snapshot only the version itself comes back, and rebuild() reports the
        # broken chain rather than this returning "no such version".
        self.chain = f"""
            SELECT version, snapshot, snapshot_z, patch, patch_z, created_at, digest
            FROM {checkpoints}
            WHERE task_id = %(task_id)s AND version <= %(version)s
              AND version >= coalesce(
                  (SELECT max(version) FROM {checkpoints}
                   WHERE task_id = %(task_id)s AND version <= %(version)s
                     AND num_nonnulls(snapshot, snapshot_z) > 0),
                  %(version)s)
            ORDER BY version
        """
        self.checkpoints = f"""
            SELECT version, num_nonnulls(snapshot, snapshot_z) > 0,
                   coalesce(octet_length(snapshot), octet_length(snapshot_z),
                            octet_length(patch), octet_length(patch_z), 0),
                   created_at
            FROM {checkpoints} WHERE task_id = %s ORDER BY version
        """
        self.events = f"""
            SELECT e.version, e.event, e.event_z, c.patch, c.patch_z FROM {events} e
            LEFT JOIN {checkpoints} c ON c.task_id = e.task_id AND c.version = e.version
            WHERE e.task_id = %s AND e.version > %s ORDER BY e.version
        """
        self.tasks = f"SELECT task_id FROM {tasks} ORDER BY task_id"
        self.heads = f"""
            SELECT t.task_id, t.version, t.updated_at, t.head, t.head_z,
                   l.task_id IS NOT NULL, l.worker,
                   extract(epoch FROM l.expires_at)::float8, l.generation
            FROM {tasks} t LEFT JOIN {leases} l ON l.task_id = t.task_id
            ORDER BY t.task_id
        """

        self.lock_task = f"SELECT version FROM {tasks} WHERE task_id = %s FOR UPDATE"
        self.prune_rows = (
            f"SELECT version, num_nonnulls(snapshot, snapshot_z) > 0, created_at "
            f"FROM {checkpoints} "
            "WHERE task_id = %s ORDER BY version"
        )
        self.prune_delete = (
            f"DELETE FROM {checkpoints} WHERE task_id = %s AND version = ANY(%s::bigint[])"
        )

        # One statement, judged by the server's clock: take the lease when it is free
        # (never claimed, or released), ours already, or expired; otherwise return
        # nothing and leave it alone. The generation moves on unless the holder renews
        # (chain.claim_generation). A held lease whose expiry is not finite or lies
        # beyond any claim's reach is damaged: never overwritten here, reported by
        # the caller from the lease statement.
        self.claim = f"""
            INSERT INTO {leases} AS l (task_id, worker, expires_at, generation)
            VALUES (%(task_id)s, %(worker)s, now() + make_interval(secs => %(ttl)s), 1)
            ON CONFLICT (task_id) DO UPDATE
                SET worker = excluded.worker, expires_at = excluded.expires_at,
                    generation = CASE WHEN l.worker = excluded.worker THEN l.generation
                                      ELSE l.generation + 1 END
                WHERE l.worker IS NULL
                   OR (isfinite(l.expires_at) AND l.generation >= 0
                       AND l.expires_at <= now() + make_interval(secs => %(horizon)s)
                       AND (l.worker = excluded.worker OR l.expires_at <= now()))
            RETURNING expires_at, generation
        """
        # Expiry as seconds since the epoch: ``infinity`` reads as inf instead of
        # failing in the driver, so a damaged lease is reported, not a crash.
        lease_columns = "worker, extract(epoch FROM expires_at)::float8 AS expires, generation"
        self.lease = f"""
            SELECT {lease_columns}, expires_at <= now() FROM {leases} WHERE task_id = %s
        """
        self.release = f"UPDATE {leases} SET worker = NULL WHERE task_id = %s AND worker = %s"
        # An unreadable (negative) generation is replaced by the clock's seconds, as
        # chain.repaired_generation does.
        self.force_release = f"""
            WITH dropped AS (
                SELECT task_id, {lease_columns} FROM {leases}
                WHERE task_id = %s AND worker IS NOT NULL FOR UPDATE
            )
            UPDATE {leases} l SET worker = NULL,
                generation = CASE WHEN l.generation >= 0 THEN l.generation
                             ELSE floor(extract(epoch FROM now()))::bigint END
            FROM dropped WHERE l.task_id = dropped.task_id
            RETURNING dropped.worker, dropped.expires, dropped.generation
        """

        # Store.rewrite: the head row locked first (a commit or prune of the task waits
        # for the rewrite's transaction), then every body of the task.
        self.rewrite_head = (
            f"SELECT version, head, head_z, digest FROM {tasks} WHERE task_id = %s FOR UPDATE"
        )
        self.rewrite_rows = (
            f"SELECT version, snapshot, snapshot_z, patch, patch_z, digest FROM {checkpoints} "
            "WHERE task_id = %s ORDER BY version"
        )
        self.rewrite_events = (
            f"SELECT version, event, event_z FROM {events} WHERE task_id = %s ORDER BY version"
        )
        self.rewrite_set_head = (
            f"UPDATE {tasks} SET head = %s, head_z = %s, digest = %s WHERE task_id = %s"
        )
        self.rewrite_set_row = (
            f"UPDATE {checkpoints} SET snapshot = %s, snapshot_z = %s, patch = %s, "
            "patch_z = %s, digest = %s WHERE task_id = %s AND version = %s"
        )
        self.rewrite_set_event = (
            f"UPDATE {events} SET event = %s, event_z = %s WHERE task_id = %s AND version = %s"
        )
        self.artifact_refs = f'SELECT ref FROM {artifacts} ORDER BY ref COLLATE "C"'
        self.replace_artifact = f"UPDATE {artifacts} SET data = %s WHERE ref = %s"

        self.put_artifact = (
            f"INSERT INTO {artifacts} (ref, media_type, data) VALUES (%s, %s, %s) "
            # created_at becomes the last put: what gc's grace period is measured from.
            "ON CONFLICT (ref) DO UPDATE SET created_at = now()"
        )
        self.get_artifact = f"SELECT data FROM {artifacts} WHERE ref = %s"

        # Store.post in one statement: nothing is written unless the task exists (the
        # counter's upsert reads from ``task``); the upsert's row lock orders posts.
        self.post = f"""
            WITH task AS (
                SELECT 1 FROM {tasks} WHERE task_id = %(task_id)s
            ), counter AS (
                INSERT INTO {inboxes} AS i (task_id, last_seq)
                SELECT %(task_id)s, 1 FROM task
                ON CONFLICT (task_id) DO UPDATE SET last_seq = i.last_seq + 1
                RETURNING last_seq
            ), message AS (
                INSERT INTO {inbox} (task_id, seq, kind, body, posted_at)
                SELECT %(task_id)s, last_seq, %(kind)s, %(body)s, now() FROM counter
            )
            SELECT last_seq FROM counter
        """
        # One round trip on the hot path (the run loop asks before every step): no row
        # for an unknown task, one row of NULLs for a task with nothing unread.
        self.inbox = f"""
            SELECT i.seq, i.kind, i.body, i.posted_at FROM {tasks} t
            LEFT JOIN {inbox} i ON i.task_id = t.task_id AND i.seq > %s
            WHERE t.task_id = %s ORDER BY i.seq
        """
