"""The journal: its interface (`base.Store`) and two stores behind it, picked by `factory`
from the config — SQLite for one process (`store.path`: `schema`, the one write path
`sqlite_writer` with its writer process `sqlite_child`, `journal`, the one-process-per-journal
`lock`) and PostgreSQL for any number of replicas (`store.url`: the `postgres` package); both
writers share the queue, group commit and withdrawal of `writer`;
the records (`records`), approvals (`approvals`) and the keyed hash chain (`chain`, and
`verify`'s streaming check `chainscan`, with the key and content checks of `chain_verify`)
serve both, as do what keeps a month of journal cheap to look at:
each session's counts kept with its steps (`counts`), lists read a page at a time
(`listing`), only open sessions in memory (`sessionindex`), and retention that keeps the
proof (`archiving`, its record `archives`, its files checked by `archivefile`).

Which writes are awaited — the one rule every call site follows:

- **Awaited** (`QueuedWriter.write`, `Journal.write_ahead`, `Journal.update_now`,
  `Journal.set_session_state`): anything a later decision depends on. A mutation's write-ahead
  row (committed before the request is forwarded), an approval (before its agent waits on it)
  and a decision to approve it, a step's `compensating` mark (committed before its
  compensation is sent), a compensation's result, every change of a session's state. The
  caller acts only once the row is committed and fsync'd; on JournalError it does not act
  (the request is not forwarded, the compensation is not sent).
- **Batched** (`QueuedWriter.submit`, `Journal.record`, `Journal.update`,
  `Journal.add_session`): reads, requests undoproxy answered itself, progress such as a
  mutation's outcome after its response. Losing one in a crash leaves a state that is
  already safe: a step still `pending` becomes `unknown` at restart and rollback reads the
  target before deciding; an approval still `pending` expires.
- Order holds across both: a batched write queued before an awaited one is committed with it
  or before it, so awaiting (or `writer.flush()`) also makes what came before durable — e.g.
  a session submitted by `add_session` before its first write-ahead step.

What survives what: an awaited write, once it returned, survives a crash of undoproxy, of the
OS and a power loss (`PRAGMA synchronous=FULL` for every commit someone waits for: it fsyncs
the WAL; concurrent writes share a commit). A batched write survives a crash of undoproxy once
its batch is committed, usually within milliseconds, and an OS crash or a power loss once a
later awaited commit (or a checkpoint) fsyncs the WAL: on SQLite a batch nobody waits for is
committed without an fsync of its own (`sqlite_child`). A write that gave up (timed out while
still queued) is withdrawn and never committed later (see `writer`). Only one process opens a
journal at a time (`lock`). The database and its -wal/-shm files are mode 0600: they hold
session proxy tokens in clear.
"""
