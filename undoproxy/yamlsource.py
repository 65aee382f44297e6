"""YAML loading that remembers where every value came from.

`load_file(path)` returns plain dicts, lists and scalars, except that mappings are `YDict`
and sequences are `YList`: they behave exactly like dict and list, and also carry the
`Location` of themselves, of each key (`YDict.where(key)`) and of each item
(`YList.where(index)`). Config and rule validation use these to point at file:line.

`${NAME}` (upper-case environment variable names only) is expanded in every string scalar;
lower-case `${request.body...}` style templates are left alone for the rules engine. An unset
variable expands to the empty string; a scalar that is exactly one unset `${NAME}` becomes None.
`expand=False` leaves every string as written (`secrets:` reads its references itself).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from undoproxy.errors import ConfigError, Location

ENV_REF = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")


class YDict(dict[str, Any]):
    """A dict that knows its own location and the location of each key."""

    location: Location
    key_locations: dict[str, Location]

    def where(self, key: str) -> Location:
        """Location of `key` (the mapping's own location if the key is absent)."""
        return self.key_locations.get(key, self.location)


class YList(list[Any]):
    """A list that knows its own location and the location of each item."""

    location: Location
    item_locations: list[Location]

    def where(self, index: int) -> Location:
        """Location of item `index`."""
        if 0 <= index < len(self.item_locations):
            return self.item_locations[index]
        return self.location


def location_of(value: Any, default: Location) -> Location:
    """The location a loaded value carries, or `default` for scalars."""
    return getattr(value, "location", default)


def expand_env(text: str) -> str | None:
    """Expand `${NAME}` references; None when the whole text is one unset variable."""
    whole = ENV_REF.fullmatch(text)
    if whole and whole.group(1) not in os.environ:
        return None
    return ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), text)


class _Builder:
    def __init__(self, file: str, expand: bool = True) -> None:
        self.file = file
        self.expand = expand

    def loc(self, node: yaml.Node) -> Location:
        return Location(self.file, node.start_mark.line + 1)

    def build(self, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            out = YDict()
            out.location = self.loc(node)
            out.key_locations = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise ConfigError(self.loc(key_node), "YAML merge keys (<<) are not supported")
                key = self.build(key_node)
                if not isinstance(key, str):
                    key = str(key)
                if key in out:
                    raise ConfigError(
                        self.loc(key_node),
                        f"duplicate key {key!r} (first at line {out.key_locations[key].line})",
                    )
                out[key] = self.build(value_node)
                out.key_locations[key] = self.loc(key_node)
            return out
        if isinstance(node, yaml.SequenceNode):
            seq = YList(self.build(item) for item in node.value)
            seq.location = self.loc(node)
            seq.item_locations = [self.loc(item) for item in node.value]
            return seq
        assert isinstance(node, yaml.ScalarNode)
        value = yaml.SafeLoader.construct_scalar(yaml.SafeLoader(""), node)
        resolved = _resolve_scalar(node, value)
        if isinstance(resolved, str) and self.expand:
            return expand_env(resolved)
        return resolved


def _resolve_scalar(node: yaml.ScalarNode, value: Any) -> Any:
    # Let PyYAML's own resolver decide ints, bools, nulls and floats from the tag it assigned.
    loader = yaml.SafeLoader("")
    constructor = loader.yaml_constructors.get(node.tag)
    if constructor is None:
        return value
    return constructor(loader, node)


def load_text(text: str, file: str, *, expand: bool = True) -> Any:
    """Parse YAML text; `file` is only used in locations and error messages."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise ConfigError(Location(file, line), f"invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(Location(file, 0), f"invalid YAML: {exc}") from None
    if node is None:
        return None
    return _Builder(file, expand).build(node)


def load_file(path: str | Path, *, expand: bool = True) -> Any:
    """Read and parse a YAML file, keeping locations."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(Location(str(p), 0), "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(Location(str(p), 0), f"cannot read: {exc}") from None
    return load_text(text, str(p), expand=expand)
