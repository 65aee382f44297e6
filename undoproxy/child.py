"""Running a command as undoproxy's child (`undoproxy exec`): its stdin, stdout and stderr are
the terminal's, the signals meant for it reach it, and its exit status is reported as a shell
reports it.

Ctrl-C in a terminal already reaches the child: the terminal signals its whole foreground
process group, the child included, so undoproxy does not send it a second one. A SIGINT sent
to undoproxy alone (`kill -INT`, a supervisor, no terminal) is passed on, as are SIGTERM and
SIGHUP; undoproxy itself keeps waiting, to report what the command did.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from types import FrameType

from undoproxy.errors import UndoproxyError

FORWARDED = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def run(command: Sequence[str], env: dict[str, str]) -> int:
    """Run `command` to its end; its exit status (128 + N when signal N ended it).

    Raises UndoproxyError when it cannot be started (not found, not executable).
    """
    started: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _: FrameType | None) -> None:
        if signum == signal.SIGINT and _terminal_signals_us():
            return  # the terminal's Ctrl-C reached the child itself
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)

    # Installed before the child starts: a signal in between must not end undoproxy alone.
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        try:
            started.append(subprocess.Popen(list(command), env=env))
        except FileNotFoundError:
            raise UndoproxyError(f"command not found: {command[0]}") from None
        except PermissionError:
            raise UndoproxyError(f"cannot run {command[0]}: permission denied") from None
        except OSError as exc:
            raise UndoproxyError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
        code = started[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code if code >= 0 else 128 - code


def _terminal_signals_us() -> bool:
    """True when undoproxy is in its terminal's foreground process group (Ctrl-C signals the
    whole group, the child with it)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)
