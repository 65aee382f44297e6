"""The `signing:` key of config.yaml: validated into `Signers`, every error with file:line.

No error message ever quotes a secret: a wrong `secret_access_key` is reported by name only.
"""

from __future__ import annotations

from typing import Any, Final

from undoproxy.errors import ConfigError, Location
from undoproxy.rules.patterns import HostPattern
from undoproxy.signing import AwsKey, Signers, SigningEntry
from undoproxy.yamlsource import YDict, YList, location_of

ENTRY_KEYS: Final = ("host", "aws")
AWS_KEYS: Final = ("access_key_id", "secret_access_key", "session_token", "region", "service")
REQUIRED_AWS: Final = ("access_key_id", "secret_access_key", "region")
SECRET_KEYS: Final = frozenset({"secret_access_key", "session_token"})
EXAMPLE = (
    "signing: [{host: s3.*.amazonaws.com, aws: {access_key_id: ${AWS_ACCESS_KEY_ID}, "
    "secret_access_key: ${AWS_SECRET_ACCESS_KEY}, region: us-east-1, service: s3}}]"
)


def _at(mapping: Any, key: str, default: Location) -> Location:
    return mapping.where(key) if isinstance(mapping, YDict) else default


def _text(
    value: Any, name: str, where: Location, errors: list[ConfigError], *, required: bool
) -> str | None:
    if value is None or value == "":
        if required:
            hint = " (is the environment variable it names set?)" if name != "region" else ""
            errors.append(ConfigError(where, f"signing: aws.{name} is missing or empty{hint}"))
        return None
    if not isinstance(value, str):
        shown = "a non-string value" if name in SECRET_KEYS else repr(value)
        errors.append(ConfigError(where, f"signing: aws.{name} must be a string, got {shown}"))
        return None
    return value.strip()


def _aws(value: Any, where: Location, errors: list[ConfigError]) -> AwsKey | None:
    if not isinstance(value, dict):
        errors.append(ConfigError(where, "signing: aws must be a mapping; " + EXAMPLE))
        return None
    before = len(errors)
    for key in value:
        if key not in AWS_KEYS:
            errors.append(
                ConfigError(
                    _at(value, key, where),
                    f"signing: unknown key aws.{key}; known keys: {', '.join(AWS_KEYS)}",
                )
            )
    got = {
        name: _text(
            value.get(name), name, _at(value, name, where), errors, required=name in REQUIRED_AWS
        )
        for name in AWS_KEYS
    }
    service = got["service"] or "s3"
    if len(errors) > before:
        return None
    assert got["access_key_id"] and got["secret_access_key"] and got["region"]
    return AwsKey(
        got["access_key_id"], got["secret_access_key"], got["region"], service, got["session_token"]
    )


def parse_signing(value: Any, where: Location) -> tuple[Signers, list[ConfigError]]:
    """`signing:` as Signers, and every problem found (nothing is used when there is one)."""
    errors: list[ConfigError] = []
    if value is None:
        return Signers(), errors
    if not isinstance(value, list):
        errors.append(
            ConfigError(location_of(value, where), "signing: expected a list; " + EXAMPLE)
        )
        return Signers(), errors
    entries: list[SigningEntry] = []
    for i, item in enumerate(value):
        loc = value.where(i) if isinstance(value, YList) else where
        if not isinstance(item, dict):
            errors.append(ConfigError(loc, "signing: each entry is a mapping {host, aws}"))
            continue
        loc = location_of(item, loc)
        for key in item:
            if key not in ENTRY_KEYS:
                errors.append(
                    ConfigError(
                        _at(item, key, loc),
                        f"signing: unknown key {key!r}; an entry has host and aws",
                    )
                )
        host_value = item.get("host")
        host = None
        if not isinstance(host_value, str):
            errors.append(ConfigError(loc, "signing: host is required (a host pattern)"))
        else:
            try:
                host = HostPattern.parse(host_value)
            except ValueError as exc:
                errors.append(ConfigError(_at(item, "host", loc), f"signing: {exc}"))
        if "aws" not in item:
            errors.append(ConfigError(loc, "signing: aws is required; " + EXAMPLE))
            continue
        aws = _aws(item["aws"], _at(item, "aws", loc), errors)
        if host is not None and aws is not None:
            entries.append(SigningEntry(host, aws, loc))
    return Signers(tuple(entries)), errors
