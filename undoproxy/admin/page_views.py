"""The admin page's views, rendered on the server from the same JSON the API returns.

Everything shown goes through `html.render`/`html.el`, which escape it; the data itself was
already redacted (approval contexts when they were built, steps by `views.step_json`).
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import quote

from undoproxy.admin.guardrails_api import RESOLVABLE
from undoproxy.admin.html import Markup, el, escape, join, render
from undoproxy.admin.views import step_json
from undoproxy.approvals.queue import ApprovalQueue
from undoproxy.approvals.views import approval_json
from undoproxy.store import listing
from undoproxy.store.journal import Journal

DECIDED_SHOWN = 20
QUEUE_SHOWN = 200  # pending approvals shown as cards on one page (the count says them all)
SESSIONS_SHOWN = 100  # sessions on one page of the Sessions view
TIMELINE_SHOWN = 500  # steps on one page of a timeline (the newest; earlier ones a link away)
ROLLBACK_STATES = frozenset({"open", "rollback_incomplete"})
FROZEN = el("span", "frozen", class_="state state-frozen", title="mutations refused")
_HIDDEN = Markup("hidden")
_SHOWN = Markup("")


def when(ts: float | None, *, short: bool = False) -> Markup:
    """A timestamp as `<time>` (UTC here; the page's script shows it in local time, only the
    time of day when `short`)."""
    if not ts:
        return Markup("-")
    moment = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    return el(
        "time",
        moment.strftime("%H:%M:%S UTC" if short else "%Y-%m-%d %H:%M:%S UTC"),
        datetime=moment.isoformat(),
        data_ts=f"{ts:.3f}",
        class_="short" if short else None,
    )


def _badges(badges: list[dict[str, str]]) -> Markup:
    if not badges:
        return Markup("")
    return el(
        "div",
        *(
            el("span", b["label"], class_=f"badge badge-{b['kind']}", title=b["detail"])
            for b in badges
        ),
        class_="badges",
    )


def _body(item: dict[str, Any]) -> Markup:
    if item.get("body") is None:
        return Markup("")
    summary = f"Request body · {item.get('body_length', 0):,} bytes"
    if item.get("content_type"):
        summary += f" · {item['content_type']}"
    return el("details", el("summary", summary), el("pre", item["body"]), class_="body", open=True)


def _diff(item: dict[str, Any]) -> Markup:
    diff = item.get("diff")
    if diff is None:
        error = item.get("diff_error")
        return el("p", error, class_="note") if error else Markup("")
    kinds = {"+": "d-add", "-": "d-del", "@": "d-hunk", " ": "d-same"}
    lines = [
        el("span", f"{op} {text}" if op != "@" else text, class_=kinds[op])
        for op, text in diff["lines"]
    ]
    if not lines:
        nothing = (
            "nothing there now: the target does not exist"
            if diff.get("deletes")
            else "no change: the target already looks like this"
        )
        lines = [el("span", nothing, class_="d-same")]
    wants = (
        " → deleted: every line below goes"
        if diff.get("deletes")
        else " → what the agent wants to write"
    )
    head = join(
        [
            "Current target ",
            el("code", diff["url"]),
            f" (HTTP {diff['status']})",
            wants,
            " (JSON merge patch applied)" if diff.get("merge_patch") else "",
            " · truncated" if diff.get("truncated") else "",
        ]
    )
    return el("div", el("div", head, class_="diff-head"), el("pre", join(lines)), class_="diff")


def _overrides(item: dict[str, Any]) -> Markup:
    """Method overrides, called out: the upstream may act on them instead of the method."""
    found = item.get("method_overrides") or []
    if not found:
        return Markup("")
    wanted = sorted({o["method"].upper() for o in found})
    head = join(
        [
            "Method override: this ",
            el("span", item["method"], class_="method"),
            " asks the server to act as ",
            join((el("strong", m) for m in wanted), " / "),
        ]
    )
    where = el(
        "ul", *(el("li", el("code", o["where"]), " = ", el("code", o["method"])) for o in found)
    )
    return el("div", el("p", head), where, class_="override", role="alert")


def _headers(item: dict[str, Any]) -> Markup:
    headers = item.get("headers") or []
    if not headers:
        return Markup("")
    rows = [
        el(
            "tr",
            el("th", h["name"]),
            el("td", el("code", h["value"])),
            class_="override" if h["override"] else "secret" if h["secret"] else None,
        )
        for h in headers
    ]
    return el(
        "details",
        el("summary", f"Request headers · {len(headers)}"),
        el("table", el("tbody", *rows), class_="headers"),
        class_="headers",
        open=True,
    )


def approval_card(item: dict[str, Any]) -> Markup:
    """One pending approval, with its decision controls."""
    requests = len(item["step_ids"])
    return render(
        "card.html",
        id=item["id"],
        version=requests,
        reason_required="1" if item["reason_required"] else "",
        risk_class=item["risk"] or "none",
        method=item["method"],
        url=item["url"],
        risk=item["risk"] or "no risk set",
        session=item["session_id"],
        session_path=quote(item["session_id"], safe=""),
        intent=item["intent"] or "-",
        rule=item["rule"] or "defaults.mutations: hold",
        why=item.get("hold_reason") or "the rule says hold",
        requests=f"{requests} identical, waiting together" if requests > 1 else "1",
        held=when(item["created_at"], short=True),
        expires=el("time", "-", class_="countdown", data_expires=f"{item['expires_at']:.3f}"),
        badges=_badges(item["badges"]),
        overrides=_overrides(item),
        headers=_headers(item),
        body=_body(item),
        diff=_diff(item),
        reason_placeholder="Reason (required: critical risk)"
        if item["reason_required"]
        else "Reason (optional)",
    )


def _decided_table(items: list[dict[str, Any]]) -> Markup:
    if not items:
        return el("p", "No decisions yet.", class_="empty")
    rows = [
        el(
            "tr",
            el("td", el("span", a["state"].replace("_", " "), class_=f"state state-{a['state']}")),
            el("td", el("span", a["method"], class_="method"), " ", el("code", a["url"])),
            el("td", el("a", a["session_id"], href=f"/sessions/{quote(a['session_id'], safe='')}")),
            el("td", a["rule"] or "-"),
            el("td", a["decided_by"] or "-"),
            el("td", a["reason"] or "-"),
            el("td", when(a["decided_at"])),
            id=f"decided-{a['id']}",
        )
        for a in items
    ]
    head = el(
        "tr",
        *(el("th", h) for h in ("Decision", "Request", "Session", "Rule", "By", "Reason", "When")),
    )
    return el("table", el("thead", head), el("tbody", *rows), class_="grid")


async def queue_main(
    queue: ApprovalQueue, journal: Journal, cursor: str | None = None
) -> tuple[Markup, int]:
    """The approvals view (newest first, QUEUE_SHOWN cards a page) and how many are pending."""
    await journal.writer.flush()
    page = await listing.approvals(journal, state="pending", limit=QUEUE_SHOWN, cursor=cursor)
    for known in {a.session_id for a in page.items}:  # a closed one's intent and agent
        await journal.find_session(known)
    pending = [approval_json(a, journal) for a in page.items]
    decided_page = await listing.approvals(journal, state=None, limit=DECIDED_SHOWN + len(pending))
    decided = [approval_json(a, journal) for a in decided_page.items if a.state != "pending"][
        :DECIDED_SHOWN
    ]
    main = render(
        "queue.html",
        count=page.total,
        empty_hidden=_HIDDEN if page.total else _SHOWN,
        cards=join(approval_card(p) for p in pending),
        more=_more(
            len(pending),
            page.total,
            "held requests",
            f"/?cursor={quote(page.next, safe='')}" if page.next else None,
            cursor is not None,
            "/",
        ),
        decided=_decided_table(decided),
    )
    return main, page.total


def _more(
    shown: int, total: int, what: str, older: str | None, deeper: bool, newest: str
) -> Markup:
    """The pager under a list: how many of how many are shown, and links to the rest."""
    if not older and not deeper:
        return Markup("")
    links = []
    if deeper:
        links.append(el("a", "« newest", href=newest, class_="pager-newest"))
    if older:
        links.append(el("a", "older »", href=older, class_="pager-older"))
    return el(
        "p",
        f"{shown:,} of {total:,} {what} on this page ",
        *links,
        class_="pager",
        data_total=str(total),
    )


async def sessions_main(
    journal: Journal, queue: ApprovalQueue | None, cursor: str | None = None
) -> Markup:
    """Sessions newest first, SESSIONS_SHOWN a page, with their state and counts (kept with
    the steps: the cost does not grow with the journal)."""
    from undoproxy.admin.api import listed_json

    await journal.writer.flush()
    page = await listing.sessions(journal, limit=SESSIONS_SHOWN, cursor=cursor)
    held: dict[str, int] = {}
    if queue is not None:
        held = await listing.pending_by_session(journal, [row["id"] for row in page.items])
    rows = []
    for row in page.items:
        s = listed_json(row)
        rows.append(
            el(
                "tr",
                el("td", el("a", s["id"], href=f"/sessions/{quote(s['id'], safe='')}")),
                el(
                    "td",
                    el("span", s["state"].replace("_", " "), class_=f"state state-{s['state']}"),
                    *([" ", FROZEN] if s["frozen"] else []),
                ),
                el("td", s["intent"] or "-"),
                el("td", s["steps"], class_="num"),
                el("td", s["mutations"], class_="num"),
                el("td", held.get(s["id"], 0) or "", class_="num"),
                el("td", when(s["created_at"])),
                el("td", when(s["updated_at"])),
                data_session=s["id"],
            )
        )
    older = f"/sessions?cursor={quote(page.next, safe='')}" if page.next else None
    return render(
        "sessions.html",
        rows=join(rows),
        empty_hidden=_SHOWN if not rows else _HIDDEN,
        total=f"{page.total:,}",
        more=_more(len(rows), page.total, "sessions", older, cursor is not None, "/sessions"),
    )


def _compensation(comp: dict[str, Any] | None) -> tuple[Markup, Markup]:
    if comp is None:
        return Markup(""), Markup("")
    what: Markup = escape("-")
    if comp.get("method"):
        what = join(
            [el("span", comp["method"], class_="method"), " ", el("code", comp["url"] or "")]
        )
    elif comp.get("kind"):
        what = escape(comp["kind"])
    status = comp.get("status")
    shown = (
        el("span", status, class_=f"state state-{status}", title=comp.get("detail"))
        if status
        else Markup("")
    )
    return what, shown


def _status(step: dict[str, Any]) -> Markup:
    """A step's status; who resolved it and why, or a control to resolve it."""
    status = step["status"]
    shown = el("span", status, class_=f"state state-{status}", title=step["error"])
    resolved = step.get("resolved")
    if resolved:
        note = el(
            "div",
            "by ",
            el("strong", resolved["by"]),
            " ",
            when(resolved["at"], short=True),
            ": ",
            resolved["reason"],
            class_="resolved",
        )
        return join([shown, note])
    if step["mutation"] and status in RESOLVABLE:
        button = el(
            "button",
            "Resolve…",
            type="button",
            class_="resolve small",
            data_step=step["id"],
            title="I undid this step by hand",
        )
        return join([shown, " ", button])
    return shown


