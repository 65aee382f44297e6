"""Loading packs: the `packs:` config key and the built-in pack files (undoproxy/packs/*.yaml).

A pack file is a mapping:

    name: github
    description: GitHub REST API
    hosts: [api.github.com]      # the default host(s) of rules that name none
    enterprise_prefix: /api/v3   # prepended to every rule's path when the user gives hosts
    rules: [...]                 # ordinary rules; each is called PACK/RULE
    host_rules: [...]            # more rules, only on the hosts a user gives (`{name, hosts}`):
                                 # too broad for any host (a pack with `hosts: []`, CouchDB)

A pack of the user's (`undoproxy packs new NAME` writes one) is a file of the same form listed
under `include:`: its rules are called NAME/RULE and come before the built-in packs'.

`packs:` absent turns every built-in pack on, `packs: []` none; an entry is a pack name or
`{name, hosts}`: with `hosts` the pack's rules match those hosts instead of their own. The
email pack's entry may also give `correction: {subject, text}`: each of its rules then carries
that Correction (see undoproxy/compensators/email.py), which rollback sends to the recipients.

A pack's rules are ordinary rules: they are parsed by the rules engine (rules/parse.py), which
knows nothing of packs; config.py puts the config's rules and the packs' rules in one RuleSet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from undoproxy.compensators import email
from undoproxy.errors import ConfigError, ConfigErrors, Location
from undoproxy.packs import builtin_names, pack_file
from undoproxy.rules.actions import Problems, at, unknown_keys
from undoproxy.rules.model import Correction, Rule
from undoproxy.rules.parse import parse_rule_list
from undoproxy.rules.patterns import HostPattern
from undoproxy.yamlsource import YDict, YList, load_file, location_of

PACK_FILE_KEYS: Final = frozenset(
    {"name", "description", "hosts", "enterprise_prefix", "rules", "host_rules", "cases"}
)
PACK_ENTRY_KEYS: Final = frozenset({"name", "hosts", "correction"})
CORRECTION_KEYS: Final = frozenset({"subject", "text"})
_PACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


class _AllPacks:
    """Type of `ALL_PACKS`: the `packs:` key is absent, so every built-in pack is on."""

    def __repr__(self) -> str:
        return "ALL_PACKS"


ALL_PACKS: Final = _AllPacks()


@dataclass(frozen=True)
class PackChoice:
    """One entry of `packs:`: a pack, and the hosts the user put it on (None: its own)."""

    name: str
    hosts: tuple[str, ...] | None = None
    where: Location | None = None
    correction: tuple[str, str] | None = None  # the email pack's (subject, text)
    file: Path | None = None  # a pack file of the user's (None: the built-in pack's)


@dataclass(frozen=True)
class Pack:
    """A loaded pack: what `undoproxy packs` shows, and its rules in order."""

    name: str
    description: str
    hosts: tuple[str, ...]
    enterprise_prefix: str | None
    rules: tuple[Rule, ...]
    where: Location


def parse_choices(value: Any, where: Location, problems: Problems) -> list[PackChoice]:
    """The `packs:` key as a list of choices (ALL_PACKS: every built-in pack, in order)."""
    available = builtin_names()
    if value is ALL_PACKS:
        return [PackChoice(name) for name in available]
    if value is None:
        return []
    if not isinstance(value, list):
        problems.add(
            location_of(value, where), "packs must be a list of pack names or {name, hosts}"
        )
        return []
    out: list[PackChoice] = []
    seen: dict[str, Location] = {}
    for i, entry in enumerate(value):
        loc = value.where(i) if isinstance(value, YList) else where
        hosts: tuple[str, ...] | None = None
        correction: tuple[str, str] | None = None
        if isinstance(entry, dict):
            loc = location_of(entry, loc)
            unknown_keys(entry, PACK_ENTRY_KEYS, "a packs entry", problems, loc)
            name = entry.get("name")
            if "hosts" in entry:
                hosts = _hosts(entry["hosts"], at(entry, "hosts", loc), problems)
            if "correction" in entry:
                correction = _correction(
                    entry["correction"], name, at(entry, "correction", loc), problems
                )
        else:
            name = entry
        if not isinstance(name, str) or not name.strip():
            problems.add(loc, f"a packs entry must be a pack name or {{name, hosts}}, got {name!r}")
            continue
        if name not in available:
            problems.add(loc, f"unknown pack {name!r}{Problems.suggest(name, available)}")
            continue
        if name in seen:
            problems.add(loc, f"pack {name!r} is already listed at {seen[name]}")
            continue
        seen[name] = loc
        out.append(PackChoice(name, hosts, loc, correction))
    return out


def _correction(
    value: Any, pack: Any, where: Location, problems: Problems
) -> tuple[str, str] | None:
    """The email pack's `correction: {subject, text}`, checked."""
    if pack != "email":
        problems.add(where, "correction is only for the email pack (an email sent on rollback)")
        return None
    if not isinstance(value, dict):
        problems.add(where, f"correction must be a mapping {{subject, text}}, got {value!r}")
        return None
    where = location_of(value, where)
    unknown_keys(value, CORRECTION_KEYS, "correction", problems, where)
    texts = []
    for key in ("subject", "text"):
        text = value.get(key)
        if not isinstance(text, str) or not text.strip():
            problems.add(at(value, key, where), f"correction needs a {key}: non-empty text")
            return None
        texts.append(text)
    return texts[0], texts[1]


