"""The teacher's token: given to the server at start (``EXPLORER_TEACHER_TOKEN``), typed on
the Class page, compared in constant time, and never written into a URL."""
from __future__ import annotations

import hmac
import os

TOKEN_ENV = "EXPLORER_TEACHER_TOKEN"


def token_configured() -> bool:
    return bool(os.environ.get(TOKEN_ENV))


def is_teacher(given: str) -> bool:
    """Whether ``given`` is the server's teacher token (False when the server has none)."""
    expected = os.environ.get(TOKEN_ENV, "")
    # compare_digest takes the same time wherever the strings differ; bytes allow any text.
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())
