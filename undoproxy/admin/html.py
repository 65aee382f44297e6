"""Server-side HTML: `string.Template` files from templates/, every value escaped by default.

A value is inserted as is only when it is `Markup` (HTML built here, from escaped parts); any
other value is converted to text and escaped. That is the whole XSS defence of the page, so
nothing else builds HTML by hand.

    render("card.html", title=user_text, body=el("pre", user_body))
"""

from __future__ import annotations

import html
import string
from collections.abc import Iterable
from functools import cache
from importlib import resources


class Markup(str):
    """A string of HTML that is safe to insert as is."""

    __slots__ = ()


def escape(value: object) -> Markup:
    """Text as HTML (Markup passes unchanged; None becomes empty)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[Markup | str], sep: str = "") -> Markup:
    """Concatenate HTML parts (plain strings among them are escaped)."""
    return Markup(sep.join(escape(p) for p in parts))


def el(tag: str, *children: object, **attrs: object) -> Markup:
    """`<tag attrs>children</tag>`; `class_` sets class; None/False attributes are left out."""
    parts = [tag]
    for name, value in attrs.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        parts.append(name if value is True else f'{name}="{escape(value)}"')
    return Markup(f"<{' '.join(parts)}>{join(escape(c) for c in children)}</{tag}>")


@cache
def _template(name: str) -> string.Template:
    text = resources.files("undoproxy.admin").joinpath("templates", name).read_text("utf-8")
    return string.Template(text)


def render(template: str, /, **values: object) -> Markup:
    """Fill templates/<template>; every `${key}` gets its value escaped (Markup as is)."""
    return Markup(_template(template).substitute({k: escape(v) for k, v in values.items()}))