def _hosts(
    value: Any, where: Location, problems: Problems, *, empty: bool = False
) -> tuple[str, ...] | None:
    if not isinstance(value, list) or (not value and not empty):
        problems.add(where, f"hosts must be a non-empty list of host names, got {value!r}")
        return None
    out: list[str] = []
    for i, item in enumerate(value):
        item_at = value.where(i) if isinstance(value, YList) else where
        if not isinstance(item, str):
            problems.add(item_at, f"a host must be a string, got {item!r}")
            continue
        try:
            HostPattern.parse(item)
        except ValueError as exc:
            problems.add(item_at, str(exc))
            continue
        out.append(item)
    return tuple(out) if len(out) == len(value) else None


def load_packs(
    value: Any, where: Location, problems: Problems, names: dict[str, Location]
) -> list[Rule]:
    """The rules of every pack the `packs:` value turns on, in its order (errors go to
    `problems`; `names` holds the rule names taken so far, a repeated one is an error)."""
    rules: list[Rule] = []
    for choice in parse_choices(value, where, problems):
        pack = load_pack(choice, problems, names)
        if pack is not None:
            rules.extend(pack.rules)
    return rules


def load_pack(choice: PackChoice, problems: Problems, names: dict[str, Location]) -> Pack | None:
    """Load one pack's file and parse its rules for `choice` (errors go to `problems`)."""
    path = choice.file or pack_file(choice.name)
    try:
        doc = load_file(path)
    except ConfigError as exc:
        problems.errors.extend(exc.errors if isinstance(exc, ConfigErrors) else [exc])
        return None
    return parse_pack(doc, choice, Location(str(path), 1), problems, names)


def load_user_pack(
    doc: Any, where: Location, problems: Problems, names: dict[str, Location]
) -> list[Rule]:
    """The rules of a pack file of the user's, listed under `include:` (its own hosts)."""
    name = doc.get("name") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not _PACK_NAME.match(name):
        problems.add(
            at(doc, "name", where) if isinstance(doc, dict) else where,
            f"a pack's name is a word of letters, digits, - and _, got {name!r}",
        )
        return []
    if name in builtin_names():
        problems.add(
            at(doc, "name", where),
            f"{name!r} is a built-in pack's name: call yours something else",
        )
        return []
    pack = parse_pack(doc, PackChoice(name), where, problems, names)
    return list(pack.rules) if pack is not None else []


def read_pack_file(path: Path, hosts: tuple[str, ...] | None = None) -> Pack:
    """A pack file of the user's on its own (`packs test`), on `hosts` when given; raises
    ConfigErrors."""
    problems = Problems()
    doc = load_file(path)
    name = doc.get("name") if isinstance(doc, dict) else None
    pack = parse_pack(doc, PackChoice(str(name), hosts), Location(str(path), 1), problems, {})
    if problems.errors or pack is None:
        raise ConfigErrors(problems.errors or [ConfigError(None, f"{path} did not load")])
    return pack


