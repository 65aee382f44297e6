"""Session rollback: send each mutation's compensation, newest first, and tell the truth.

Each mutation step ends `compensated` only when a read of its target after the undo shows the
state before the step (or, for what it created, its absence); `unverified`, `failed`,
`conflict`, `irreversible` or `skipped` otherwise (see `report.py`). A failing step never stops
the others. A compensation is never sent twice blind: `compensating` is recorded before it
goes out, and a later rollback decides such a step by reading its target. Only one rollback of
a session runs at a time, anywhere (`store.base.Lease`). Phases: decide -> mark -> send ->
verify (`executor.py` says which module does what).
"""

from undoproxy.rollback.executor import Rollback, RollbackRefused
from undoproxy.rollback.report import Report, StepResult, fully_rolled_back, undone
from undoproxy.rollback.verdict import Verdict

__all__ = [
    "Report",
    "Rollback",
    "RollbackRefused",
    "StepResult",
    "Verdict",
    "fully_rolled_back",
    "undone",
]
