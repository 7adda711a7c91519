"""Small helpers the core tests share (on sys.path through ``tests/conftest.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sesstree import Store

HELPERS = Path(__file__).parent


def load_script(path: Path) -> ModuleType:
    """The Python file at ``path`` (a data folder's generator script, say) as a module, so a
    test reads what the script made with the script's own code."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def user(text: str, **extra: object) -> dict[str, object]:
    """A user chat message."""
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, **extra: object) -> dict[str, object]:
    """An assistant chat message."""
    return {"role": "assistant", "content": text, **extra}


def agent_turn(store: Store, name: str, prompt: str, answer: str) -> None:
    """One turn as the agent loop writes it: every turn starts with the same ``turn/start``."""
    s = store.session(name)
    s.append("turn/start", {"trigger": {"kind": "user"}})
    s.add_message({"role": "user", "content": prompt})
    s.append("step/start", {"step": 1})
    s.add_message({"role": "assistant", "content": answer})
    s.append("usage", {"model": "m", "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
    s.append("step/end", {"step": 1, "finish_reason": "stop"})
    s.append("turn/end", {"reason": {"kind": "answer"}, "steps": 1})
