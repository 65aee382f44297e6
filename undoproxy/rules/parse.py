"""Turn the `rules:` and `include:` YAML into a `RuleSet`, collecting every error with file:line.

Rule order is: the config's own rules first, then each include file's rules, files in the
order `include:` lists them. First match wins, so put narrow rules before broad ones.
Packs (undoproxy/packs/loading.py) parse their rule lists with `parse_rule_list`; config.py
puts them after these.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from undoproxy.errors import ConfigError, ConfigErrors, Location
from undoproxy.rules.actions import RULE_ACTION_KEYS, Problems, at, parse_actions, unknown_keys
from undoproxy.rules.conditions import (
    OPERATORS,
    BodyCondition,
    Condition,
    ConditionError,
    FieldCondition,
)
from undoproxy.rules.graphql import OPERATION_TYPES
from undoproxy.rules.jsonpaths import JsonPath
from undoproxy.rules.match import RuleSet
from undoproxy.rules.matcher import MatchSpec
from undoproxy.rules.mcp import HINTS
from undoproxy.rules.model import HTTP_METHODS, Rule
from undoproxy.rules.patterns import HostPattern, PathTemplate
from undoproxy.yamlsource import YDict, YList, load_file, location_of

RULE_KEYS: frozenset[str] = frozenset({"name", "match"}) | RULE_ACTION_KEYS
MATCH_KEYS: frozenset[str] = frozenset(
    {"host", "method", "path", "query", "headers", "body", "graphql", "mcp_tool", "mcp_annotations"}
)
INCLUDE_FILE_KEYS: frozenset[str] = frozenset({"rules"})


def parse_rules(
    rules: list[Any] | None, include: list[Any] | None, *, base_dir: Path, where: Location
) -> RuleSet:
    """Parse the config's rules, then every included file's. Raises ConfigErrors listing all
    errors."""
    problems = Problems()
    parsed = parse_rule_files(rules, include, base_dir, where, problems, {})
    if problems.errors:
        raise ConfigErrors(problems.errors)
    return RuleSet(parsed)


# Loads an include file that is a pack (a mapping with `name:`): packs/loading.py's, passed in
# by config.py, as the rules engine knows nothing of packs.
PackLoader = Callable[[Any, Location, Problems, dict[str, Location]], list[Rule]]


def parse_rule_files(
    rules: list[Any] | None,
    include: list[Any] | None,
    base_dir: Path,
    where: Location,
    problems: Problems,
    names: dict[str, Location],
    pack_loader: PackLoader | None = None,
) -> list[Rule]:
    """The config's rules, then every included file's (errors go to `problems`; `names`
    collects the rule names, so that a later list may not take one again). An include file
    that is a pack (`name:`, `hosts:`, `rules:`, as `undoproxy packs new` writes one) is
    loaded by `pack_loader`: its rules are called PACK/RULE."""
    parsed = parse_rule_list(rules, where, "rules", problems, names)
    for doc, file_where in _load_includes(include, base_dir, where, problems):
        if pack_loader is not None and isinstance(doc, dict) and "name" in doc:
            parsed.extend(pack_loader(doc, file_where, problems, names))
            continue
        rule_list: Any = doc
        if isinstance(doc, dict):
            unknown_keys(doc, INCLUDE_FILE_KEYS, "an include file", problems, file_where)
            rule_list = doc.get("rules")
        elif not isinstance(doc, list) and doc is not None:
            problems.add(
                location_of(doc, file_where),
                "an include file must be a list of rules or a mapping with a rules: list",
            )
            continue
        parsed.extend(parse_rule_list(rule_list, file_where, "rules", problems, names))
    return parsed


def _load_includes(
    include: Any, base_dir: Path, where: Location, problems: Problems
) -> list[tuple[Any, Location]]:
    """Load each include file; missing, repeated or unreadable files become errors."""
    if include is None:
        return []
    if not isinstance(include, list):
        problems.add(location_of(include, where), "include must be a list of rule file paths")
        return []
    loaded: list[tuple[Any, Location]] = []
    seen: dict[Path, Location] = {}
    for i, entry in enumerate(include):
        loc = include.where(i) if isinstance(include, YList) else where
        if not isinstance(entry, str) or not entry.strip():
            problems.add(loc, f"an include entry must be a file path, got {entry!r}")
            continue
        path = Path(entry).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        key = path.resolve()
        if key in seen:
            problems.add(loc, f"{entry} is already included at {seen[key]}")
            continue
        seen[key] = loc
        if not path.exists():
            problems.add(loc, f"include file not found: {entry} (looked for {path})")
            continue
        if not path.is_file():
            problems.add(loc, f"include is not a file: {entry} ({path})")
            continue
        try:
            doc = load_file(path)
        except ConfigError as exc:
            problems.errors.extend(exc.errors if isinstance(exc, ConfigErrors) else [exc])
            continue
        loaded.append((doc, Location(str(path), 0)))
    return loaded


def parse_rule_list(
    rules: Any,
    where: Location,
    what: str,
    problems: Problems,
    names: dict[str, Location],
    prefix: str = "",
) -> list[Rule]:
    """The rules of one YAML list; a pack's are named `prefix` + name (`github/`)."""
    if rules is None:
        return []
    if not isinstance(rules, list):
        problems.add(location_of(rules, where), f"{what} must be a list of rules")
        return []
    out: list[Rule] = []
    for i, item in enumerate(rules):
        loc = rules.where(i) if isinstance(rules, YList) else where
        if not isinstance(item, dict):
            problems.add(loc, f"a rule must be a mapping with name: and match:, got {item!r}")
            continue
        rule = _parse_rule(item, loc, problems, names, prefix)
        if rule is not None:
            out.append(rule)
    return out


