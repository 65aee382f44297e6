"""JSONPath compiled once, with a fast path for the simple paths rules almost always use.

Every path is parsed by jsonpath-ng (so the accepted syntax and error messages are jsonpath-ng's).
Paths made only of `.name`, `['name']`, `[n]`, `[*]` and `.*` steps are then evaluated by a
small walker instead: jsonpath-ng's `find` costs 10-20 µs per call, the walker well under one,
and this runs on every request a rule with body conditions looks at. Tests check that both
give the same values.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from jsonpath_ng.ext.parser import parse as _jsonpath_parse
from jsonpath_ng.jsonpath import JSONPath

_STEP = re.compile(
    r"""\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | \[(?P<q>['"])(?P<quoted>[^'"\\]*)(?P=q)\]
      | \[(?P<index>-?\d+)\]
      | (?P<star>\[\*\]|\.\*)""",
    re.VERBOSE,
)

_WILD = object()
Step = str | int | object


class JsonPath:
    """A compiled JSONPath; `find(doc)` returns every value it selects (possibly none)."""

    __slots__ = ("_compiled", "_steps", "text")

    def __init__(self, text: str) -> None:
        """Compile `text`; raises ValueError when it is not a JSONPath starting with `$`."""
        text = text.strip()
        if not text.startswith("$"):
            raise ValueError(f"a JSONPath must start with $: {text!r}")
        self._compiled = _parse(text)
        self.text = text
        self._steps = _simple_steps(text)

    def find(self, doc: Any) -> list[Any]:
        """Every value the path selects in `doc`, in document order."""
        if self._steps is None:
            return [m.value for m in self._compiled.find(doc)]
        current = [doc]
        for step in self._steps:
            nxt: list[Any] = []
            for value in current:
                if step is _WILD:
                    if isinstance(value, dict):
                        nxt.extend(value.values())
                    elif isinstance(value, list):
                        nxt.extend(value)
                elif isinstance(step, str):
                    if isinstance(value, dict) and step in value:
                        nxt.append(value[step])
                elif (
                    isinstance(step, int)
                    and isinstance(value, list)
                    and -len(value) <= step < len(value)
                ):
                    nxt.append(value[step])
            if not nxt:
                return nxt
            current = nxt
        return current

    def __repr__(self) -> str:
        return f"JsonPath({self.text!r})"


@lru_cache(maxsize=1024)
def _parse(text: str) -> JSONPath:
    """jsonpath-ng's parse, cached: it costs about a millisecond and rule sets repeat paths."""
    try:
        return _jsonpath_parse(text)
    except Exception as exc:  # jsonpath-ng raises several unrelated exception types
        raise ValueError(f"invalid JSONPath {text!r}: {exc}") from None


def _simple_steps(text: str) -> tuple[Step, ...] | None:
    """The steps of a simple path, or None when jsonpath-ng must evaluate it."""
    steps: list[Step] = []
    pos = 1
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None:
            return None
        if m.group("name") is not None:
            steps.append(m.group("name"))
        elif m.group("q") is not None:
            steps.append(m.group("quoted"))
        elif m.group("index") is not None:
            steps.append(int(m.group("index")))
        else:
            steps.append(_WILD)
        pos = m.end()
    return tuple(steps)


def simple_path(text: str) -> list[str | int] | None:
    """A simple path as a list of keys, indexes and `"*"` (compensators/readback.py's form),
    or None when it is not simple (filters, slices, recursion) or not a JSONPath."""
    text = text.strip()
    if not text.startswith("$"):
        return None
    steps = _simple_steps(text)
    if steps is None:
        return None
    return ["*" if s is _WILD else s for s in steps]  # type: ignore[misc]
