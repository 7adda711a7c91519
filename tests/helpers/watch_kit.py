"""What the watch tests share: a store's sessions as comparable facts, and the import of the
same files into a fresh store, to compare a watch against."""

from __future__ import annotations

from pathlib import Path

from sesstree import Store, open_store
from sesstree.interop import import_files

__all__ = ["imported", "recorded"]


def recorded(store: Store) -> tuple[dict[str, str], set[str]]:
    """Every session's head by name, and every node the sessions reach."""
    heads = {info.name: store.session_head(info.name) or "" for info in store.sessions()}
    nodes: set[str] = set()
    for head in heads.values():
        nodes.update(store.chain(head).ids)
    return heads, nodes


def imported(folder: Path, tmp: Path) -> tuple[dict[str, str], set[str]]:
    """:func:`recorded` of a fresh store that ``sess import -r folder`` filled."""
    with open_store(tmp) as store:
        import_files(store, [folder], recursive=True)
        return recorded(store)
