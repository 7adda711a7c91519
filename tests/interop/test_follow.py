"""The follower under ``sess watch``: files written the way each agent writes them (lines
appended, half a line, a truncation, a rewrite, a restart) land the same nodes as an import
of the final files, and only what was appended is read."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from agent_writers import AGENTS, gemini_document, session_lines, session_path
from watch_kit import imported, recorded

from sesstree import open_store
from sesstree.errors import ConflictError
from sesstree.interop import claude, import_files
from sesstree.interop.follow import Follower


def _write(path: Path, text: str, mode: str = "a") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as f:
        f.write(text)


@pytest.mark.parametrize("agent", AGENTS)
def test_growing_file_lands_as_its_import(agent: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = session_path(home, agent, "g")
    lines = session_lines(agent, "g", 3)
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        outcomes = []
        for i, line in enumerate(lines):
            half = len(line) // 2
            _write(path, line[:half])  # a torn write: the line waits for its end
            follower.look_all([path])
            _write(path, line[half:] + "\n")
            looks = follower.look_all([path])
            outcomes += [r.outcome for look in looks for r in look.results]
            if i == len(lines) // 2:
                follower = Follower(store)  # a restart half-way
        watched = recorded(store)
    assert outcomes and set(outcomes) <= {"empty", "created", "fast-forward", "up to date"}
    assert watched == imported(home, tmp_path / "i")


@pytest.mark.parametrize("agent", AGENTS)
def test_truncated_and_rewritten_files_land_as_their_imports(agent: str, tmp_path: Path) -> None:
    # What a watch saw of a file that was cut back and rewritten is what importing it at each
    # of those moments would have recorded (the lines cut away stay, as a branch or in the
    # reflog); of the final file, its import's sessions are all there, as they are.
    home = tmp_path / "home"
    path = session_path(home, agent, "t")
    lines = session_lines(agent, "t", 3)
    with open_store(tmp_path / "w") as store, open_store(tmp_path / "step") as step:
        follower = Follower(store)

        def look() -> None:
            follower.look_all([path])
            import_files(step, [home], recursive=True)

        _write(path, "\n".join(lines) + "\n")
        look()
        # A rewind: the file cut back to its first lines, then going on differently.
        _write(path, "\n".join(lines[:5]) + "\n", "w")
        look()
        _write(path, "\n".join(lines[9:]) + "\n")
        look()
        # Rewritten whole, as a tool that saves through a temporary file does (a new inode),
        # and then in place, as long as before.
        temp = path.with_suffix(".tmp")
        temp.write_text("\n".join(lines[:7]) + "\n")
        os.replace(temp, path)
        look()
        text = path.read_text()
        _write(path, text.replace("prompt 1", "prompt 9"), "w")
        look()
        watched = recorded(store)
        stepwise = recorded(step)
    assert watched == stepwise
    final_heads, final_nodes = imported(home, tmp_path / "i")
    assert set(final_heads.values()) <= set(watched[0].values())
    assert final_nodes <= watched[1]


def test_only_the_appended_bytes_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = session_path(tmp_path, "codex", "r")
    lines = session_lines("codex", "r", 40)
    _write(path, "\n".join(lines[:-1]) + "\n")
    reads: list[int] = []
    real_open = Path.open

    def counting_open(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        f = real_open(self, *args, **kwargs)  # type: ignore[call-overload]
        if self == path:
            read = f.read

            def counted(n: int = -1) -> bytes:
                data = read(n)
                reads.append(len(data))
                return data  # type: ignore[no-any-return]

            f.read = counted
        return f

    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        follower.look_all([path])
        size = path.stat().st_size
        monkeypatch.setattr(Path, "open", counting_open)
        _write(path, lines[-1] + "\n")
        follower.look_all([path])
    # The new line, and the few KB before it and at the start that show the file was only
    # appended to.
    assert 0 < sum(reads) <= len(lines[-1]) + 1 + 4096 + 512 < size


def test_a_restarted_follower_reads_nothing_unchanged(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for agent in AGENTS:
        path = session_path(home, agent, "s")
        _write(path, "\n".join(session_lines(agent, "s", 2)) + "\n")
    with open_store(tmp_path / "w") as store:
        Follower(store).catch_up([home])
        before = recorded(store)
        entries = len(store.reflog())
        looks = Follower(store).catch_up([home])
        assert [r for look in looks for r in look.results] == []
        assert recorded(store) == before and len(store.reflog()) == entries


def test_a_second_follower_does_no_harm(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = session_path(home, "claude", "c")
    lines = session_lines("claude", "c", 3)
    with open_store(tmp_path / "w") as one, open_store(tmp_path / "w") as two:
        first, second = Follower(one), Follower(two)
        for i, line in enumerate(lines):
            _write(path, line + "\n")
            (first if i % 2 else second).look_all([path])
            (second if i % 2 else first).look_all([path])
        watched = recorded(one)
        names = [info.name for info in one.sessions()]
    assert watched == imported(home, tmp_path / "i")
    assert not any(n.endswith("-2") for n in names)  # no second copy of the session


def test_a_lost_compare_and_set_writes_nothing(tmp_path: Path) -> None:
    path = session_path(tmp_path, "pi", "p")
    _write(path, "\n".join(session_lines("pi", "p", 1)) + "\n")
    with open_store(tmp_path / "w") as store:
        Follower(store).catch_up([path])
        mark = store.watch_marks()[str(path)]
        with pytest.raises(ConflictError):
            store.set_watch_mark(str(path), None, mark)
        assert store.watch_marks()[str(path)] == mark


def test_gemini_document_rewritten_in_place(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = home / ".gemini" / "tmp" / "p" / "chats" / "session-2026-11-30T10-00-abcdef01.json"
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        for turns in (1, 2, 3):
            doc = gemini_document("d", turns)
            _write(path, doc[: len(doc) // 2], "w")  # caught half-written: waits
            follower.look_all([path])
            _write(path, doc, "w")
            follower.look_all([path])
        watched = recorded(store)
    assert watched == imported(home, tmp_path / "i")
    assert len(watched[0]) == 1


def test_a_pending_reply_is_settled_once_the_file_is_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The newest model message of a file being written is kept as its records; once the file
    # has been quiet for LIVE_WINDOW, an import takes it as finished, and so does the watch,
    # with nothing written to the file.
    monkeypatch.setattr(claude, "LIVE_WINDOW", 1.0)
    home = tmp_path / "home"
    path = session_path(home, "gemini", "q")
    _write(path, "\n".join(session_lines("gemini", "q", 1)) + "\n")
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        follower.catch_up([home])
        live = recorded(store)
        due = follower.next_due()
        assert due is not None
        time.sleep(max(0.0, due - time.time()) + 0.1)
        follower.look_all([])
        settled = recorded(store)
    assert settled != live
    assert settled == imported(home, tmp_path / "i")


def test_unreadable_and_foreign_files_are_said_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bad = session_path(home, "codex", "b")
    _write(bad, "\n".join(session_lines("codex", "b", 1)) + "\n")
    bad.chmod(0)
    (home / "notes.json").write_text('{"not": "a transcript"}')
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        looks = follower.catch_up([home])
        again = follower.look_all([bad, home / "notes.json"])
    failed = [look for look in looks if look.failed]
    if os.geteuid() != 0:  # root reads any file
        assert len(failed) == 1 and "cannot read" in failed[0].problems[0]
    assert [p for look in again for p in look.problems] == []


def test_a_file_gone_loses_its_mark_and_keeps_its_sessions(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = session_path(home, "codex", "g")
    _write(path, "\n".join(session_lines("codex", "g", 1)) + "\n")
    with open_store(tmp_path / "w") as store:
        Follower(store).catch_up([home])
        sessions = recorded(store)
        path.unlink()
        Follower(store).catch_up([home])
        assert store.watch_marks() == {}
        assert recorded(store) == sessions


def test_notes_about_a_reply_still_being_written_are_not_repeated(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = session_path(home, "claude", "n")
    lines = session_lines("claude", "n", 2)
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        said = []
        for line in lines:
            _write(path, line + "\n")
            said += [p for look in follower.look_all([path]) for p in look.problems]
    assert said == []


def test_a_second_notice_of_a_write_keeps_the_file_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write is often notified twice; the second look finds nothing new, and must not let
    # go of what it read (the next line would then read the whole file again).
    path = session_path(tmp_path, "pi", "d")
    lines = session_lines("pi", "d", 30)
    _write(path, "\n".join(lines[:-1]) + "\n")
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        follower.look_all([path])
        follower.look_all([path])  # the second notice
        whole: list[Path] = []
        real = Path.read_bytes
        monkeypatch.setattr(Path, "read_bytes", lambda self: whole.append(self) or real(self))
        sizes: list[int] = []
        real_open = Path.open

        def sized_open(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            f = real_open(self, *args, **kwargs)  # type: ignore[call-overload]
            if self == path:
                read = f.read
                f.read = lambda n=-1: (data := read(n), sizes.append(len(data)))[0]
            return f

        monkeypatch.setattr(Path, "open", sized_open)
        _write(path, lines[-1] + "\n")
        follower.look_all([path])
    assert 0 < sum(sizes) <= len(lines[-1]) + 1 + 4096 + 512 < path.stat().st_size


def test_a_landing_the_store_refused_is_recorded_once_it_takes_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sesstree.errors import StoreFullError
    from sesstree.interop import follow

    home = tmp_path / "home"
    path = session_path(home, "codex", "e")
    _write(path, "\n".join(session_lines("codex", "e", 2)) + "\n")
    real = follow._JSONL["codex"]

    def full(*args: object, **kwargs: object) -> object:
        raise StoreFullError("the disk is full")

    now = [1_000.0]
    with open_store(tmp_path / "w") as store:
        follower = Follower(store, clock=lambda: now[0])
        monkeypatch.setitem(follow._JSONL, "codex", full)
        [look] = follower.look_all([path])
        assert look.failed and "disk is full" in look.problems[0]
        assert store.watch_marks() == {} and store.sessions() == []
        monkeypatch.setitem(follow._JSONL, "codex", real)
        due = follower.next_due()
        assert due is not None and due > now[0]
        now[0] = due
        follower.look_all([])  # the wake it was due at, with no change to the file
        watched = recorded(store)
    assert watched == imported(home, tmp_path / "i")


def test_a_store_that_refuses_writes_is_tried_less_and_less_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only, full or locked store: the watch does not read and try again at every
    # notice (a busy loop at full CPU while an agent writes); it says so once, waits longer
    # after each refusal, and goes on as soon as the store takes writes.
    from sesstree.errors import StoreReadOnlyError
    from sesstree.interop import follow

    home = tmp_path / "home"
    paths = [session_path(home, "codex", name) for name in ("a", "b")]
    for p in paths:
        _write(p, "\n".join(session_lines("codex", p.stem, 1)) + "\n")
    real = follow._JSONL["codex"]
    tries: list[float] = []
    now = [1_000.0]

    def refused(*args: object, **kwargs: object) -> object:
        tries.append(now[0])
        raise StoreReadOnlyError("the store is on read-only media")

    with open_store(tmp_path / "w") as store:
        follower = Follower(store, clock=lambda: now[0])
        monkeypatch.setitem(follow._JSONL, "codex", refused)
        said = [p for look in follower.catch_up([home]) for p in look.problems]
        waits = []
        for _ in range(8):
            for _ in range(20):  # notices of the agent's writes, as fast as they come
                said += [p for look in follower.look_all(paths) for p in look.problems]
                now[0] += 0.01
            due = follower.next_due()
            assert due is not None
            waits.append(due - now[0])
            now[0] = max(now[0], due)
            said += [p for look in follower.look_all([]) for p in look.problems]
        assert len(tries) <= 1 + 8 + 1
        assert waits == sorted(waits) and waits[-1] > 10 * max(waits[0], 0.1)
        assert len(said) == 1 and "read-only" in said[0]
        monkeypatch.setitem(follow._JSONL, "codex", real)
        due = follower.next_due()
        assert due is not None
        now[0] = max(now[0], due)
        said = [p for look in follower.look_all([]) for p in look.problems]
        watched = recorded(store)
    assert watched == imported(home, tmp_path / "i")
    assert len(said) == 1 and "takes writes again" in said[0]


@pytest.mark.parametrize("restart", [False, True])
def test_a_same_length_rewrite_with_the_same_mtime_is_recorded(restart: bool,
                                                              tmp_path: Path) -> None:
    # Bytes of an early line changed in place, the size the same and the mtime put back (a
    # write within the file system's timestamp resolution looks like this): the stat of the
    # file is that of its mark, yet it is read again and recorded as its import is.
    home = tmp_path / "home"
    path = session_path(home, "codex", "x")
    lines = session_lines("codex", "x", 40)
    _write(path, "\n".join(lines) + "\n")
    written = path.stat().st_mtime
    with open_store(tmp_path / "w") as store:
        # Looked at 10 ms after the write (on a loaded machine a look may come later, and
        # then a rewrite within the mtime's resolution could not have come after it).
        follower = Follower(store, clock=lambda: written + 0.01)
        follower.look_all([path])
        before = path.stat()
        data = path.read_bytes()
        edited = data.replace(b"prompt 1", b"prompt 9", 1)
        assert edited != data and len(edited) == len(data)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, edited, 0)
        finally:
            os.close(fd)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size,
                                                                  before.st_mtime_ns)
        if restart:
            follower = Follower(store)
            looks = follower.catch_up([home])
        else:
            looks = follower.look_all([path])
        outcomes = [r.outcome for look in looks for r in look.results]
        assert outcomes and "up to date" not in outcomes
        heads, nodes = recorded(store)
        again = [r.outcome for look in follower.look_all([path]) for r in look.results]
    final_heads, final_nodes = imported(home, tmp_path / "i")
    assert set(final_heads.values()) <= set(heads.values()) and final_nodes <= nodes
    assert again == []  # recorded once, not again at the next notice


def _counting_reads(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[int]:
    """The size of every read of ``path`` from now on (through Path.open), but those of the
    sniff of its format (a fixed head of the file, once)."""
    from sesstree import interop
    from sesstree.interop import follow

    reads: list[int] = []
    real_open = Path.open
    sniffing = []
    real_detect = follow.detect_format

    def detect(p: Path) -> str | None:
        sniffing.append(p)
        try:
            return real_detect(p)
        finally:
            sniffing.pop()

    monkeypatch.setattr(follow, "detect_format", detect)
    assert interop.detect_format is real_detect

    def counting_open(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        f = real_open(self, *args, **kwargs)  # type: ignore[call-overload]
        if self == path and not sniffing:
            read = f.read
            f.read = lambda n=-1: (data := read(n), reads.append(len(data)))[0]
        return f

    monkeypatch.setattr(Path, "open", counting_open)
    return reads


def test_a_file_is_read_a_budget_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sesstree.interop import follow_read

    monkeypatch.setattr(follow_read, "BUDGET", 4096)
    home = tmp_path / "home"
    path = session_path(home, "codex", "m")
    lines = session_lines("codex", "m", 30)
    _write(path, "\n".join(lines[:-10]) + "\n")
    reads = _counting_reads(monkeypatch, path)
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        follower.look_all([path])
        _write(path, "\n".join(lines[-10:]) + "\n")  # a large append
        follower.look_all([path])
        watched = recorded(store)
    assert reads and max(reads) <= 4096
    assert watched == imported(home, tmp_path / "i")


def test_a_line_longer_than_the_budget_is_one_line_and_the_rest_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sesstree.interop import follow_read

    monkeypatch.setattr(follow_read, "BUDGET", 4096)
    home = tmp_path / "home"
    path = session_path(home, "pi", "l")
    lines = session_lines("pi", "l", 3)
    huge = '{"type": "custom", "id": "big", "data": "' + "x" * 20000 + '"}'
    reads = _counting_reads(monkeypatch, path)
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        _write(path, "\n".join(lines[:3]) + "\n" + huge[:10000])  # the long line half written
        said = [p for look in follower.look_all([path]) for p in look.problems]
        _write(path, huge[10000:] + "\n" + "\n".join(lines[3:]) + "\n")
        said += [p for look in follower.look_all([path]) for p in look.problems]
        said += [p for look in Follower(store).catch_up([home]) for p in look.problems]
        mark = store.watch_marks()[str(path)]
        heads, nodes = recorded(store)
    assert max(reads) <= 4096
    assert len(said) == 1 and ":4: a line longer than" in said[0] and "skipped" in said[0]
    assert mark.offset == path.stat().st_size  # read to the end, the long line passed over
    path.write_text("\n".join(lines) + "\n")  # the same file without it
    assert (heads, nodes) == imported(home, tmp_path / "i")


@pytest.mark.parametrize("when", ["before the look", "between stat and read"])
def test_a_file_deleted_while_being_read_is_one_line(
    when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    path = session_path(home, "codex", "d")
    lines = session_lines("codex", "d", 2)
    _write(path, "\n".join(lines[:3]) + "\n")
    with open_store(tmp_path / "w") as store:
        follower = Follower(store)
        follower.look_all([path])
        sessions = recorded(store)
        _write(path, "\n".join(lines[3:]) + "\n")  # notified, then gone before it is read
        if when == "before the look":
            path.unlink()
        else:
            real_open = Path.open

            def deleting_open(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
                if self == path:
                    path.unlink()
                return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

            monkeypatch.setattr(Path, "open", deleting_open)
        looks = follower.look_all([path])
        again = follower.look_all([path])
        assert recorded(store) == sessions
    said = [p for look in looks for p in look.problems]
    assert len(said) == 1 and "deleted" in said[0] and str(path) in said[0]
    assert not any(look.failed for look in looks)
    assert [p for look in again for p in look.problems] == []


@pytest.mark.parametrize("how", ["chmod", "refused"])
def test_a_folder_it_cannot_read_is_one_line_and_the_others_are_recorded(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    good = session_path(home, "codex", "g")
    _write(good, "\n".join(session_lines("codex", "g", 1)) + "\n")
    locked = good.parent / "locked"
    _write(locked / "x.jsonl", "\n".join(session_lines("codex", "x", 1)) + "\n")
    if how == "chmod":
        if os.geteuid() == 0:
            pytest.skip("root reads any folder")
        locked.chmod(0)
    else:  # what the system says to a user that may not read it, whoever runs the tests
        real_scandir = os.scandir

        def scandir(p: object = ".") -> object:
            if os.fspath(p) == str(locked):  # type: ignore[call-overload]
                raise PermissionError(13, "Permission denied", str(locked))
            return real_scandir(p)  # type: ignore[call-overload]

        monkeypatch.setattr(os, "scandir", scandir)
    try:
        with open_store(tmp_path / "w") as store:
            follower = Follower(store)
            looks = follower.catch_up([home])
            again = follower.catch_up([home])
            names = [info.name for info in store.sessions()]
    finally:
        locked.chmod(0o755)
    said = [p for look in looks for p in look.problems]
    assert len(said) == 1 and str(locked) in said[0] and "cannot read the folder" in said[0]
    assert [p for look in again for p in look.problems] == []
    assert len(names) == 1