def _parse_rule(
    d: dict[str, Any], loc: Location, problems: Problems, names: dict[str, Location], prefix: str
) -> Rule | None:
    """One rule, or None if it has errors (which are recorded; parsing goes on)."""
    before = len(problems.errors)
    loc = location_of(d, loc)
    unknown_keys(d, RULE_KEYS, "a rule", problems, loc, elsewhere=(MATCH_KEYS, "match:"))
    name = d.get("name")
    if "name" not in d:
        problems.add(loc, "rule has no name: (every rule needs a unique name)")
    elif not isinstance(name, str) or not name.strip():
        problems.add(at(d, "name", loc), f"rule name must be a non-empty string, got {name!r}")
    elif prefix + name in names:
        name = prefix + name
        problems.add(at(d, "name", loc), f"duplicate rule name {name!r} (first at {names[name]})")
    else:
        name = prefix + name
        names[name] = at(d, "name", loc)
    spec, methods = _parse_match(d.get("match"), at(d, "match", loc), problems)
    captures = spec.path.captures if spec.path else ()
    actions = parse_actions(d, loc, methods, captures, problems)
    fails_when = tuple(_json_conditions(d, "fails_when", loc, problems))
    if len(problems.errors) > before or not isinstance(name, str):
        return None
    return Rule(
        name=name, where=loc, methods=methods, match_spec=spec, fails_when=fails_when, **actions
    )


