"""The built-in API packs: one YAML file of ordinary rules per API, shipped with undoproxy.

Each `<name>.yaml` here is a mapping `{name, description, hosts, enterprise_prefix?, rules}`
(see docs/packs.md); `undoproxy.packs.loading` loads and validates them like `include:` files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

PACKS_DIR: Final = Path(__file__).parent
# The built-in order: with no `packs:` key every pack is on, its rules tried in this order.
BUILTIN_ORDER: Final = (
    "llm",
    "github",
    "stripe",
    "slack",
    "email",
    "graphql",
    "mcp",
    "search",
    "s3",
    "couchdb",
    "webdav",
    "matrix",
    "etcd",
    "dynamodb",
    "secretsmanager",
    "ssm",
    "sqs",
    "chroma",
    "datasette",
    "postgrest",
    "jupyter",
)


def pack_file(name: str) -> Path:
    """Where the built-in pack `name` lives (it may not exist)."""
    return PACKS_DIR / f"{name}.yaml"


def builtin_names() -> tuple[str, ...]:
    """The built-in packs that ship in this install, in the built-in order."""
    known = [n for n in BUILTIN_ORDER if pack_file(n).is_file()]
    extra = sorted(p.stem for p in PACKS_DIR.glob("*.yaml") if p.stem not in BUILTIN_ORDER)
    return (*known, *extra)
