"""Small helpers the core tests share (on sys.path through ``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).parent


def user(text: str, **extra: object) -> dict[str, object]:
    """A user chat message."""
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, **extra: object) -> dict[str, object]:
    """An assistant chat message."""
    return {"role": "assistant", "content": text, **extra}
