"""Condition operators for `match.body`, `match.query` and `match.headers`.

A condition is a mapping of operators, e.g. `{gte: 100, lt: 1000}`, applied to the *set* of
values a JSONPath (or a repeated query parameter) selects:

- value operators (`eq gt gte lt lte in contains regex`) hold when at least ONE selected value
  satisfies all of them together;
- `ne` holds when at least one value was selected and NONE equals the operand: a missing field
  is not "not equal", it is missing (match that with `exists: false`);
- `exists: true` holds when something was selected, `exists: false` when nothing was.

Body values compare as JSON (`1 == 1.0`, but `true != 1`); query and header values are text, so
operands are compared as text (`page: 2` matches `?page=2`) and the order operators read the
value as a number.
"""

from __future__ import annotations

import datetime
import json
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from undoproxy.rules.jsonpaths import JsonPath

OPERATORS: frozenset[str] = frozenset(
    {"eq", "ne", "gt", "gte", "lt", "lte", "in", "contains", "regex", "exists"}
)
_ORDER: dict[str, Callable[[float, float], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


class ConditionError(ValueError):
    """An operator or operand that cannot be compiled; `key` names the operator at fault."""

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key = key


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: booleans are not numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def as_text(value: Any) -> str:
    """An operand as the text a query or header value would contain."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def plain_value(value: Any) -> Any:
    """Loaded YAML as plain dicts, lists and JSON scalars.

    YAML dates become ISO strings: JSON has no dates, and an unquoted date is a common slip.
    """
    if isinstance(value, dict):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    return None


def _text_number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Condition:
    """A compiled operator mapping; `text=True` for query and header values."""

    ops: tuple[tuple[str, Any], ...]
    text: bool = False
    exists: bool | None = None
    ne: tuple[Any, ...] = ()  # empty tuple = no `ne` (operands are wrapped so None can be one)
    checks: tuple[Callable[[Any], bool], ...] = ()

    @classmethod
    def compile(cls, spec: Any, *, text: bool = False) -> Condition:
        """Compile `{op: operand, ...}` or a bare literal (meaning `eq`); raises ConditionError."""
        if not isinstance(spec, dict):
            if isinstance(spec, list) or spec is None:
                raise ConditionError(None, f"expected a value or {{operator: value}}, got {spec!r}")
            spec = {"eq": spec}
        if not spec:
            raise ConditionError(None, "empty condition: give at least one operator")
        exists: bool | None = None
        ne: tuple[Any, ...] = ()
        checks: list[Callable[[Any], bool]] = []
        ops: list[tuple[str, Any]] = []
        for op, raw in spec.items():
            if op not in OPERATORS:
                raise ConditionError(op, f"unknown operator {op!r}")
            operand = plain_value(raw)
            ops.append((op, operand))
            if op == "exists":
                if not isinstance(operand, bool):
                    raise ConditionError(op, f"exists takes true or false, got {operand!r}")
                exists = operand
            elif op == "ne":
                ne = (as_text(operand) if text else operand,)
            else:
                checks.append(_value_check(op, operand, text))
        if exists is False and len(spec) > 1:
            raise ConditionError("exists", "exists: false cannot be combined with other operators")
        return cls(tuple(ops), text, exists, ne, tuple(checks))

    def holds(self, values: Sequence[Any]) -> bool:
        """True when the condition holds for this set of selected values."""
        if self.exists is not None and self.exists != bool(values):
            return False
        if self.ne and (not values or any(self._equal(v, self.ne[0]) for v in values)):
            return False
        if self.checks:
            return any(all(check(v) for check in self.checks) for v in values)
        return True

    def _equal(self, value: Any, operand: Any) -> bool:
        return value == operand if self.text else json_equal(value, operand)

    def describe(self) -> str:
        """The condition as the user wrote it, e.g. `{gte: 100, lt: 1000}`."""
        inner = ", ".join(f"{op}: {_show(v)}" for op, v in self.ops)
        return "{" + inner + "}"


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _value_check(op: str, operand: Any, text: bool) -> Callable[[Any], bool]:
    """One value operator as a predicate on one value; operands are validated here."""
    if op in _ORDER:
        bound = _number(operand)
        if bound is None:
            raise ConditionError(op, f"{op} takes a number, got {operand!r}")
        compare = _ORDER[op]
        read = _text_number if text else _number
        return lambda v: (n := read(v)) is not None and compare(n, bound)
    if op == "regex":
        if not isinstance(operand, str):
            raise ConditionError(op, f"regex takes a string, got {operand!r}")
        try:
            pattern = re.compile(operand)
        except re.error as exc:
            raise ConditionError(op, f"invalid regex {operand!r}: {exc}") from None
        return lambda v: isinstance(v, str) and pattern.search(v) is not None
    if op == "in":
        if not isinstance(operand, list):
            raise ConditionError(op, f"in takes a list, got {operand!r}")
        if text:
            options = frozenset(as_text(o) for o in operand)
            return lambda v: v in options
        return lambda v: any(json_equal(v, o) for o in operand)
    if op == "contains":
        return _contains(operand, text)
    # eq
    if text:
        expected = as_text(operand)
        return lambda v: v == expected
    return lambda v: json_equal(v, operand)


def _contains(operand: Any, text: bool) -> Callable[[Any], bool]:
    """Substring of a string, element of a list, key of an object."""
    if text:
        needle = as_text(operand)
        return lambda v: needle in v

    def check(value: Any) -> bool:
        """Apply `contains` to one value."""
        if isinstance(value, str):
            return isinstance(operand, str) and operand in value
        if isinstance(value, list):
            return any(json_equal(item, operand) for item in value)
        if isinstance(value, dict):
            return isinstance(operand, str) and operand in value
        return False

    return check


@dataclass(frozen=True)
class BodyCondition:
    """`"<JSONPath>": {operator: value}` under `match.body`."""

    path: JsonPath
    condition: Condition

    def holds(self, doc: Any, is_json: bool) -> bool:
        """Evaluate against a parsed body; a non-JSON body selects nothing."""
        return self.condition.holds(self.path.find(doc) if is_json else [])

    def describe(self) -> str:
        """`$.path {op: value}` for explanations."""
        return f"{self.path.text} {self.condition.describe()}"


@dataclass(frozen=True)
class FieldCondition:
    """A query parameter or header condition; `name` is lower-case for headers."""

    name: str
    condition: Condition

    def holds(self, values: Sequence[str]) -> bool:
        """Evaluate against every value the parameter or header has."""
        return self.condition.holds(values)

    def describe(self) -> str:
        """`name {op: value}` for explanations."""
        return f"{self.name} {self.condition.describe()}"
