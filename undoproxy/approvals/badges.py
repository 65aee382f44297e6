"""Warning badges for a held request, computed on the server from plain data.

- `destructive`: DELETE, and PUT (it replaces the whole resource: fields the agent leaves out
  are gone). PATCH and POST are not: they change only what they name, or add.
- `irreversible`: no compensation exists: the rule says `compensate: none`, or it names none
  and `defaults.compensate` is `none`. A POST whose rule gives no compensation is marked
  `maybe irreversible`: the inferred undo (delete what was created) works only if the response
  names what it created, which nobody knows before it is sent.
- `amount`: a numeric JSON field whose name has a money-like word (AMOUNT_WORDS: `amount`,
  `total`, `price`, `value`, ...; `unit_amount`, `totalPrice` count too) at or over
  AMOUNT_THRESHOLD. Units are whatever the API uses (Stripe counts cents), so the threshold
  is deliberately low: 1000 is $10 in cents, or 1000 of a currency.
- `new host`: the first request of this session to this host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

AMOUNT_THRESHOLD = 1000
AMOUNT_WORDS = frozenset(
    {"amount", "total", "price", "value", "cost", "sum", "balance", "fee", "payment", "payout"}
)
DESTRUCTIVE_METHODS = frozenset({"DELETE", "PUT"})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_MAX_DEPTH = 20


def badge(kind: str, label: str, detail: str) -> dict[str, str]:
    """One badge as the API returns it."""
    return {"kind": kind, "label": label, "detail": detail}


def _amounts(value: Any, path: str = "$", depth: int = 0) -> Iterator[tuple[str, float]]:
    """(JSONPath, number) of every money-like numeric field in a JSON value."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}"
            words = {w.lower() for w in _WORD.findall(str(key))}
            number = _number(item)
            if number is not None and words & AMOUNT_WORDS:
                yield where, number
            else:
                yield from _amounts(item, where, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _amounts(item, f"{path}[{i}]", depth + 1)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.replace(",", "")) if value.strip() else None
        except ValueError:
            return None
    return None


def _irreversible(method: str, compensate: Any, defaults_compensate: str) -> dict[str, str] | None:
    if compensate == "none":
        return badge("irreversible", "irreversible", "the rule says compensate: none")
    if compensate is None and defaults_compensate == "none":
        why = "no rule gives a compensation (defaults.compensate: none)"
        return badge("irreversible", "irreversible", why)
    if compensate is None and method == "POST":
        return badge(
            "irreversible",
            "maybe irreversible",
            "undo works only if the response names what the POST created",
        )
    return None


def compute(
    method: str,
    body: Any,
    *,
    compensate: Any = None,
    defaults_compensate: str = "auto",
    first_to_host: bool = False,
    host: str = "",
) -> list[dict[str, str]]:
    """The badges of one held request; `body` is its parsed JSON body (None when it has none)."""
    method = method.upper()
    out: list[dict[str, str]] = []
    if method in DESTRUCTIVE_METHODS:
        why = "deletes the resource" if method == "DELETE" else "replaces the whole resource"
        out.append(badge("destructive", "destructive", f"{method} {why}"))
    irreversible = _irreversible(method, compensate, defaults_compensate)
    if irreversible is not None:
        out.append(irreversible)
    big = [(where, n) for where, n in _amounts(body) if abs(n) >= AMOUNT_THRESHOLD]
    if big:
        where, n = max(big, key=lambda item: abs(item[1]))
        shown = int(n) if n.is_integer() else n
        detail = f"{where} = {shown} (>= {AMOUNT_THRESHOLD})"
        out.append(badge("amount", f"amount {shown:,}", detail))
    if first_to_host:
        out.append(badge("new-host", "new host", f"the session's first request to {host}"))
    return out
