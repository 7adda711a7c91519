"""How ``sess run`` ran a session: remembered when a turn starts, found again by the next run.

The settings (endpoint, model, tools, API key variable, ``--null-content`` and the request
fields of ``--param``/``--extra-body``/``--max-tokens``/``--temperature``) are kept in the
session's metadata under :data:`~sesstree.store.base.RUN_KEY`, written as soon as a turn
starts, so that a turn that fails (server down, a reply cut off) is retried with the
settings it was started with. The metadata outlives ``reset --empty``.

A session with no settings of its own (a fork, by ``sess branch``, ``checkout -b``,
``Session.fork``, the proxy or a pull, or a session some program wrote) takes them from the
session it shares the most history with, found along the history itself: no way of making a
fork has to copy anything, so none can forget to. Shared history counts only when it holds a
user message: every turn starts with the same ``turn/start`` node, which says nothing about
where a session came from.

Never remembered: the API key (only the name of its variable), an endpoint URL with a
password or a query (where keys hide), and no request field named like a credential is
accepted at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ..node import NodeId
from ..repo.store import Store
from ..store.base import RUN_KEY

__all__ = ["RESERVED_FIELDS", "parse_params", "remember", "remembered", "secret_field"]

#: Request fields ``sess run`` sets itself, with the option that sets each.
RESERVED_FIELDS = {"model": "--model", "messages": "the session", "tools": "--tools",
                   "stream": "--stream/--no-stream"}

#: Words that make a field name a credential's (``api_key``, ``x-auth-token``, ``password``).
#: Whole words only: ``max_tokens`` is no token.
_SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "auth",
                           "authorization", "cookie", "credential", "credentials", "signature",
                           "bearer"})


def remembered(store: Store, name: str) -> dict[str, Any]:
    """The settings session ``name`` runs with: its own, else those of the session it shares
    the most history with ({} for none)."""
    own = _own(store, name)
    if own is not None:
        return own
    head = store.session_head(name)
    if head is None:
        return {}
    mine = store.chain(head)
    ids = mine.ids
    # Shared history counts from its first user message on.
    first_user = next((i for i, kind in enumerate(mine.types) if kind == "user/message"), None)
    if first_user is None:
        return {}
    # One read of the metadata and one of the heads, not one of each per session; a
    # candidate's history is then followed by node keys alone (see _shared).
    metas = store.session_metas()
    candidates: dict[str, tuple[NodeId, float, dict[str, Any]]] = {}
    for info in store.sessions():
        found = metas.get(info.name)
        settings = found.fields.get(RUN_KEY) if found is not None else None
        if info.name != name and isinstance(settings, dict):
            candidates[info.name] = (info.head, info.moved, settings)
    shared = _shared(store, ids, first_user, {n: c[0] for n, c in candidates.items()})
    best: tuple[int, float, dict[str, Any]] | None = None
    for other, length in shared.items():
        _, moved, settings = candidates[other]
        if best is None or (length, moved) > best[:2]:
            best = (length, moved, settings)
    return best[2] if best is not None else {}


def _shared(store: Store, ids: Sequence[NodeId], first_user: int,
            heads: Mapping[str, NodeId]) -> dict[str, int]:
    """How many nodes each session of ``heads`` shares with the history ``ids``, for those
    that share its node ``first_user`` (and so all before it).

    A session whose head lies on ``ids`` needs no read. For the others, only the links
    (integer keys, no payload) of nodes written after ``ids[first_user]`` are read: keys grow
    in write order, so a session that shares that node forks from ``ids`` above it.
    """
    at = {node: n for n, node in enumerate(ids)}
    out: dict[str, int] = {}
    rest: dict[str, NodeId] = {}
    for other, head in heads.items():
        if head in at:
            if at[head] >= first_user:
                out[other] = at[head] + 1
        else:
            rest[other] = head
    if not rest:
        return out
    links = store.links()
    mine = links.keys(list(ids[first_user:]))
    floor = mine.get(ids[first_user])
    if floor is None:
        return out
    position = {key: at[node] for node, key in mine.items()}
    keys = links.keys(list(rest.values()))
    tips = {other: keys[head] for other, head in rest.items()
            if head in keys and keys[head] > floor}
    if not tips:
        return out
    parent: dict[int, int | None] = {}
    for key, up in links.newest_first():
        if key < floor:
            break
        parent[key] = up
    for other, key in tips.items():
        walk: int | None = key
        while walk is not None and walk >= floor and walk not in position:
            walk = parent.get(walk)
        if walk is not None and walk in position:
            out[other] = position[walk] + 1
    return out


def remember(store: Store, name: str, settings: Mapping[str, Any]) -> None:
    """Keep ``settings`` (``base_url``, ``model``, ``api_key_env``, ``null_content``,
    ``tools``, ``params``) as how session ``name`` runs; the rest of its metadata is kept."""
    run: dict[str, Any] = {key: settings[key] for key in
                           ("model", "api_key_env", "null_content", "tools")}
    if settings.get("params"):
        run["params"] = dict(settings["params"])
    url = urlsplit(str(settings["base_url"]))
    if url.password is None and not url.query:
        run["base_url"] = settings["base_url"]
    meta = dict(store.get_session_meta(name) or {})
    if meta.get(RUN_KEY) == run:
        return
    meta[RUN_KEY] = run
    store.set_session_meta(name, meta)


def parse_params(extra_body: str | None, params: Iterable[str]) -> dict[str, Any | None]:
    """The request fields given on the command line: ``--extra-body JSON`` then each
    ``--param KEY=VALUE`` (VALUE read as JSON when it is JSON, else as text; ``KEY=`` with
    nothing after is None: forget KEY).

    Raises:
        ValueError: a malformed option, with the option named.
    """
    fields: dict[str, Any | None] = {}
    if extra_body is not None:
        try:
            body = json.loads(extra_body)
        except ValueError as exc:
            raise ValueError(f"--extra-body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ValueError("--extra-body must be a JSON object, as {\"top_p\": 0.9}")
        fields.update(body)
    for item in params:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            # Not echoed when it looks like a credential ("Authorization: Bearer sk-…").
            shown = ("(not shown: it looks like a credential)"
                     if secret_field({item: ""}, None) or "bearer" in item.lower()
                     else repr(item))
            raise ValueError(f"--param {shown}: expected KEY=VALUE, as top_p=0.9")
        if not text:
            fields[key] = None
            continue
        try:
            fields[key] = json.loads(text)
        except ValueError:
            fields[key] = text
    return fields


def secret_field(fields: Mapping[str, Any], key_value: str | None) -> str | None:
    """The name of a request field that holds a credential, or None: one named like one
    (``api_key``, ``auth_token``), one whose text is the API key ``key_value`` or a
    ``Bearer`` header, at any depth (``metadata.api_key``, ``headers.Authorization``)."""
    for name, value in fields.items():
        found = _secret_in(str(name), value, key_value)
        if found is not None:
            return found
    return None


def _secret_in(path: str, value: Any, key_value: str | None) -> str | None:
    # Each field's own name is judged by its last part: "metadata.api_key" by "api_key".
    if _secret_name(path.rpartition(".")[2]):
        return path
    if isinstance(value, str):
        if key_value and len(key_value) >= 8 and key_value in value:
            return path
        return path if value.strip().lower().startswith("bearer ") else None
    items: Iterable[tuple[str, Any]] = ()
    if isinstance(value, Mapping):
        items = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{n}]", v) for n, v in enumerate(value))
    for inner, item in items:
        if key_value and len(key_value) >= 8 and key_value in inner:
            return path  # the key as a name: show only where it is, not the name
        found = _secret_in(inner, item, key_value)
        if found is not None:
            return found
    return None


def _secret_name(name: str) -> bool:
    words = re.findall(r"[a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return bool(_SECRET_WORDS.intersection(words)) or "apikey" in "".join(words)


def _own(store: Store, name: str) -> dict[str, Any] | None:
    # Read whether or not the session has events: an emptied one keeps its metadata.
    found = (store.get_session_meta(name) or {}).get(RUN_KEY)
    return found if isinstance(found, dict) else None


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