def _parse_match(
    m: Any, loc: Location, problems: Problems
) -> tuple[MatchSpec, frozenset[str] | None]:
    if m is None:
        return MatchSpec(), None
    if not isinstance(m, dict):
        problems.add(loc, f"match must be a mapping of {', '.join(sorted(MATCH_KEYS))}")
        return MatchSpec(), None
    unknown_keys(m, MATCH_KEYS, "match", problems, loc)
    hosts: list[HostPattern] = []
    for value, where in _one_or_list(m, "host", loc, problems):
        try:
            hosts.append(HostPattern.parse(value))
        except ValueError as exc:
            problems.add(where, str(exc))
    methods: set[str] = set()
    for value, where in _one_or_list(m, "method", loc, problems):
        method = value.strip().upper()
        if method in HTTP_METHODS:
            methods.add(method)
        else:
            problems.add(where, f"unknown method {value!r}{Problems.suggest(method, HTTP_METHODS)}")
    path = None
    if m.get("path") is not None:
        if isinstance(m["path"], str):
            try:
                path = PathTemplate.parse(m["path"])
            except ValueError as exc:
                problems.add(at(m, "path", loc), str(exc))
        else:
            problems.add(at(m, "path", loc), f"path must be a string, got {m['path']!r}")
    graphql: set[str] = set()
    for value, where in _one_or_list(m, "graphql", loc, problems):
        if value.strip().lower() in OPERATION_TYPES:
            graphql.add(value.strip().lower())
        else:
            hint = Problems.suggest(value, OPERATION_TYPES)
            problems.add(where, f"unknown GraphQL operation type {value!r}{hint}")
    tools = [value.strip() for value, _ in _one_or_list(m, "mcp_tool", loc, problems)]
    annotations = _fields(m, "mcp_annotations", loc, problems, lower=False, text=False)
    for a in annotations:
        if a.name not in HINTS:
            hint = Problems.suggest(a.name, HINTS)
            problems.add(
                at(m["mcp_annotations"], a.name, loc), f"unknown MCP annotation {a.name!r}{hint}"
            )
    spec = MatchSpec(
        hosts=tuple(hosts),
        path=path,
        query=tuple(_fields(m, "query", loc, problems, lower=False)),
        headers=tuple(_fields(m, "headers", loc, problems, lower=True)),
        body=tuple(_body(m, loc, problems)),
        graphql=frozenset(graphql) if m.get("graphql") is not None else None,
        mcp_tools=tuple(tools) if m.get("mcp_tool") is not None else None,
        mcp_annotations=tuple(annotations),
    )
    return spec, frozenset(methods) if "method" in m and m["method"] is not None else None


def _one_or_list(
    m: dict[str, Any], key: str, loc: Location, problems: Problems
) -> list[tuple[str, Location]]:
    """The string or strings under `key`, each with its location."""
    value = m.get(key)
    where = at(m, key, loc)
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    if not items:
        problems.add(where, f"{key} must not be an empty list (leave it out to match any {key})")
    out = []
    for i, item in enumerate(items):
        item_loc = value.where(i) if isinstance(value, YList) else where
        if isinstance(item, str) and item.strip():
            out.append((item, item_loc))
        else:
            problems.add(item_loc, f"{key} must be a string or a list of strings, got {item!r}")
    return out


def _fields(
    m: dict[str, Any],
    key: str,
    loc: Location,
    problems: Problems,
    *,
    lower: bool,
    text: bool = True,
) -> list[FieldCondition]:
    table = m.get(key)
    if table is None:
        return []
    if not isinstance(table, dict):
        problems.add(at(m, key, loc), f"{key} must be a mapping of name: condition")
        return []
    out: list[FieldCondition] = []
    seen: set[str] = set()
    for name, spec in table.items():
        where = at(table, name, loc)
        field_name = name.lower() if lower else name
        if field_name in seen:
            problems.add(where, f"{key} names {name!r} twice (header names ignore case)")
            continue
        seen.add(field_name)
        condition = _condition(spec, where, problems, text=text)
        if condition is not None:
            out.append(FieldCondition(field_name, condition))
    return out


def _body(m: dict[str, Any], loc: Location, problems: Problems) -> list[BodyCondition]:
    return _json_conditions(m, "body", loc, problems)


def _json_conditions(
    m: dict[str, Any], key: str, loc: Location, problems: Problems
) -> list[BodyCondition]:
    """`key: {"$.jsonpath": condition, ...}` of mapping `m` (match.body, fails_when)."""
    table = m.get(key)
    if table is None:
        return []
    if not isinstance(table, dict):
        problems.add(at(m, key, loc), f'{key} must be a mapping of "$.jsonpath": condition')
        return []
    out: list[BodyCondition] = []
    for text, spec in table.items():
        where = at(table, text, loc)
        try:
            path = JsonPath(text)
        except ValueError as exc:
            problems.add(where, str(exc))
            path = None
        condition = _condition(spec, where, problems, text=False)
        if path is not None and condition is not None:
            out.append(BodyCondition(path, condition))
    return out


def _condition(spec: Any, where: Location, problems: Problems, *, text: bool) -> Condition | None:
    try:
        return Condition.compile(spec, text=text)
    except ConditionError as exc:
        at = spec.where(exc.key) if isinstance(spec, YDict) and exc.key else where
        unknown = exc.key is not None and exc.key not in OPERATORS
        hint = Problems.suggest(exc.key, OPERATORS) if unknown and exc.key else ""
        problems.add(at, f"{exc}{hint}")
        return None
