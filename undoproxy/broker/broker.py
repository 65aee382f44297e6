"""The credential broker: the secrets as read now, and every question about them.

One `Broker` serves the proxy (what to inject into an agent's request, whether the agent sent a
real value it should not have), undoproxy's own requests (snapshots, reads and undos get the
same secrets: `outgoing`), the admin API (placeholders, names, reload) and the metrics (each
use counted by entry name). Values are read again by `reload`, all or nothing: a reload that
fails for one entry changes none, and says why.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, quote_plus, urlsplit

from undoproxy.broker.entries import Loaded, SecretEntry
from undoproxy.broker.values import Unavailable
from undoproxy.errors import UndoproxyError
from undoproxy.signing import Signers, SigningEntry

log = logging.getLogger(__name__)
USERS: Final = ("agent", "undoproxy")  # who sent a secret upstream: the metrics' `by` label
UseListener = Callable[[str, str], None]


@dataclass(frozen=True)
class Injection:
    """What a request to one URL for one session gets: headers to set (name -> real value),
    the AWS key that signs it, and the names of the entries used (for counting)."""

    headers: dict[str, str] = field(default_factory=dict, repr=False)
    signer: SigningEntry | None = field(default=None, repr=False)
    names: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.names)


@dataclass(frozen=True)
class Found:
    """A real secret value where an agent put it (`where`: "the Authorization header", ...)."""

    secret: str
    where: str


class Broker:
    """The secrets of `secrets:` in memory, and the `Signers` that also hold their AWS keys."""

    def __init__(
        self,
        entries: tuple[SecretEntry, ...] = (),
        signing: Signers | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.entries = entries
        self._environ = environ
        self._static = signing.entries if signing is not None else ()
        self.signers = Signers(self._static)
        self._loaded: tuple[Loaded, ...] = ()
        self._needles: tuple[tuple[str, str, bytes], ...] = ()
        self.loaded_at: float | None = None
        self.uses: dict[tuple[str, str], int] = {}
        self._listeners: list[UseListener] = []
        errors = self.reload()
        if errors:
            raise UndoproxyError("cannot read the secrets: " + "; ".join(errors))

    # --- values ----------------------------------------------------------------------------

    def reload(self) -> list[str]:
        """Read every value again. All or nothing: on any error the values in use stay and
        the errors (naming entries, variables and files, never values) are returned."""
        environ = os.environ if self._environ is None else self._environ
        loaded, errors = [], []
        for entry in self.entries:
            try:
                loaded.append(entry.read(environ))
            except Unavailable as exc:
                errors.append(f"{entry.name} ({entry.where}): {exc}")
        if errors:
            return errors
        self._loaded = tuple(loaded)
        self._needles = tuple(
            (item.entry.name, variant, variant.encode())
            for item in self._loaded
            for piece in item.pieces
            for variant in dict.fromkeys((piece, quote(piece, safe=""), quote_plus(piece)))
        )
        secrets = tuple(e for item in self._loaded for e in item.signing_entries())
        self.signers.entries = (*self._static, *secrets)
        self.loaded_at = time.time()
        return []

    # --- what a request gets -------------------------------------------------------------

    def for_request(self, url: str, session: str | None) -> Injection:
        """The secrets a request to `url` made for `session` gets (agent's or undoproxy's)."""
        if not self._loaded:  # the common case: no secrets at all
            return Injection()
        headers: dict[str, str] = {}
        taken: set[str] = set()
        signer: SigningEntry | None = None
        names: list[str] = []
        for item in self._loaded:
            entry = item.entry
            if not entry.serves_url(url) or not entry.allows(session):
                continue
            if item.header_value is not None and entry.header is not None:
                if entry.header.lower() in taken:
                    continue  # an earlier entry sets this header for this host
                taken.add(entry.header.lower())
                headers[entry.header] = item.header_value
                names.append(entry.name)
            elif signer is None and item.aws is not None:
                signer = next(e for e in item.signing_entries() if e.host.matches(*_at(url)))
                names.append(entry.name)
        return Injection(headers, signer, tuple(names))

    def outgoing(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        session: str | None,
        *,
        payload_sha256: str | None = None,
    ) -> tuple[str, dict[str, str]]:
        """One of undoproxy's own requests (snapshot, read, undo) as it is sent: the secrets
        of `session` for that host put in (replacing the agent's placeholders), then signed
        when `signing:` or an `aws:` secret has a key for it (`payload_sha256`: the hash of a
        body streamed from a file). Each use is counted."""
        out = dict(headers)
        injection = self.for_request(url, session)
        for name, value in injection.headers.items():
            for key in [k for k in out if k.lower() == name.lower()]:
                del out[key]
            out[name] = value
        used = [n for n in injection.names if n not in _aws_names(injection)]
        entry = self.signers.for_url(url, session)
        if entry is not None:
            url, out = self.signers.sign(
                method, url, out, body, entry=entry, payload_sha256=payload_sha256
            )
            if entry.secret is not None:
                used.append(entry.secret)
        self.count(used, "undoproxy")
        return url, out

    def misused_placeholder(
        self, url: str, session: str | None, values: Iterable[str]
    ) -> str | None:
        """The name of an entry for this host whose placeholder the request carries although
        `session` may not use it (it would reach the upstream as is), else None."""
        texts = list(values)
        for item in self._loaded:
            entry = item.entry
            if entry.allows(session) or not entry.serves_url(url):
                continue
            if any(p in text for p in entry.placeholders() for text in texts):
                return entry.name
        return None

    # --- what must never pass --------------------------------------------------------------

    def find(self, places: Iterable[tuple[str, str | bytes]]) -> Found | None:
        """The first real value found in `places` ((where, text or bytes) pairs), or None."""
        if not self._needles:
            return None
        for where, text in places:
            if not text:
                continue
            for name, needle, raw in self._needles:
                if isinstance(text, bytes) and raw in text:
                    return Found(name, where)
                if isinstance(text, str) and needle in text:
                    return Found(name, where)
        return None

    def scrub(self, text: str, replacement: Callable[[str], str] | None = None) -> str:
        """`text` with every real value in it replaced (by `[secret NAME]`, or `replacement`)."""
        for name, needle, _ in self._needles:
            if needle in text:
                text = text.replace(needle, (replacement or _mark)(name))
        return text

    def scrub_bytes(self, data: bytes, replacement: Callable[[str], str]) -> bytes:
        """`data` with every real value in it replaced."""
        for name, _, raw in self._needles:
            if raw in data:
                data = data.replace(raw, replacement(name).encode())
        return data

    def placeholder_of(self, name: str) -> str:
        """What an agent holds instead of entry `name`'s value."""
        entry = next(e for e in self.entries if e.name == name)
        return entry.placeholders()[0]

    # --- what people see -------------------------------------------------------------------

    def variables(self, session: str | None) -> list[tuple[str, str]]:
        """The (variable, placeholder) pairs for an agent of `session`, each variable once;
        then every variable a secret is read from, set empty (an agent started from the shell
        that started undoproxy must not inherit it) unless it holds a placeholder."""
        seen: dict[str, str] = {}
        for entry in self.entries:
            if entry.allows(session):
                for name, value in entry.variables():
                    seen.setdefault(name, value)
        for entry in self.entries:
            for name in entry.env_sources():
                seen.setdefault(name, "")
        return list(seen.items())

    def describe(self) -> list[dict[str, Any]]:
        """Each entry as the admin API shows it: everything but its values."""
        return [
            {
                "name": e.name,
                "kind": e.kind,
                "hosts": [h.text for h in e.hosts],
                "header": e.header,
                "sessions": list(e.sessions) if e.sessions is not None else None,
                "sources": list(e.sources()),
                "variables": dict(e.variables()),
                "uses": {by: self.uses.get((e.name, by), 0) for by in USERS},
            }
            for e in self.entries
        ]

    def holders(self, salt: bytes, digests: Mapping[str, str]) -> list[Found]:
        """Which of the variables (name -> HMAC-SHA256(salt, value) in hex) hold a real value:
        `undoproxy doctor` sends digests of an agent's environment, never the values."""
        found = []
        for item in self._loaded:
            mine = {hmac.new(salt, p.encode(), hashlib.sha256).hexdigest() for p in item.pieces}
            for variable, digest in digests.items():
                if any(hmac.compare_digest(digest, m) for m in mine):
                    found.append(Found(item.entry.name, variable))
        return found

    # --- counting ----------------------------------------------------------------------------

    def on_use(self, listener: UseListener) -> Callable[[], None]:
        """Call `listener(name, by)` on each use; returns the function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def count(self, names: Iterable[str], by: str) -> None:
        """One use of each entry in `names` by `by` (`agent` or `undoproxy`)."""
        for name in names:
            self.uses[(name, by)] = self.uses.get((name, by), 0) + 1
            for listener in self._listeners:
                try:
                    listener(name, by)
                except Exception:  # a listener's bug must never fail a request
                    log.exception("secret use listener failed")


def _at(url: str) -> tuple[str, int]:
    """(host, port) of a URL whose entry matched (so it has both)."""
    parts = urlsplit(url)
    return (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


def _mark(name: str) -> str:
    return f"[secret {name}]"


def _aws_names(injection: Injection) -> set[str]:
    """The names in an injection that are its AWS key (counted when it signs)."""
    return {injection.signer.secret} if injection.signer and injection.signer.secret else set()
