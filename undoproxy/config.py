"""Load and validate `config.yaml`.

Every setting is declared once in `SETTINGS` (dotted key, default, help); validation, the
example config and the docs test all read that table. Every error names the file, the line and
the problem, all errors are reported together, and nothing starts half-configured.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from undoproxy.broker.entries import SecretEntry
from undoproxy.broker.parse import parse_secrets
from undoproxy.durations import parse_duration
from undoproxy.errors import ConfigError, ConfigErrors, Location
from undoproxy.limits import MAX_REQUEST_BODY
from undoproxy.packs.loading import ALL_PACKS, load_packs, load_user_pack
from undoproxy.rules import RuleSet, parse_rules
from undoproxy.rules.actions import Problems
from undoproxy.rules.guards import Guard, RepeatGuard, parse_count, parse_repeat
from undoproxy.rules.parse import parse_rule_files
from undoproxy.signing import Signers
from undoproxy.signing_config import parse_signing
from undoproxy.yamlsource import YDict, YList, load_file, location_of


@dataclass(frozen=True)
class Setting:
    """One config key: its dotted name, default (as a user would write it) and meaning."""

    key: str
    default: Any
    help: str
    parse: Callable[[Any], Any]


def _listen(value: Any) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"expected host:port, got {value!r}")
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port with a port 0-65535, got {value!r}")
    return host, int(port)


def _choice(*options: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in options:
            raise ValueError(f"expected one of {' | '.join(options)}, got {value!r}")
        return str(value)

    return parse


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _optional_str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str | int):
        raise ValueError(f"expected a string, got {value!r}")
    return str(value)


MIN_ADMIN_TOKEN = 16


def _admin_token(value: Any) -> str | None:
    token = _optional_str(value)
    if token is not None and len(token.strip()) < MIN_ADMIN_TOKEN:
        # A short token can be guessed by anything that reaches the admin port.
        raise ValueError(
            f"must be at least {MIN_ADMIN_TOKEN} characters (got {len(token.strip())}); "
            "leave it unset to have one generated"
        )
    return token


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a path, got {value!r}")
    return value


def _urls(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of webhook URLs")
    for url in value:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook URL must start with http:// or https://, got {url!r}")
    return list(value)


def _database_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("postgresql://", "postgres://")):
        raise ValueError("expected a postgresql://user:password@host:port/database URL")
    return value


def _positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("the timeout must be greater than zero")
    return seconds


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_size(value: Any) -> int:
    """A size in bytes from `123`, `"64KiB"`, `"40MiB"`, `"8GiB"` (binary units only)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, ""
    elif isinstance(value, str):
        text = value.strip()
        digits = len(text) - len(text.lstrip("0123456789"))
        if not digits:
            raise ValueError(f"expected a size such as 8GiB or 40MiB, got {value!r}")
        number, unit = int(text[:digits]), text[digits:].strip().lower()
    else:
        raise ValueError(f"expected a size such as 8GiB or 40MiB, got {value!r}")
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit {unit!r} in {value!r} (use KiB, MiB, GiB or TiB)")
    size = number * _UNITS[unit]
    if size <= 0:
        raise ValueError("the size must be greater than zero")
    return size


def _count(value: Any) -> int:
    return parse_count(value, "limit")


