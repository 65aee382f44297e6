"""The credential broker: agents hold placeholders, undoproxy holds the real secrets.

`secrets:` in config.yaml names, per host, a header and its value (or an AWS key) read from the
environment or a file. The proxy puts the real value into an agent's request to that host
right before forwarding it (after the journal wrote it down, so the journal only ever holds the
placeholder), or signs the request again with the real AWS key; undoproxy's own snapshots,
reads and undos get the same secrets. An agent that sends a real value is refused: it was not
supposed to have it. See docs/secrets.md for the threat model.

    values.py   where a value comes from (${NAME}, ${file:PATH}) and reading it
    entries.py  one entry, and the same entry with its values read
    parse.py    `secrets:` of config.yaml, errors with file:line
    broker.py   the secrets in memory: what a request gets, what must never pass, reload
    api.py      the admin API: names and placeholders, reload, the doctor's check
"""

from __future__ import annotations

from undoproxy.broker.broker import Broker, Found, Injection
from undoproxy.broker.entries import SecretEntry

__all__ = ["Broker", "Found", "Injection", "SecretEntry"]
