"""Other people's load: how much CPU went to processes that are not part of the benchmark.

The development machines are shared: another engineer's test run can take a core for a few
seconds and make one round look 30 % slower. `Meter` compares the whole machine's busy time
(`/proc/stat`: user, nice, system, and steal, i.e. time the hypervisor gave to other VMs)
with the CPU of the benchmark's own processes (its running children, the load generators it
has reaped, itself); the difference is foreign load, and a round with too much of it is
measured again.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterable
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
FOREIGN_LIMIT = 0.15  # cores: more than this on average during a round, and it is re-run
OURS: set[int] = set()  # the benchmark's running child processes (see `track`)


def track(pid: int) -> None:
    """Count a child process as the benchmark's own until `untrack`."""
    OURS.add(pid)


def untrack(pid: int) -> None:
    """The child has exited and been waited for (its CPU is now in RUSAGE_CHILDREN)."""
    OURS.discard(pid)


def cpu_seconds(pid: int) -> float:
    """user + system CPU of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: fields 14 and 15


def with_descendants(pids: Iterable[int]) -> set[int]:
    """`pids` and every running process below them (undoproxy's journal writer process, say)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(pids), list(pids)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tree_cpu_seconds(pid: int) -> float:
    """user + system CPU of a process and of the processes it started that still run."""
    total = 0.0
    for one in with_descendants([pid]):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += cpu_seconds(one)
    return total


def machine_busy() -> float:
    """CPU seconds all cores have been busy (user, nice, system) or stolen, since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = fields
    return (user + nice + system + steal) / TICK


def _own(pids: Iterable[int]) -> float:
    total = 0.0
    for pid in with_descendants(pids):
        # A child reaped since is in RUSAGE_CHILDREN below, with all of its CPU.
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += cpu_seconds(pid)
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class Meter:
    """Foreign CPU over an interval: `meter = Meter()`, do the work, `meter.foreign_cores()`."""

    def __init__(self) -> None:
        self.pids = set(OURS)
        self.started = time.monotonic()
        self.busy = machine_busy()
        self.own = _own(self.pids)

    def foreign_cores(self) -> float:
        """Average number of cores other processes (and other VMs) used since the start."""
        wall = time.monotonic() - self.started
        own = _own(self.pids | OURS) - self.own  # children started since count in full
        foreign = (machine_busy() - self.busy) - own
        return max(0.0, foreign / wall) if wall > 0 else 0.0