def _repeat(value: Any) -> RepeatGuard:
    return parse_repeat(value)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "proxy.listen", "127.0.0.1:8080", "where agents connect (HTTP_PROXY/HTTPS_PROXY)", _listen
    ),
    Setting(
        "proxy.auth",
        "open",
        "open: unknown sessions are created on first use; "
        "token: a session must exist and its token match, else 407",
        _choice("open", "token"),
    ),
    Setting(
        "proxy.upstream_insecure",
        False,
        "accept self-signed upstream certificates (tests, local services)",
        _bool,
    ),
    Setting(
        "proxy.max_body",
        "8GiB",
        "the largest request body undoproxy takes (bodies over 16 MiB are spooled to an "
        "encrypted file in the state dir while they are judged), and the largest snapshot it "
        "keeps; a larger body is refused with 413 undoproxy_body_too_large",
        parse_size,
    ),
    Setting("admin.listen", "127.0.0.1:8081", "the admin API and page", _listen),
    Setting(
        "admin.token",
        None,
        "bearer token for the admin API; unset: generated once, kept "
        "in the state dir (mode 0600) and printed; at least 16 characters",
        _admin_token,
    ),
    Setting(
        "state_dir",
        "~/.undoproxy",
        "the CA, the generated admin token and the credentials key (0600)",
        _path,
    ),
    Setting(
        "store.path",
        None,
        "the SQLite journal (relative to the config file); unset: undoproxy.db in state_dir",
        lambda value: None if value is None else _path(value),
    ),
    Setting(
        "store.url",
        None,
        "postgresql://user:password@host:port/db: a PostgreSQL journal shared by any number "
        "of replicas, instead of store.path (see docs/deploy.md)",
        lambda value: None if value is None else _database_url(value),
    ),
    Setting(
        "store.heartbeat",
        "10s",
        "with store.url: how often a replica tells it is alive and checks on the others; one "
        "silent for 4 heartbeats (or whose process died) is settled by the others",
        _positive_duration,
    ),
    Setting(
        "retention.after",
        0,
        "archive sessions committed or rolled back and idle for longer than this (e.g. 30d), "
        "every retention.every; 0 = keep everything (see docs/operations.md)",
        parse_duration,
    ),
    Setting(
        "retention.archive_dir",
        None,
        "where those archive files go (relative to the config file); or retention.delete",
        lambda value: None if value is None else _path(value),
    ),
    Setting(
        "retention.delete",
        False,
        "with retention.after: remove them without an archive file (the chain still records "
        "what was removed)",
        _bool,
    ),
    Setting(
        "retention.every",
        "1h",
        "how often undoproxy looks for sessions to archive",
        _positive_duration,
    ),
    Setting(
        "approvals.timeout",
        "300s",
        "how long a held request waits for a decision",
        _positive_duration,
    ),
    Setting(
        "approvals.notify",
        [],
        "webhook URLs called (Slack-compatible JSON) when a request is held",
        _urls,
    ),
    Setting(
        "approvals.hold_at",
        "never",
        "never | high | critical: also hold any allowed request whose rule's risk is at least this",
        _choice("never", "high", "critical"),
    ),
    Setting(
        "defaults.mutations",
        "log",
        "what unmatched mutations (every method but GET, HEAD, OPTIONS, PROPFIND, REPORT, "
        "SEARCH) get: allow | log | hold | hold-irreversible | deny",
        _choice("allow", "log", "hold", "hold-irreversible", "deny"),
    ),
    Setting(
        "defaults.compensate",
        "auto",
        "auto: infer the REST inverse of unmatched mutations; none: no inference",
        _choice("auto", "none"),
    ),
    Setting(
        "guard.max_mutations",
        0,
        "mutations one session may make in all (0 = no limit); past it: 403 undoproxy_budget",
        _count,
    ),
    Setting(
        "guard.max_mutations_per_minute",
        0,
        "mutations one session may make in any 60 s (0 = no limit): 403 undoproxy_budget",
        _count,
    ),
    Setting(
        "guard.repeat",
        {"count": 0, "window": "60s"},
        "the same method + URL + body more than `count` times within `window` in one session "
        "is held as a likely loop (count 0 = off)",
        _repeat,
    ),
    Setting("include", [], "more rule files (rule packs), relative to the config file", _urls),
    Setting("rules", [], "the rules, first match wins (see docs/rules.md)", _urls),
    Setting(
        "packs",
        "all",
        "the built-in API packs whose rules follow the config's: absent = all, [] = none; "
        "an entry is a name or {name, hosts} (see docs/packs.md)",
        _urls,
    ),
    Setting(
        "signing",
        [],
        "keys undoproxy signs its own snapshots, reads and compensations with, per host "
        "(AWS SigV4: {host, aws: {access_key_id, secret_access_key, region, service}}); "
        "a signed request to a host without one is irreversible (see docs/packs.md#s3)",
        _urls,
    ),
    Setting(
        "secrets",
        [],
        "the credential broker: per host, a header and its value ({host, header, value: "
        '"Bearer ${ENV}" or ${file:PATH}}) or an AWS key ({host, aws: {...}}) that undoproxy '
        "puts into agents' requests and its own, agents holding only placeholders; optional "
        "name, env, placeholder, sessions (see docs/secrets.md)",
        _urls,
    ),
)
# `include`, `rules` and `packs` are validated by the rules engine, `signing` by
# signing_config.py, `secrets` by broker/parse.py; their parse functions above are unused.
_RULE_KEYS = ("include", "rules", "packs", "signing", "secrets")
_SECTIONS = {"proxy", "admin", "store", "retention", "approvals", "defaults", "guard"}
_TOP_LEVEL = _SECTIONS | {"state_dir", *_RULE_KEYS}


