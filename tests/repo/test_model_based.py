"""Model-based test: random operations on a store against the seed's flat-file semantics.

The model is the seed itself, reduced to a dict: session name -> list of messages; fork copies
the list, rewind truncates it, a reset copies another list, an import of a JSONL file makes the
session equal to the file unless the session already holds the file as a prefix. After every
step, every session's derived messages must equal the model, on every backend.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sesstree import InputError, Session, Store, open_store
from sesstree.interop import import_files

NAMES = ["a", "b", "c", "team/d"]

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | text | st.floats(
    allow_nan=False, allow_infinity=False, width=64)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "critic"]), "content": text},
    optional={"name": text, "extra": st.lists(scalars, max_size=3), "meta": st.dictionaries(
        st.sampled_from(["x", "y", "z"]), scalars, max_size=2)},
)
# A small pool of messages makes shared prefixes (and so deduplication) common.
pooled = st.sampled_from([{"role": "user", "content": str(i)} for i in range(3)]) | message
names = st.sampled_from(NAMES)


class SeedModel(RuleBasedStateMachine):
    backend = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="sesstree-model-"))
        self.store: Store = open_store(":memory:" if self.backend == "memory" else self.tmp / "s")
        self.model: dict[str, list[dict[str, Any]]] = {}
        self.handles: dict[str, Session] = {}
        self.files = 0

    def teardown(self) -> None:
        try:
            assert self.store.fsck() == []
        finally:
            self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def handle(self, name: str) -> Session:
        """A long-lived handle per session, to exercise its cache; refreshed after outside moves."""
        if name not in self.handles:
            self.handles[name] = self.store.session(name)
        return self.handles[name]

    def moved(self, name: str) -> None:
        self.handles.pop(name, None)

    # -- operations --------------------------------------------------------------------------

    @rule(name=names, msg=pooled)
    def add_message(self, name: str, msg: dict[str, Any]) -> None:
        self.handle(name).add_message(msg)
        self.model.setdefault(name, []).append(msg)

    @rule(name=names, msgs=st.lists(pooled, min_size=1, max_size=4))
    def extend(self, name: str, msgs: list[dict[str, Any]]) -> None:
        self.handle(name).extend([("message" if m["role"] == "critic" else f"{m['role']}/message",
                                   m) for m in msgs])
        self.model.setdefault(name, []).extend(msgs)

    @rule(src=names, dst=names, back=st.integers(0, 3))
    def fork(self, src: str, dst: str, back: int) -> None:
        if src not in self.model or dst in self.model or back >= len(self.model[src]):
            return
        self.store.fork(dst, f"{src}~{back}")
        self.model[dst] = self.model[src][: len(self.model[src]) - back]
        self.moved(dst)

    @rule(name=names, n=st.integers(1, 4))
    def rewind(self, name: str, n: int) -> None:
        if n >= len(self.model.get(name, [])):
            return
        self.handle(name).rewind(n)
        del self.model[name][-n:]

    @rule(name=names, other=names, back=st.integers(0, 2))
    def reset(self, name: str, other: str, back: int) -> None:
        if name not in self.model or other not in self.model or back >= len(self.model[other]):
            return
        self.store.reset(name, f"{other}~{back}")
        self.model[name] = self.model[other][: len(self.model[other]) - back]
        self.moved(name)

    @rule(name=names)
    def delete(self, name: str) -> None:
        if name not in self.model:
            return
        self.store.delete_session(name)
        del self.model[name]
        self.moved(name)

    @rule(src=names, dst=names)
    def rename(self, src: str, dst: str) -> None:
        if src not in self.model or dst in self.model:
            return
        self.store.rename_session(src, dst)
        self.model[dst] = self.model.pop(src)
        self.moved(src)
        self.moved(dst)

    @rule(name=names, keep=st.integers(0, 6), more=st.lists(pooled, max_size=4))
    def import_file(self, name: str, keep: int, more: list[dict[str, Any]]) -> None:
        """Write the seed's file (a prefix of the session, then new lines) and import it."""
        current = self.model.get(name, [])
        lines = current[:keep] + more
        self.files += 1
        path = self.tmp / f"import-{self.files}.jsonl"
        path.write_text("".join(json.dumps(m) + "\n" for m in lines), encoding="utf-8")
        if not lines:
            with pytest.raises(InputError, match="empty file"):
                import_files(self.store, [path], name=name, format="seed")
            return
        # --force: --as NAME over a history the file does not extend is refused without it
        [result] = import_files(self.store, [path], name=name, format="seed", force=True)
        if lines and lines != current[: len(lines)]:
            self.model[name] = lines
        assert result.session == name
        self.moved(name)

    @rule()
    def reopen(self) -> None:
        if self.backend == "memory":
            return
        self.store.close()
        self.store = open_store(self.tmp / "s")
        self.handles.clear()

    # -- the comparison ----------------------------------------------------------------------

    @invariant()
    def sessions_equal_model(self) -> None:
        for name in NAMES:
            expected = self.model.get(name, [])
            assert self.store.session(name).messages() == expected, name
            if name in self.handles:
                assert self.handles[name].messages() == expected, name
            if expected:
                assert self.store.messages(name) == expected
                assert self.store.depth(name) == len(expected)
        assert sorted(s.name for s in self.store.sessions()) == sorted(self.model)


class MemorySeedModel(SeedModel):
    backend = "memory"


_settings = settings(max_examples=50, stateful_step_count=25, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
TestModelSqlite = SeedModel.TestCase
TestModelSqlite.settings = _settings
TestModelMemory = MemorySeedModel.TestCase
TestModelMemory.settings = _settings


@pytest.mark.stress
class TestModelSqliteStress(SeedModel.TestCase):  # type: ignore[misc,valid-type]
    settings = settings(max_examples=500, stateful_step_count=40, deadline=None)