def steps_table(steps: list[dict[str, Any]]) -> Markup:
    """The timeline: every step of a session, reads included."""
    if not steps:
        return el("p", "No requests yet.", class_="empty")
    head = el(
        "tr",
        *(
            el("th", h, class_="num" if h in ("#", "HTTP") else None)
            for h in (
                "#",
                "Time",
                "Method",
                "URL",
                "Rule",
                "Risk",
                "Status",
                "HTTP",
                "Compensation",
                "Undo",
            )
        ),
    )
    rows = []
    for s in steps:
        comp, comp_status = _compensation(s["compensation"])
        rows.append(
            el(
                "tr",
                el("td", s["seq"], class_="num"),
                el("td", when(s["created_at"], short=True)),
                el("td", el("span", s["method"], class_="method")),
                el(
                    "td",
                    el("code", s["url"]),
                    *([el("div", s["intent"], class_="intent")] if s.get("intent") else []),
                    class_="url",
                ),
                el("td", s["rule"] or "-"),
                el("td", s["risk"] or "-"),
                el("td", _status(s)),
                el("td", s["response_status"] or "-", class_="num"),
                el("td", comp),
                el("td", comp_status),
                id=f"step-{s['id']}",
                data_step=s["id"],
                data_seq=s["seq"],
                data_method=s["method"],
                data_url=s["url"],
                class_="mutation" if s["mutation"] else "read",
            )
        )
    return el("table", el("thead", head), el("tbody", *rows), class_="grid steps")


