"""undoproxy: a transparent HTTP(S) side-effect proxy with approvals, a journal and rollback."""

__version__ = "0.1.0"
