"""Each session's counts, kept with its steps: how many steps, mutations and held requests it
has, its last step number and when its last step was journaled.

Listing sessions must not cost more as the journal grows (`SELECT session_id, count(*) FROM
steps GROUP BY 1` read every step ever journaled on every call), so every journal keeps one
`session_counts` row per session that has steps, changed by triggers of the database itself
in the same transaction as the step: an insert counts it, a change of `action` or
`is_mutation` moves it, a delete uncounts it. Triggers, and not the writer, so that every
way a step is written (one row, a batch, a set-based UPDATE, another replica) is counted,
and a step inserted by hand with `sqlite3` or `psql` too.

The counts are a row of their own, not columns of `sessions`: a `sessions` row is hash-chained
(`chain`), and a counter in it would add a chain entry, a version of the session, for every
step. The counts are derived data; `verify` does not vouch for them (the steps it vouches
for are what they count).

`held` counts the steps held for a person (action `hold`), whatever was decided, as
`undoproxy exec` reports them; `last_at` is the `created_at` of the session's newest step
(retention measures a session's idleness by it).
"""

from __future__ import annotations

import aiosqlite

TABLE = """
CREATE TABLE session_counts (
    session_id TEXT PRIMARY KEY,
    steps INTEGER NOT NULL DEFAULT 0,
    mutations INTEGER NOT NULL DEFAULT 0,
    held INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER NOT NULL DEFAULT 0,
    last_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_state ON sessions (state, created_at, id);
INSERT INTO session_counts (session_id, steps, mutations, held, last_seq, last_at)
    SELECT session_id, count(*), sum(is_mutation <> 0), sum(coalesce(action, '') = 'hold'),
           max(seq), max(created_at)
    FROM steps GROUP BY session_id
"""

_HELD = "(coalesce({row}.action, '') = 'hold')"
_MUTATION = "({row}.is_mutation <> 0)"
# SQLite's triggers (one statement each: the migration's SQL is split on semicolons, so they
# are created by `create_sqlite_triggers`, in the migration's transaction).
SQLITE_TRIGGERS = (
    "CREATE TRIGGER session_counts_insert AFTER INSERT ON steps BEGIN "
    "INSERT OR IGNORE INTO session_counts (session_id) VALUES (NEW.session_id); "
    "UPDATE session_counts SET steps = steps + 1, "
    f"mutations = mutations + {_MUTATION.format(row='NEW')}, "
    f"held = held + {_HELD.format(row='NEW')}, "
    "last_seq = max(last_seq, NEW.seq), last_at = max(last_at, NEW.created_at) "
    "WHERE session_id = NEW.session_id; END",
    "CREATE TRIGGER session_counts_update AFTER UPDATE OF action, is_mutation ON steps BEGIN "
    "UPDATE session_counts SET "
    f"mutations = mutations + {_MUTATION.format(row='NEW')} - {_MUTATION.format(row='OLD')}, "
    f"held = held + {_HELD.format(row='NEW')} - {_HELD.format(row='OLD')} "
    "WHERE session_id = NEW.session_id; END",
    "CREATE TRIGGER session_counts_delete AFTER DELETE ON steps BEGIN "
    "UPDATE session_counts SET steps = steps - 1, "
    f"mutations = mutations - {_MUTATION.format(row='OLD')}, "
    f"held = held - {_HELD.format(row='OLD')} "
    "WHERE session_id = OLD.session_id; END",
)


async def create_sqlite_triggers(conn: aiosqlite.Connection) -> None:
    """The counting triggers (migration 005, inside its transaction)."""
    for statement in SQLITE_TRIGGERS:
        await conn.execute(statement)


# PostgreSQL: the same table and one PL/pgSQL function behind three triggers.
POSTGRES = """
CREATE TABLE session_counts (
    session_id text PRIMARY KEY,
    steps bigint NOT NULL DEFAULT 0,
    mutations bigint NOT NULL DEFAULT 0,
    held bigint NOT NULL DEFAULT 0,
    last_seq integer NOT NULL DEFAULT 0,
    last_at double precision NOT NULL DEFAULT 0
);
CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_state ON sessions (state, created_at, id);
INSERT INTO session_counts (session_id, steps, mutations, held, last_seq, last_at)
    SELECT session_id, count(*), count(*) FILTER (WHERE is_mutation <> 0),
           count(*) FILTER (WHERE action = 'hold'), max(seq), max(created_at)
    FROM steps GROUP BY session_id;
CREATE FUNCTION undoproxy_count_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO session_counts AS c (session_id, steps, mutations, held, last_seq, last_at)
        VALUES (NEW.session_id, 1, (NEW.is_mutation <> 0)::int,
                (NEW.action IS NOT DISTINCT FROM 'hold')::int, NEW.seq, NEW.created_at)
        ON CONFLICT (session_id) DO UPDATE SET
            steps = c.steps + 1,
            mutations = c.mutations + excluded.mutations,
            held = c.held + excluded.held,
            last_seq = greatest(c.last_seq, excluded.last_seq),
            last_at = greatest(c.last_at, excluded.last_at);
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE session_counts SET
            mutations = mutations + (NEW.is_mutation <> 0)::int - (OLD.is_mutation <> 0)::int,
            held = held + (NEW.action IS NOT DISTINCT FROM 'hold')::int
                        - (OLD.action IS NOT DISTINCT FROM 'hold')::int
        WHERE session_id = NEW.session_id;
    ELSE
        UPDATE session_counts SET
            steps = steps - 1,
            mutations = mutations - (OLD.is_mutation <> 0)::int,
            held = held - (OLD.action IS NOT DISTINCT FROM 'hold')::int
        WHERE session_id = OLD.session_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER session_counts_insert_delete AFTER INSERT OR DELETE ON steps
    FOR EACH ROW EXECUTE FUNCTION undoproxy_count_steps();
CREATE TRIGGER session_counts_update AFTER UPDATE OF action, is_mutation ON steps
    FOR EACH ROW
    WHEN (OLD.action IS DISTINCT FROM NEW.action OR OLD.is_mutation <> NEW.is_mutation)
    EXECUTE FUNCTION undoproxy_count_steps();
"""
