"""The `secrets:` key of config.yaml, validated into `SecretEntry`s, every error with file:line.

    secrets:
      - name: openai                       # optional (default: the first host); in /metrics
        host: api.openai.com               # a host pattern, or a list of them, as in rules
        header: Authorization
        value: "Bearer ${OPENAI_API_KEY}"  # ${NAME}: environment; ${file:PATH}: a file
        env: OPENAI_API_KEY                # optional: the variable `undoproxy env` sets to
                                           # the placeholder (default: the one ${NAME} above)
        placeholder: sk-undoproxy-openai   # optional, for SDKs that check a key's shape
        sessions: [research-*, ci]         # optional: the sessions that may use it
      - name: aws
        host: "*.amazonaws.com"
        aws: {access_key_id: ${AWS_KEY_ID}, secret_access_key: ${file:/run/secrets/aws},
              region: us-east-1, service: s3}   # region, service: optional (from the request)

The values are read once here, so that an unset variable or a missing file stops `run` with
the entry's line; they are not kept (the broker reads them again). No message quotes a value.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from undoproxy.broker.entries import NAME, AwsTemplate, SecretEntry, default_placeholder
from undoproxy.broker.values import REFERENCE, Unavailable, ValueTemplate
from undoproxy.errors import ConfigError, Location
from undoproxy.rules.patterns import HostPattern
from undoproxy.yamlsource import YDict, YList, location_of

ENTRY_KEYS: Final = ("name", "host", "header", "value", "env", "placeholder", "sessions", "aws")
AWS_KEYS: Final = ("access_key_id", "secret_access_key", "session_token", "region", "service")
# Headers a secret may not be put in: they route or frame the request, or are undoproxy's own.
FORBIDDEN_HEADERS: Final = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "proxy-authorization", "te"}
)
TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 field names
EXAMPLE = (
    'secrets: [{host: api.openai.com, header: Authorization, value: "Bearer ${OPENAI_API_KEY}"}]'
)


class _Errors(list[ConfigError]):
    def add(self, where: Location, message: str) -> None:
        self.append(ConfigError(where, f"secrets: {message}"))


def _at(mapping: Any, key: str, default: Location) -> Location:
    return mapping.where(key) if isinstance(mapping, YDict) else default


def _unknown(keys: Any, known: tuple[str, ...], where: Location, errors: _Errors, in_: str) -> None:
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            errors.add(
                _at(keys, key, where),
                f"unknown key {in_}{key!r}{hint}; known keys: {', '.join(known)}",
            )


def _template(
    value: Any, what: str, where: Location, base: Path, errors: _Errors, *, literal_ok: bool
) -> ValueTemplate | None:
    if not isinstance(value, str) or not value:
        errors.add(where, f"{what} must be a string such as ${{NAME}} or ${{file:PATH}}")
        return None
    try:
        return ValueTemplate.parse(value, base, literal_ok=literal_ok)
    except ValueError as exc:
        errors.add(where, f"{what} {exc}")
        return None


def _hosts(item: Mapping[str, Any], loc: Location, errors: _Errors) -> tuple[HostPattern, ...]:
    raw = item.get("host")
    where = _at(item, "host", loc)
    texts = raw if isinstance(raw, list) else [raw]
    if raw is None or not texts or not all(isinstance(t, str) for t in texts):
        errors.add(where, "host is required: a host pattern, or a list of them")
        return ()
    hosts = []
    for text in texts:
        assert isinstance(text, str)
        try:
            hosts.append(HostPattern.parse(text))
        except ValueError as exc:
            errors.add(where, str(exc))
    return tuple(hosts)


def _aws(value: Any, where: Location, base: Path, errors: _Errors) -> AwsTemplate | None:
    if not isinstance(value, dict):
        errors.add(where, "aws must be a mapping {access_key_id, secret_access_key, region?}")
        return None
    _unknown(value, AWS_KEYS, where, errors, "aws.")
    before = len(errors)
    parts: dict[str, ValueTemplate | None] = {}
    for name in ("access_key_id", "secret_access_key", "session_token"):
        if name not in value:
            if name != "session_token":
                errors.add(where, f"aws.{name} is required")
            parts[name] = None
            continue
        parts[name] = _template(
            value[name],
            f"aws.{name}",
            _at(value, name, where),
            base,
            errors,
            literal_ok=name == "access_key_id",
        )
    scope = {}
    for name in ("region", "service"):
        given = value.get(name)
        if given is not None and (not isinstance(given, str) or not given.strip()):
            errors.add(_at(value, name, where), f"aws.{name} must be a non-empty string")
        scope[name] = given.strip() if isinstance(given, str) else ""
    if len(errors) > before:
        return None
    key_id, secret = parts["access_key_id"], parts["secret_access_key"]
    assert key_id is not None and secret is not None
    return AwsTemplate(key_id, secret, parts["session_token"], scope["region"], scope["service"])


def _sessions(value: Any, where: Location, errors: _Errors) -> tuple[str, ...] | None:
    if value is None:
        return None
    texts = value if isinstance(value, list) else [value]
    if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        errors.add(where, "sessions must be a session id or glob, or a list of them")
        return None
    return tuple(t.strip() for t in texts)


def _entry(item: Any, loc: Location, base: Path, errors: _Errors) -> SecretEntry | None:
    if not isinstance(item, dict):
        errors.add(loc, "each entry is a mapping; " + EXAMPLE)
        return None
    loc = location_of(item, loc)
    before = len(errors)
    _unknown(item, ENTRY_KEYS, loc, errors, "")
    hosts = _hosts(item, loc, errors)
    has_header, has_aws = "header" in item or "value" in item, "aws" in item
    if has_header == has_aws:
        errors.add(loc, "an entry has either header and value, or aws; " + EXAMPLE)
        return None
    header = value = aws = None
    if has_header:
        header = item.get("header")
        if not isinstance(header, str) or not TOKEN.fullmatch(header):
            errors.add(_at(item, "header", loc), "header must be a header name")
            header = None
        elif header.lower() in FORBIDDEN_HEADERS or header.lower().startswith("x-undoproxy-"):
            errors.add(_at(item, "header", loc), f"a secret cannot go in the {header} header")
        value = _template(item.get("value"), "value", _at(item, "value", loc), base, errors,
                          literal_ok=False)  # fmt: skip
    else:
        aws = _aws(item["aws"], _at(item, "aws", loc), base, errors)
        for key in ("env", "placeholder"):
            if key in item:
                errors.add(_at(item, key, loc), f"{key} is for header entries (aws: sets "
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")  # fmt: skip
    env = item.get("env")
    if env is None and value is not None and len(value.env_names) == 1:
        env = value.env_names[0]
    if env is not None and (not isinstance(env, str) or not REFERENCE.fullmatch(f"${{{env}}}")):
        errors.add(_at(item, "env", loc), "env must be an upper-case variable name")
    name = item.get("name", hosts[0].text if hosts else "")
    if not isinstance(name, str) or not NAME.match(name):
        errors.add(_at(item, "name", loc), "name must be letters, digits, '.', '_' or '-'")
    placeholder = item.get("placeholder")
    if placeholder is not None and (not isinstance(placeholder, str) or len(placeholder) < 8):
        errors.add(_at(item, "placeholder", loc), "placeholder must be at least 8 characters")
    sessions = _sessions(item.get("sessions"), _at(item, "sessions", loc), errors)
    if len(errors) > before:
        return None
    return SecretEntry(
        name=str(name),
        hosts=hosts,
        header=header,
        value=value,
        aws=aws,
        sessions=sessions,
        env=env,
        placeholder=str(placeholder or default_placeholder(str(name), env)),
        where=loc,
    )


def _agree(entries: list[SecretEntry], errors: _Errors) -> None:
    """Names unique; entries that share a variable share its placeholder."""
    names: dict[str, SecretEntry] = {}
    by_env: dict[str, SecretEntry] = {}
    for entry in entries:
        where = entry.where or Location("<config>", 0)
        first = names.setdefault(entry.name, entry)
        if first is not entry:
            errors.add(where, f"the name {entry.name!r} is taken (first at {first.where})")
        if entry.env is None:
            continue
        other = by_env.setdefault(entry.env, entry)
        if other is not entry and other.placeholder != entry.placeholder:
            errors.add(where, f"env {entry.env} has another placeholder at {other.where}")


def parse_secrets(
    value: Any, where: Location, base_dir: Path, environ: Mapping[str, str] | None = None
) -> tuple[tuple[SecretEntry, ...], list[ConfigError]]:
    """`secrets:` (as written: `${NAME}` not expanded) as entries, and every problem found,
    including values that cannot be read now (nothing is used when there is one)."""
    errors = _Errors()
    if value is None:
        return (), errors
    if not isinstance(value, list):
        errors.add(location_of(value, where), "expected a list; " + EXAMPLE)
        return (), errors
    entries = []
    for i, item in enumerate(value):
        loc = value.where(i) if isinstance(value, YList) else where
        entry = _entry(item, loc, base_dir, errors)
        if entry is not None:
            entries.append(entry)
    _agree(entries, errors)
    environ = os.environ if environ is None else environ
    for entry in entries:
        try:
            entry.read(environ)
        except Unavailable as exc:
            errors.add(entry.where or where, f"{entry.name}: {exc}")
    return tuple(entries), list(errors)