@dataclass
class Config:
    """The validated configuration undoproxy runs with."""

    proxy_listen: tuple[str, int] = ("127.0.0.1", 8080)
    proxy_auth: str = "open"
    upstream_insecure: bool = False
    max_body: int = MAX_REQUEST_BODY
    admin_listen: tuple[str, int] = ("127.0.0.1", 8081)
    admin_token: str | None = None
    state_dir: Path = field(default_factory=lambda: Path("~/.undoproxy").expanduser())
    store_path: Path = field(default_factory=lambda: Path("~/.undoproxy/undoproxy.db").expanduser())
    store_url: str | None = None  # PostgreSQL, shared by replicas (instead of store_path)
    store_heartbeat: float = 10.0
    retention_after: float = 0.0  # archive closed sessions idle this long (0: never)
    retention_dir: Path | None = None  # where their archive files go (None: retention_delete)
    retention_delete: bool = False
    retention_every: float = 3600.0
    approvals_timeout: float = 300.0
    approvals_notify: list[str] = field(default_factory=list)
    defaults_mutations: str = "log"
    defaults_compensate: str = "auto"
    hold_at: str = "never"
    guard: Guard = field(default_factory=Guard)
    signing: Signers = field(default_factory=Signers)  # keys kept in memory only
    secrets: tuple[SecretEntry, ...] = ()  # where each value comes from; never the values
    rules: RuleSet = field(
        default_factory=lambda: parse_rules(
            None, None, base_dir=Path.cwd(), where=Location("<defaults>", 0)
        )
    )
    source: str | None = None


def default_setting(key: str) -> Any:
    """The default of one setting, by its dotted key."""
    for s in SETTINGS:
        if s.key == key:
            return s.default
    raise KeyError(key)


