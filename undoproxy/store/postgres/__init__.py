"""The journal on PostgreSQL, shared by any number of replicas (`store.url`).

`journal` (PgJournal), `writer` (the write path and the hash chain), `schema` (migrations
under an advisory lock, lock keys), `sql` (SQLite's SQL as PostgreSQL runs it), `relay`
(events across replicas: LISTEN/NOTIFY), `replicas` (heartbeats, settling a dead replica),
`verify` (the hash chain check).
"""
