"""One `secrets:` entry of config.yaml, and the same entry with its values read.

An entry names the hosts it serves and either a header and its value (`Authorization: Bearer
${OPENAI_API_KEY}`) or an AWS key (`aws:`) that signs every request to those hosts. What the
agent holds instead is a placeholder: the entry's `placeholder` (in the variable `env`), or for
`aws:` the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY placeholders below.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from undoproxy.broker.values import Read, ValueTemplate
from undoproxy.errors import Location
from undoproxy.rules.patterns import HostPattern
from undoproxy.signing import AwsKey, SigningEntry

# What an agent's AWS SDK is given: it signs with these, undoproxy signs again with the key.
AWS_PLACEHOLDER_KEY_ID: Final = "UNDOPROXYPLACEHOLDER"
AWS_PLACEHOLDER_SECRET: Final = "undoproxy-placeholder-aws-secret-access-key"
AWS_VARIABLES: Final = (
    ("AWS_ACCESS_KEY_ID", AWS_PLACEHOLDER_KEY_ID),
    ("AWS_SECRET_ACCESS_KEY", AWS_PLACEHOLDER_SECRET),
)
PLACEHOLDER_PREFIX: Final = "undoproxy-placeholder-"
NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z")


def default_placeholder(name: str, env: str | None) -> str:
    """`undoproxy-placeholder-openai-api-key` for env OPENAI_API_KEY (entries that share a
    variable share its placeholder), else `undoproxy-placeholder-<name>`."""
    base = (env or name).lower().replace("_", "-")
    return PLACEHOLDER_PREFIX + base


@dataclass(frozen=True)
class AwsTemplate:
    """An `aws:` key as written: where each part comes from; region and service as given
    (empty: taken from each request, see `signing.scoped`)."""

    access_key_id: ValueTemplate
    secret_access_key: ValueTemplate
    session_token: ValueTemplate | None = None
    region: str = ""
    service: str = ""


@dataclass(frozen=True)
class SecretEntry:
    """One `secrets:` entry. `sessions`: the session ids or globs that may use it (None: all)."""

    name: str
    hosts: tuple[HostPattern, ...]
    header: str | None = None
    value: ValueTemplate | None = None
    aws: AwsTemplate | None = None
    sessions: tuple[str, ...] | None = None
    env: str | None = None  # the variable `undoproxy env` sets to the placeholder
    placeholder: str = ""
    where: Location | None = None

    @property
    def kind(self) -> str:
        """`header` or `aws`."""
        return "aws" if self.aws is not None else "header"

    def serves(self, host: str, port: int) -> bool:
        """Does it apply to a request to `host:port` (host lower-case)?"""
        return any(p.matches(host, port) for p in self.hosts)

    def serves_url(self, url: str) -> bool:
        """Does it apply to a request to `url`?"""
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        return self.serves((parts.hostname or "").lower(), port)

    def allows(self, session: str | None) -> bool:
        """May `session` use it? (None, a request of no session: only unscoped entries.)"""
        if self.sessions is None:
            return True
        return session is not None and any(fnmatch.fnmatchcase(session, p) for p in self.sessions)

    def variables(self) -> tuple[tuple[str, str], ...]:
        """The (variable, placeholder) pairs an agent is given for it."""
        if self.aws is not None:
            return AWS_VARIABLES
        return ((self.env, self.placeholder),) if self.env else ()

    def placeholders(self) -> tuple[str, ...]:
        """What an agent sends instead of the secret: the placeholder, or the AWS key id."""
        return (AWS_PLACEHOLDER_KEY_ID,) if self.aws is not None else (self.placeholder,)

    def sources(self) -> tuple[str, ...]:
        """Where its values are read from (never the values)."""
        if self.aws is not None:
            parts = [self.aws.access_key_id, self.aws.secret_access_key, self.aws.session_token]
            return tuple(s for t in parts if t is not None for s in t.sources)
        assert self.value is not None
        return self.value.sources

    def env_sources(self) -> tuple[str, ...]:
        """The environment variables its values are read from."""
        templates = (
            [self.aws.access_key_id, self.aws.secret_access_key, self.aws.session_token]
            if self.aws is not None
            else [self.value]
        )
        return tuple(n for t in templates if t is not None for n in t.env_names)

    def read(self, environ: Mapping[str, str]) -> Loaded:
        """The entry with its values read now; raises `values.Unavailable`."""
        if self.aws is None:
            assert self.value is not None
            got = self.value.read(environ)
            return Loaded(self, got.text, None, got.pieces)
        key_id = self.aws.access_key_id.read(environ)
        secret = self.aws.secret_access_key.read(environ)
        token: Read | None = None
        if self.aws.session_token is not None:
            token = self.aws.session_token.read(environ)
        key = AwsKey(
            key_id.text,
            secret.text,
            self.aws.region,
            self.aws.service,
            token.text if token is not None else None,
        )
        pieces = (*key_id.pieces, *secret.pieces, *(token.pieces if token else ()))
        return Loaded(self, None, key, pieces)


@dataclass(frozen=True)
class Loaded:
    """An entry with its values as last read: what undoproxy sends, and the pieces it looks
    for in what the agent sends. Values never show in repr."""

    entry: SecretEntry
    header_value: str | None = field(repr=False)
    aws: AwsKey | None = field(repr=False)
    pieces: tuple[str, ...] = field(repr=False)

    def signing_entries(self) -> tuple[SigningEntry, ...]:
        """For `aws:`: one signing entry per host pattern, for undoproxy's own requests."""
        if self.aws is None:
            return ()
        return tuple(
            SigningEntry(host, self.aws, self.entry.where, self.entry.name, self.entry.sessions)
            for host in self.entry.hosts
        )
