"""Marks ahead: a step waits for its own window's commit, and the next window is committed
while this one is undone (the lane never stalls on an fsync it could have hidden)."""

from __future__ import annotations

import asyncio

from undoproxy.rollback.marking import AheadMarks
from undoproxy.store.records import Step


def steps(n: int) -> list[Step]:
    return [
        Step(f"s{i}", "t", i, "PUT", f"https://h/{i}", is_mutation=True, status="ok")
        for i in range(n)
    ]


class Commits:
    """A journal whose commits land when the test says so, one at a time, in order."""

    def __init__(self) -> None:
        self.requested: list[list[str]] = []
        self.landed: list[list[str]] = []
        self.gates: list[asyncio.Event] = []

    async def mark(self, window: list[Step]) -> None:
        gate = asyncio.Event()
        self.requested.append([s.id for s in window])
        self.gates.append(gate)
        await gate.wait()
        self.landed.append([s.id for s in window])

    def land(self) -> None:
        self.gates[len(self.landed)].set()


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_step_waits_for_its_window_and_the_next_window_goes_meanwhile() -> None:
    order, commits = steps(10), Commits()
    marks = AheadMarks(order, commits.mark, window=4)

    first = asyncio.ensure_future(marks.reach(0, True))
    await settle()
    assert commits.requested == [["s0", "s1", "s2", "s3"]] and not first.done()
    commits.land()
    await first  # its window landed: step 0 may be sent

    await marks.reach(1, True)  # same window, already landed: no wait
    await marks.reach(2, True)  # half way through: the next window is requested...
    await settle()
    assert commits.requested[1] == ["s4", "s5", "s6", "s7"]
    commits.land()  # ...and lands while steps 2 and 3 are undone
    await marks.reach(3, True)
    await asyncio.wait_for(marks.reach(4, True), 1)  # no stall at the window's edge
    assert commits.landed == commits.requested


async def test_a_step_that_needs_no_mark_never_waits_and_commits_stay_in_order() -> None:
    order, commits = steps(6), Commits()
    marks = AheadMarks(order, commits.mark, window=2)
    await marks.reach(0, False)  # requested, not waited for
    await marks.reach(1, False)  # and the next one too
    await settle()
    assert commits.requested == [["s0", "s1"]]  # the second waits for the first to land
    commits.land()
    await settle()
    assert commits.requested == [["s0", "s1"], ["s2", "s3"]]
    commits.land()
    await marks.finish()
    assert commits.landed == [["s0", "s1"], ["s2", "s3"]]


async def test_cancel_stops_what_has_not_landed() -> None:
    commits = Commits()
    marks = AheadMarks(steps(4), commits.mark, window=2)
    await marks.reach(0, False)
    await settle()
    await asyncio.wait_for(marks.cancel(), 1)
    assert commits.landed == []
