"""Rollback against a real CalDAV server (Radicale over TLS), the agent the `caldav` client
library going through undoproxy: a calendar it made is deleted, an event it created is deleted,
one it changed or deleted comes back byte for byte, a calendar's properties come back; the
calendar files on disk are compared with how they were before the session. Deleting a whole
calendar is reported irreversible, never "restored" from its export."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.rollback.helpers import details, rollback_ends, statuses
from tests.support.ci import skip_or_fail
from tests.support.proc import Undoproxy

try:
    import caldav
    from caldav.elements import dav

    from tests.support.caldav_server import PASSWORD, USER, Radicale
except ImportError as exc:  # pragma: no cover - the test extras install both
    skip_or_fail(f"Radicale or caldav is not installed ({exc})", module=True)

STANDUP = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//undoproxy tests//EN
BEGIN:VEVENT
UID:standup-1
DTSTAMP:20260105T080000Z
DTSTART:20260105T100000Z
DTEND:20260105T101500Z
SUMMARY:Standup
LOCATION:Room 4
END:VEVENT
END:VCALENDAR
"""

LUNCH = STANDUP.replace("standup-1", "lunch-2").replace("Standup", "Lunch")


@pytest.fixture
def server(tmp_path: Path, upstream_cert: tuple[Path, Path]) -> Iterator[Radicale]:
    s = Radicale(tmp_path / "radicale", upstream_cert).start()
    work = s.client().principal().make_calendar(name="Work", cal_id="work")
    work.save_event(STANDUP)
    yield s
    s.stop()


def agent_calendar(up: Undoproxy, server: Radicale, session: str) -> caldav.Calendar:
    """The agent's "Work" calendar, found as a caldav user finds it: through its principal."""
    client = server.client(up.proxy_url(session), up.ca_bundle)
    return client.principal().calendar(cal_id="work")


def event_bytes(server: Radicale, name: str) -> tuple[int, bytes]:
    """The event as the server serves it now (status, exact bytes), not through undoproxy."""
    r = requests.get(
        f"{server.home}work/{name}",
        auth=(USER, PASSWORD),
        verify=str(server.cert[0]),
        timeout=30,
    )
    return r.status_code, r.content


def test_a_calendar_the_agent_made_is_deleted(
    up: Undoproxy, server: Radicale, session_id: str
) -> None:
    before = server.on_disk()
    client = server.client(up.proxy_url(session_id), up.ca_bundle)
    made = client.principal().make_calendar(name="Project", cal_id="project")
    made.save_event(LUNCH)
    assert "project/lunch-2.ics" in server.on_disk()
    report = up.rollback(session_id)
    # newest first: the event's PUT (deleted), the PROPPATCH of the name caldav sends after the
    # MKCALENDAR (already as before: MKCALENDAR had set it), the MKCALENDAR (deleted, once empty)
    assert [s["method"] for s in report["steps"]] == ["PUT", "PROPPATCH", "MKCALENDAR"]
    assert (report["state"], statuses(report)) == ("rolled_back", ["compensated"] * 3)
    assert "read back: gone" in details(report)[0]
    assert server.on_disk() == before
    assert [c.name for c in server.client().principal().calendars()] == ["Work"]


def test_a_new_event_is_deleted_after_the_client_was_challenged(
    up: Undoproxy, server: Radicale, session_id: str
) -> None:
    """caldav sends credentials only once challenged: its first request, this PUT, carries
    none. undoproxy does not forward it unsnapshotted; it passes the server's 401 challenge on,
    and the PUT sent again with credentials is snapshotted, forwarded and undone."""
    before = server.on_disk()
    client = server.client(up.proxy_url(session_id), up.ca_bundle)
    client.calendar(url=f"{server.home}work/").save_event(LUNCH)
    assert event_bytes(server, "lunch-2.ics")[0] == 200
    report = up.rollback(session_id)
    assert [s["method"] for s in report["steps"]] == ["PUT", "PUT"]
    assert (report["state"], statuses(report)) == ("rolled_back", ["compensated", "skipped"])
    assert "401" in details(report)[1]  # the challenged one: never forwarded, nothing to undo
    assert event_bytes(server, "lunch-2.ics")[0] == 404
    assert server.on_disk() == before


def test_a_changed_event_comes_back_byte_for_byte(
    up: Undoproxy, server: Radicale, session_id: str
) -> None:
    before, served = server.on_disk(), event_bytes(server, "standup-1.ics")
    event = agent_calendar(up, server, session_id).event_by_uid("standup-1")
    event.vobject_instance.vevent.summary.value = "Standup (moved)"
    event.vobject_instance.vevent.location.value = "Room 9"
    event.save()
    assert b"Room 9" in event_bytes(server, "standup-1.ics")[1]
    report = rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert "read back: matches the snapshot" in details(report)[0]
    assert event_bytes(server, "standup-1.ics") == served
    assert server.on_disk() == before


def test_a_deleted_event_is_recreated_byte_for_byte(
    up: Undoproxy, server: Radicale, session_id: str
) -> None:
    before, served = server.on_disk(), event_bytes(server, "standup-1.ics")
    agent_calendar(up, server, session_id).event_by_uid("standup-1").delete()
    assert event_bytes(server, "standup-1.ics")[0] == 404
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert event_bytes(server, "standup-1.ics") == served
    assert server.on_disk() == before


def test_a_renamed_calendar_gets_its_properties_back(
    up: Undoproxy, server: Radicale, session_id: str
) -> None:
    before = server.on_disk()
    agent_calendar(up, server, session_id).set_properties([dav.DisplayName("Renamed")])
    assert server.client().calendar(url=f"{server.home}work/").get_display_name() == "Renamed"
    rollback_ends(up, session_id, "rolled_back", ["compensated"])
    assert server.on_disk() == before


def test_deleting_a_calendar_is_irreversible_and_nothing_is_written_back(
    up: Undoproxy, server: Radicale, session_id: str
) -> None:
    agent_calendar(up, server, session_id).delete()
    report = rollback_ends(up, session_id, "rollback_incomplete", ["irreversible"])
    assert "collection" in details(report)[0]
    assert server.on_disk() == {}  # no calendar export PUT back as an event or a calendar
