"""sesstree: store LLM-agent conversations the way git stores commits.

Every event is a content-addressed node pointing to its parent; sessions are named refs into one
shared DAG, so forks are O(1), shared prefixes are stored once, and every ref move is logged.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from .errors import (
    AgentError,
    AmbiguousPrefixError,
    ConflictError,
    IncompleteReplyError,
    InputError,
    InvalidEventError,
    InvalidRefNameError,
    MaxTurnsExceeded,
    MissingNodeError,
    ProviderError,
    PushRejectedError,
    ReadViewWriteError,
    RefExistsError,
    RemoteError,
    RevisionError,
    SearchQueryError,
    SesstreeError,
    StoreCorruptError,
    StoreError,
    StoreFormatError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    UnknownRevisionError,
    WalDamagedError,
)

if _typing.TYPE_CHECKING:
    from .agent import Agent, OpenAIProvider, Tool, tool
    from .events import Derived, Problem, register_event_type
    from .node import Node, NodeId, make_node
    from .repo.session import Session
    from .repo.store import Diff, SessionInfo, Store, open_store
    from .sending import derive_messages, repair_messages

# Everything but the errors is imported on first use: `sess --help` and the commands that do
# not open a store should not pay for the store modules, msgspec and blake3 at start-up, and
# a store-only program should not pay for the agent loop's HTTP client and wire format.
_LAZY = {
    "Agent": ".agent", "OpenAIProvider": ".agent", "Tool": ".agent", "tool": ".agent",
    "Derived": ".events", "Problem": ".events", "derive_messages": ".sending",
    "register_event_type": ".events",
    "Node": ".node", "NodeId": ".node", "make_node": ".node",
    "Diff": ".repo.store", "SessionInfo": ".repo.store", "Store": ".repo.store",
    "open_store": ".repo.store",
    "repair_messages": ".sending",
    "Session": ".repo.session",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sesstree' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentError",
    "AmbiguousPrefixError",
    "ConflictError",
    "Derived",
    "Diff",
    "IncompleteReplyError",
    "InputError",
    "InvalidEventError",
    "InvalidRefNameError",
    "MaxTurnsExceeded",
    "MissingNodeError",
    "Node",
    "NodeId",
    "OpenAIProvider",
    "Problem",
    "ProviderError",
    "PushRejectedError",
    "ReadViewWriteError",
    "RefExistsError",
    "RemoteError",
    "RevisionError",
    "SearchQueryError",
    "Session",
    "SessionInfo",
    "SesstreeError",
    "Store",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatError",
    "StoreFullError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "Tool",
    "UnknownRevisionError",
    "WalDamagedError",
    "__version__",
    "derive_messages",
    "make_node",
    "open_store",
    "register_event_type",
    "repair_messages",
    "tool",
]
