"""The engine contract, text: what no engine can hold is refused at the seam, the same way.

Every engine checks the text that crosses the seam with :mod:`sesstree.store.storable`
before it writes anything: a lone surrogate anywhere, a NUL anywhere but in session
metadata (JSON keeps it as ``\\u0000``). A refused write changes nothing, inside a batch or
not; a read by a name no engine can hold finds nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from ...errors import InvalidEventError, InvalidRefNameError, UnknownRevisionError
from ...node import NodeId, session_ref, symbolic, tag_ref
from ...repo.store import Store
from ...store.base import ImportOrigin, RawNode, RefUpdate, SessionMeta
from .. import Engine, grow

__all__ = ["test_a_name_no_engine_can_hold_finds_nothing",
           "test_a_nul_in_session_metadata_comes_back_exactly",
           "test_text_no_engine_can_hold_is_refused_naming_the_field"]


# What no engine can hold as text: refused on every engine, before anything is written, by an
# error naming the field.
_Q = session_ref("q")
_UNSTORABLE = [
    ("meta value", lambda s: s.set_session_meta("q", {"k": "ok", "deep": [{"x": "\udc80"}]}),
     InvalidEventError, r"session metadata of 'q': field 'deep'\[0\]\['x'\] is not valid Unicode"),
    ("meta key", lambda s: s.set_session_meta("q", {"\ud800": 1}),
     InvalidEventError, r"session metadata of 'q': key '\\ud800' is not valid Unicode"),
    ("meta seam", lambda s: s.backend.set_session_meta("q", SessionMeta({"k": "\udc80"})),
     InvalidEventError, r"session metadata of 'q': field 'k' is not valid Unicode"),
    ("origin", lambda s: s.set_session_origin("q", ImportOrigin("jsonl", "/tmp/\udcff.jsonl")),
     InvalidEventError, r"import source of session 'q' is not valid Unicode"),
    ("reason NUL", lambda s: s.reset("q", "q~1", "undo\x00"),
     InvalidEventError, f"reflog reason of {_Q} contains a NUL character"),
    ("reason surrogate", lambda s: s.reset("q", "q~1", "undo \udc80"),
     InvalidEventError, f"reflog reason of {_Q} is not valid Unicode"),
    ("rename reason", lambda s: s.backend.rename_ref(_Q, session_ref("w"), s.resolve("q"), "x\x00"),
     InvalidEventError, f"reflog reason of {_Q} contains a NUL"),
    ("ref name", lambda s: s.backend.commit([], [RefUpdate(tag_ref("a\x00b"), None,
                                                           s.resolve("q"), "t")]),
     InvalidRefNameError, rf"invalid ref name '{tag_ref('a')}\\x00b': it contains a NUL"),
    ("event type", lambda s: s.backend.commit([RawNode(NodeId("ab" * 32), None, "x\x00",
                                                       b"\x90")], []),
     InvalidEventError, r"event type contains a NUL"),
    ("HEAD", lambda s: s.backend.set_head(symbolic(session_ref("\udc80"))),
     InvalidRefNameError, r"invalid HEAD .* is not valid Unicode"),
]


@pytest.mark.parametrize(("case", "write", "error", "message"), _UNSTORABLE,
                         ids=[c[0] for c in _UNSTORABLE])
def test_text_no_engine_can_hold_is_refused_naming_the_field(
        store: Store, case: str, write: Any, error: type[Exception], message: str) -> None:
    ids = grow(store, "q", 2)
    store.set_session_meta("q", {"kept": True})
    before = (store.reflog(), store.backend.count_nodes(), store.head(),
              store.backend.list_session_meta())
    with pytest.raises(error, match=message):
        write(store)
    with pytest.raises(error, match=message):  # inside a batch: it rolls back with the rest
        with store.batch():
            grow(store, "q", 1, tag="x")
            write(store)
    after = (store.reflog(), store.backend.count_nodes(), store.head(),
             store.backend.list_session_meta())
    assert after == before and store.session_head("q") == ids[-1]
    assert store.get_session_meta("q") == {"kept": True} and store.fsck() == []


@pytest.mark.parametrize("name", ["q\x00", "q\udc80"], ids=["NUL", "surrogate"])
def test_a_name_no_engine_can_hold_finds_nothing(store: Store, name: str) -> None:
    grow(store, "q", 1)
    ref, backend = session_ref(name), store.backend
    assert backend.get_ref(ref) is None and backend.list_refs(ref) == []
    assert backend.reflog(ref) == [] and backend.get_session_meta(name) is None
    assert backend.expire_reflog(ref) == 0
    assert store.session_head(name) is None and not store.has_session(name)
    assert store.reflog(name) == [] and store.reflog_page(name, 5) == ([], 0)
    assert store.get_session_meta(name) is None and store.session_origin(name) is None
    with pytest.raises(UnknownRevisionError):
        store.resolve(name)
    scale: Any = backend  # the optional reads, where the engine has them
    reads: list[tuple[str, tuple[Any, ...], Any]] = [
        ("list_refs_with_depth", (ref,), []),
        ("newest_refs", (ref, 5), []),
        ("reflog_page", (ref, 5), ([], 0)),
        ("reflog_times", (ref, [store.resolve("q")]), {})]
    for read, args, empty in reads:
        if hasattr(scale, read):
            assert getattr(scale, read)(*args) == empty, read
    assert store.fsck() == []


def test_a_nul_in_session_metadata_comes_back_exactly(engine: Engine) -> None:
    meta = {"k": "a\x00b", "a\x00": ["\x00"], "é\x00": "ü"}
    with engine.open() as store:
        store.set_session_meta("q", meta)
        assert store.get_session_meta("q") == meta
    with engine.open() as store:
        assert store.get_session_meta("q") == meta
