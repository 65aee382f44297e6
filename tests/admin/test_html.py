"""The page's one HTML builder escapes everything that is not Markup."""

from __future__ import annotations

from undoproxy.admin.html import Markup, el, escape, join, render
from undoproxy.admin.page_views import approval_card

EVIL = '"><script>alert(1)</script>'


def test_el_escapes_text_and_attributes() -> None:
    html = el("a", EVIL, href=EVIL, class_="x", hidden=True, title=None)
    assert html == (
        '<a href="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" class="x" hidden>'
        "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;</a>"
    )
    assert el("td", el("b", "ok")) == "<td><b>ok</b></td>"  # Markup passes as is


def test_join_and_escape() -> None:
    assert join([Markup("<b>"), "<i>"]) == "<b>&lt;i&gt;"
    assert escape(None) == "" and escape(Markup("<b>")) == "<b>"


def test_templates_escape_every_value() -> None:
    card = approval_card(
        {
            "id": EVIL,
            "step_ids": ["a"],
            "reason_required": False,
            "risk": EVIL,
            "method": EVIL,
            "url": EVIL,
            "session_id": EVIL,
            "intent": EVIL,
            "rule": EVIL,
            "created_at": 1.0,
            "expires_at": 2.0,
            "badges": [{"kind": EVIL, "label": EVIL, "detail": EVIL}],
            "body": EVIL,
            "body_length": 10,
            "content_type": EVIL,
            "diff": {"url": EVIL, "status": 200, "lines": [["+", EVIL]], "merge_patch": False},
            "headers": [
                {"name": EVIL, "value": EVIL, "secret": False, "override": True},
                {"name": EVIL, "value": EVIL, "secret": True, "override": False},
            ],
            "method_overrides": [{"where": EVIL, "method": EVIL}],
        }
    )
    assert "<script>" not in card and card.count("&lt;script&gt;") >= 16
    nav = render("nav.html", approvals_current=EVIL, sessions_current=EVIL)
    assert "<script>" not in nav and nav.count("&lt;script&gt;") == 2
