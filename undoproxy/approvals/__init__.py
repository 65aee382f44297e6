"""Approval gates: held requests waiting for a person, their badges, diffs and notifications.

`ApprovalQueue` (queue.py) owns the pending approvals and their decisions; the mitmproxy side
(proxy/holds.py) parks flows on them, the admin API and page decide them. `badges`, `diff`
and `grouping` (which requests share an approval, and the headers a card shows) are pure:
plain data in, plain data out.
"""