def _unknown(key: str, allowed: set[str], where: Location, prefix: str = "") -> ConfigError:
    close = difflib.get_close_matches(key, sorted(allowed), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    known = ", ".join(sorted(allowed))
    return ConfigError(where, f"unknown key {prefix + key!r}{hint}; known keys: {known}")


def load_config(path: str | Path | None) -> Config:
    """Load `path` (None: built-in defaults) into a Config, or raise ConfigErrors listing all."""
    if path is None:
        return _build({}, Path.cwd(), Location("<defaults>", 0), None)
    p = Path(path)
    doc = load_file(p)
    where = Location(str(p), 1)
    if doc is None:
        doc = YDict()
        doc.location, doc.key_locations = where, {}
    if not isinstance(doc, dict):
        raise ConfigErrors(
            [
                ConfigError(
                    location_of(doc, where),
                    "the config must be a mapping of keys (proxy:, admin:, rules:, ...)",
                )
            ]
        )
    # `secrets:` as written: its ${NAME} references are read by the broker, again on reload.
    secrets = load_file(p, expand=False).get("secrets") if "secrets" in doc else None
    return _build(doc, p.parent.absolute(), where, secrets)


def _build(doc: dict[str, Any], base_dir: Path, where: Location, secrets_raw: Any) -> Config:
    errors: list[ConfigError] = []
    values: dict[str, Any] = {}
    locations: dict[str, Location] = {}

    def loc(mapping: Any, key: str) -> Location:
        return mapping.where(key) if isinstance(mapping, YDict) else where

    for key in doc:
        if key not in _TOP_LEVEL:
            errors.append(_unknown(key, _TOP_LEVEL, loc(doc, key)))
    for section in sorted(_SECTIONS):
        body = doc.get(section)
        if body is None:
            continue
        if not isinstance(body, dict):
            errors.append(ConfigError(loc(doc, section), f"{section}: expected a mapping"))
            continue
        allowed = {s.key.split(".", 1)[1] for s in SETTINGS if s.key.startswith(section + ".")}
        for key, value in body.items():
            if key not in allowed:
                errors.append(_unknown(key, allowed, loc(body, key), prefix=f"{section}."))
                continue
            values[f"{section}.{key}"] = value
            locations[f"{section}.{key}"] = loc(body, key)
    if "state_dir" in doc:
        values["state_dir"], locations["state_dir"] = doc["state_dir"], loc(doc, "state_dir")

    parsed: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.key in _RULE_KEYS:
            continue
        raw = values.get(setting.key, setting.default)
        try:
            parsed[setting.key] = setting.parse(raw)
        except ValueError as exc:
            errors.append(ConfigError(locations.get(setting.key, where), f"{setting.key}: {exc}"))

    rules: RuleSet | None = None
    rule_items, include_items = doc.get("rules"), doc.get("include")
    for name, item in (("rules", rule_items), ("include", include_items)):
        if item is not None and not isinstance(item, list):
            errors.append(ConfigError(loc(doc, name), f"{name}: expected a list"))
    packs = doc.get("packs", ALL_PACKS)
    if packs is None:  # `packs:` with nothing after it: all or none? Say which.
        errors.append(
            ConfigError(loc(doc, "packs"), "packs: expected a list of packs ([] for none)")
        )
        packs = []
    try:
        rules = _rule_set(
            rule_items if isinstance(rule_items, YList | list) else None,
            include_items if isinstance(include_items, YList | list) else None,
            packs,
            base_dir=base_dir,
            where=where,
            packs_where=loc(doc, "packs"),
        )
    except ConfigErrors as exc:
        errors.extend(exc.errors)
    except ConfigError as exc:
        errors.append(exc)

    if values.get("store.path") is not None and values.get("store.url") is not None:
        errors.append(
            ConfigError(
                locations["store.url"],
                "store.url and store.path: give one (PostgreSQL or a SQLite file), not both",
            )
        )
    if parsed.get("retention.after"):
        has_dir = parsed.get("retention.archive_dir") is not None
        if has_dir == bool(parsed.get("retention.delete")):
            errors.append(
                ConfigError(
                    locations.get("retention.after", where),
                    "retention.after: give retention.archive_dir (where archives go) or "
                    "retention.delete: true, one of the two",
                )
            )
    signing, signing_errors = parse_signing(doc.get("signing"), loc(doc, "signing"))
    errors.extend(signing_errors)
    secrets, secret_errors = parse_secrets(secrets_raw, loc(doc, "secrets"), base_dir)
    errors.extend(secret_errors)

    if errors:
        errors.sort(key=lambda e: (e.where.file, e.where.line) if e.where else ("", 0))
        raise ConfigErrors(errors)
    assert rules is not None

    state_dir = Path(os.path.expanduser(parsed["state_dir"]))
    if not state_dir.is_absolute():
        state_dir = base_dir / state_dir
    store_path = Path(os.path.expanduser(parsed["store.path"] or state_dir / "undoproxy.db"))
    if not store_path.is_absolute():
        store_path = base_dir / store_path
    retention_dir = parsed["retention.archive_dir"]
    if retention_dir is not None:
        retention_dir = Path(os.path.expanduser(retention_dir))
        retention_dir = retention_dir if retention_dir.is_absolute() else base_dir / retention_dir
    return Config(
        proxy_listen=parsed["proxy.listen"],
        proxy_auth=parsed["proxy.auth"],
        upstream_insecure=parsed["proxy.upstream_insecure"],
        max_body=parsed["proxy.max_body"],
        admin_listen=parsed["admin.listen"],
        admin_token=parsed["admin.token"],
        state_dir=state_dir,
        store_path=store_path,
        store_url=parsed["store.url"],
        store_heartbeat=parsed["store.heartbeat"],
        retention_after=parsed["retention.after"],
        retention_dir=retention_dir,
        retention_delete=parsed["retention.delete"],
        retention_every=parsed["retention.every"],
        approvals_timeout=parsed["approvals.timeout"],
        approvals_notify=parsed["approvals.notify"],
        defaults_mutations=parsed["defaults.mutations"],
        defaults_compensate=parsed["defaults.compensate"],
        hold_at=parsed["approvals.hold_at"],
        guard=Guard(
            parsed["guard.max_mutations"],
            parsed["guard.max_mutations_per_minute"],
            parsed["guard.repeat"],
        ),
        rules=rules,
        signing=signing,
        secrets=secrets,
        source=None if where.file == "<defaults>" else where.file,
    )


def _rule_set(
    rules: list[Any] | None,
    include: list[Any] | None,
    packs: Any,
    *,
    base_dir: Path,
    where: Location,
    packs_where: Location,
) -> RuleSet:
    """The config's rules, every included file's, then the rules of the packs `packs:` turns
    on (ALL_PACKS: every built-in pack), in that order. Raises ConfigErrors listing all."""
    problems = Problems()
    names: dict[str, Location] = {}  # a rule name is taken once, across all three
    parsed = parse_rule_files(
        rules, include, base_dir, where, problems, names, pack_loader=load_user_pack
    )
    parsed += load_packs(packs, packs_where, problems, names)
    if problems.errors:
        raise ConfigErrors(problems.errors)
    return RuleSet(parsed)