async def timeline_main(
    journal: Journal, session_id: str, cursor: str | None = None
) -> Markup | None:
    """A session's timeline (its newest TIMELINE_SHOWN steps, in order; earlier ones a link
    away), its rollback and freeze buttons (None: no such session)."""
    session = await journal.find_session(session_id)  # maybe made on another replica
    if session is None:
        return None
    await journal.writer.flush()
    page = await listing.steps(
        journal, session_id, limit=TIMELINE_SHOWN, cursor=cursor, newest_first=True, exchange=False
    )
    steps = [step_json(s) for s in reversed(page.items)]
    counts = (await journal.step_counts([session_id])).get(session_id, {})
    path = f"/sessions/{quote(session_id, safe='')}"
    earlier = f"{path}?cursor={quote(page.next, safe='')}" if page.next else None
    return render(
        "timeline.html",
        id=session.id,
        state=session.state,
        state_label=session.state.replace("_", " "),
        frozen_badge=FROZEN if session.frozen else Markup(""),
        frozen="1" if session.frozen else "",
        freeze_label="Unfreeze" if session.frozen else "Freeze",
        intent=session.intent or "-",
        agent=session.agent or "-",
        steps=f"{page.total:,}",
        mutations=f"{counts.get('mutations', 0):,}",
        more=_more(len(steps), page.total, "steps", earlier, cursor is not None, path),
        created=when(session.created_at),
        rollback_disabled=_SHOWN if session.state in ROLLBACK_STATES else Markup("disabled"),
        table=steps_table(steps),
    )