def parse_pack(
    doc: Any, choice: PackChoice, where: Location, problems: Problems, names: dict[str, Location]
) -> Pack | None:
    """A pack file's content as a Pack for `choice` (errors go to `problems`)."""
    if not isinstance(doc, dict):
        problems.add(location_of(doc, where), "a pack file must be a mapping with name: and rules:")
        return None
    where = location_of(doc, where)
    unknown_keys(doc, PACK_FILE_KEYS, "a pack file", problems, where)
    if doc.get("name") != choice.name:
        problems.add(at(doc, "name", where), f"the pack file says name {doc.get('name')!r}")
    description = doc.get("description") or ""
    if not isinstance(description, str):
        problems.add(at(doc, "description", where), "description must be text")
        description = ""
    own_hosts: tuple[str, ...] = ()
    if doc.get("hosts") is not None:
        own_hosts = _hosts(doc["hosts"], at(doc, "hosts", where), problems, empty=True) or ()
    prefix = doc.get("enterprise_prefix")
    if prefix is not None and (not isinstance(prefix, str) or not prefix.startswith("/")):
        problems.add(at(doc, "enterprise_prefix", where), "enterprise_prefix must be a /path")
        prefix = None
    rules = doc.get("rules")
    if not isinstance(rules, list):
        problems.add(at(doc, "rules", where), "a pack needs a rules: list")
        return None
    host_rules = doc.get("host_rules")
    if host_rules is not None and not isinstance(host_rules, list):
        problems.add(at(doc, "host_rules", where), "host_rules must be a list of rules")
        host_rules = None
    if host_rules and choice.hosts is not None:
        joined = YList([*rules, *host_rules])
        joined.location = location_of(rules, where)
        joined.item_locations = [
            *getattr(rules, "item_locations", [where] * len(rules)),
            *getattr(host_rules, "item_locations", [where] * len(host_rules)),
        ]
        rules = joined
    placed = YList(_place(r, own_hosts, choice.hosts, prefix) for r in rules)
    placed.location = location_of(rules, where)
    placed.item_locations = list(getattr(rules, "item_locations", []))
    parsed = parse_rule_list(placed, where, "rules", problems, names, f"{choice.name}/")
    silent = {
        f"{choice.name}/{r.get('name')}"
        for r in placed
        if isinstance(r, dict) and "action" not in r
    }
    parsed = [replace(r, defers_action=True) if r.name in silent else r for r in parsed]
    if choice.correction is not None:
        parsed = [_corrected(rule, choice.name, choice.correction) for rule in parsed]
    return Pack(
        name=choice.name,
        description=description,
        hosts=choice.hosts or own_hosts,
        enterprise_prefix=prefix,
        rules=tuple(parsed),
        where=where,
    )


def _corrected(rule: Rule, pack: str, correction: tuple[str, str]) -> Rule:
    """A pack rule carrying the correction its provider's builder can send (others: as is)."""
    provider = rule.name.removeprefix(f"{pack}/")
    if provider not in email.BUILDERS:
        return rule
    return replace(rule, correction=Correction(provider, *correction))


def _place(
    rule: Any, own: tuple[str, ...], user: tuple[str, ...] | None, prefix: str | None
) -> Any:
    """A pack rule with its hosts filled in (and the enterprise prefix, on the user's hosts)."""
    if not isinstance(rule, dict):
        return rule
    match = rule.get("match")
    if match is not None and not isinstance(match, dict):
        return rule
    new_match = _copy(match or {}, location_of(rule, Location("", 0)))
    if user is not None:
        new_match["host"] = list(user)
        path = new_match.get("path")
        if prefix and isinstance(path, str) and path.startswith("/"):
            new_match["path"] = prefix.rstrip("/") + path
    elif "host" not in new_match and own:
        new_match["host"] = list(own)
    if not new_match and match is None:
        return rule
    out = _copy(rule, location_of(rule, Location("", 0)))
    out["match"] = new_match
    snapshot = rule.get("snapshot")
    url = snapshot.get("url") if isinstance(snapshot, dict) else None
    if isinstance(snapshot, dict) and user and prefix and isinstance(url, str) and url[:1] == "/":
        # the snapshot's path lives under the same prefix as the rule's own path
        out["snapshot"] = _copy(snapshot, location_of(snapshot, Location("", 0)))
        out["snapshot"]["url"] = prefix.rstrip("/") + url
    return out


def _copy(d: dict[str, Any], default: Location) -> YDict:
    out = YDict(d)
    out.location = location_of(d, default)
    out.key_locations = dict(getattr(d, "key_locations", {}))
    return out


def load_builtin(name: str, hosts: tuple[str, ...] | None = None) -> Pack:
    """One built-in pack on its own (for `undoproxy packs NAME`); raises ConfigErrors."""
    problems = Problems()
    if name not in builtin_names():
        hint = Problems.suggest(name, builtin_names())
        raise ConfigErrors([ConfigError(None, f"unknown pack {name!r}{hint}")])
    pack = load_pack(PackChoice(name, hosts), problems, {})
    if problems.errors or pack is None:
        raise ConfigErrors(problems.errors or [ConfigError(None, f"pack {name} did not load")])
    return pack
