"""Following agents' transcript files as they grow (what ``sess watch`` runs on).

A :class:`Follower` looks at a file when it may have changed and records what is new with the
importer of its format, so a watched file lands exactly where ``sess import`` of it would:
the same sessions, names, trees and nodes (the importer is the same code, handed the records
read so far instead of reading the file itself).

- **Incremental.** A JSONL transcript is read from where the last look stopped: only the bytes
  appended since (and the last few KB before them, to see that what was read is still there).
  A last line without its end waits for it, unless it is already one whole JSON object (the
  tools write a line and its newline in one write). A file that shrank, was replaced (another
  inode) or whose bytes before the end changed is read again whole and landed as what it is
  now: the importer's landing makes that a fast-forward, a branch or a rewrite, never a
  duplicate. Gemini CLI's ``.json`` files are one document rewritten in place: read whole
  when they change (a document caught half-written waits for the next change).
- **Restart-safe.** After each landing, the file's :class:`~sesstree.store.base.WatchMark`
  (bytes and lines recorded, size, mtime, inode, blake3 of the bytes recorded) is moved in the
  same transaction, by compare-and-set. A restarted follower does not read a file whose
  size, mtime and inode are those of its mark, unless the mark is *racy* (taken within the
  timestamp resolution of the file's mtime: a write just after could have left the stat as
  it was), when its bytes are hashed against the mark's digest; a file that changed since is
  read whole once, then followed incrementally. A file that did not grow but was written to
  (bytes rewritten in place, as long as before) is checked the same way, by its digest.
  A second follower on the same store loses the compare-and-set (nothing of its landing is
  written), reads the file again and finds it up to date.
- **Bounded memory.** A file is read ``follow_read.BUDGET`` (64 MB) at a time, however large it or an
  append to it is; a line longer than that is passed over (said once: its record is not
  landed), the file read on after it. The records of a file are kept while it is written to
  (they are what its importer lands, as an import holds them); a file idle for
  ``LIVE_WINDOW`` seconds (when a Claude Code or Gemini CLI reply still pending is settled)
  is forgotten, to be read whole again if it ever grows.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import blake3
import msgspec

from ..errors import ConflictError, InputError, SesstreeError, StoreError
from ..repo.store import Store
from ..store.base import Progress, WatchMark
from . import claude, detect_format
from .codex import import_codex
from .common import ImportResult
from .follow_read import FileState, digest, racy, take_lines
from .gemini_cli import import_gemini, import_gemini_jsonl
from .jsonl import decode_line
from .pi import import_pi
from .provenance import Provenance
from .tree import STILL_WRITTEN

__all__ = ["WATCHED_FORMATS", "Follower", "Look", "is_candidate"]

#: The formats a watch records: the agents' own transcripts.
WATCHED_FORMATS = ("claude", "codex", "pi", "gemini")
_JSONL = {"claude": claude.import_claude, "codex": import_codex, "pi": import_pi,
          "gemini": import_gemini_jsonl}
#: How long the watch waits after the store first refuses a write (read-only, full, locked),
#: doubled at each refusal after, up to the most: never a loop trying again at full speed.
_BACKOFF_FIRST = 1.0
_BACKOFF_MOST = 60.0
def is_candidate(path: Path) -> bool:
    """True for a file name a transcript may have (``*.jsonl``, ``*.json``, not a seed
    ``.meta.json`` sidecar): others (temporary files, backups) are never looked at."""
    name = path.name
    return name.endswith((".jsonl", ".json")) and not name.endswith(".meta.json")


class Look(msgspec.Struct):
    """What one look at a file did: the sessions landed (none if nothing was new) and the
    problems met, each to be said once."""

    source: str
    results: list[ImportResult] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)
    #: The file cannot be read or recorded (a line saying why is in ``problems``).
    failed: bool = False


class Follower:
    """Records files into ``store`` as they grow (see the module docstring)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock
        self._marks = store.watch_marks()
        self._files: dict[str, FileState] = {}
        self._owners: Provenance | None = None
        #: While the store refuses writes: the files that wait for it, until when, how long
        #: the last wait was.
        self._waiting: set[str] = set()
        #: Folders that could not be read, said once each (a Look of their own).
        self._folders_said: set[str] = set()
        self._folder_looks: list[Look] = []
        self._refused_until = 0.0
        self._backoff = 0.0

    def catch_up(self, paths: Iterable[Path], progress: Progress | None = None) -> list[Look]:
        """Look at every file of ``paths`` (files, or folders walked whole), in one pass."""
        paths = list(paths)
        files = sorted(self.candidates(paths))
        looks = self._folder_problems()
        if progress is not None:
            progress(0, len(files))
        self._owners = Provenance(self.store)  # one read for the whole pass, as an import
        try:
            for done, f in enumerate(files, 1):
                looks.append(self.look(f))
                if progress is not None:
                    progress(done, len(files))
        finally:
            self._owners = None
        self._drop_marks_of_files_gone(paths)
        return looks

    def _drop_marks_of_files_gone(self, paths: Iterable[Path]) -> None:
        """Forget the marks of files under ``paths`` that are no longer there (their sessions
        stay: a file made again at that path is read whole)."""
        roots = [os.path.join(os.path.abspath(p), "") for p in paths]
        for source, mark in list(self._marks.items()):
            if any(source.startswith(r) for r in roots) and not os.path.exists(source):
                try:
                    self.store.set_watch_mark(source, mark, None)
                except ConflictError:
                    pass  # another watcher moved it: it is that one's to keep or drop
                self._marks.pop(source, None)
                self._files.pop(source, None)

    def candidates(self, paths: Iterable[Path]) -> set[Path]:
        """The files of ``paths`` a transcript may be (folders walked whole). A folder that
        cannot be read is passed over, and said once (by the next look)."""

        def unreadable(exc: OSError) -> None:
            folder = str(exc.filename) if exc.filename is not None else "?"
            if folder not in self._folders_said:
                self._folders_said.add(folder)
                self._folder_looks.append(Look(folder, problems=[
                    f"{folder}: cannot read the folder: {exc.strerror or exc}; its files are "
                    "not recorded"], failed=True))

        out: set[Path] = set()
        for p in paths:
            if p.is_dir():
                for folder, _, names in os.walk(p, onerror=unreadable):
                    out.update(q for n in names if is_candidate(q := Path(folder, n)))
            elif is_candidate(p):
                out.add(p)
        return out

    def _folder_problems(self) -> list[Look]:
        """The looks saying which folders could not be read, since last asked."""
        looks, self._folder_looks = self._folder_looks, []
        return looks

    def look_all(self, paths: Iterable[Path]) -> list[Look]:
        """Look at ``paths`` (that may have changed) and at the files that have now been quiet
        long enough to be settled; one read of the store's provenance for them all."""
        now = self._clock()
        due = {Path(src) for src, f in self._files.items()
               if f.quiet_at is not None and f.quiet_at <= now}
        if self._refused_until <= now:
            due.update(Path(src) for src in self._waiting)
        todo = sorted({p for p in paths if is_candidate(p)} | due)
        looks = self._folder_problems()
        if not todo:
            return looks
        self._owners = Provenance(self.store)
        try:
            return looks + [self.look(p) for p in todo]
        finally:
            self._owners = None

    def next_due(self) -> float | None:
        """When the next file will have been quiet long enough to be settled, or the store
        is to be tried again, or None."""
        times = [f.quiet_at for f in self._files.values() if f.quiet_at is not None]
        if self._waiting:
            times.append(self._refused_until)
        return min(times) if times else None

    def look(self, path: Path) -> Look:
        """Record what is new in ``path``. Never raises for the file's sake: a file that cannot
        be read or recorded is a :class:`Look` with ``failed`` and one problem saying why."""
        source = os.path.abspath(path)
        look = Look(source)
        if self._refused_until > self._clock():
            # The store refused the last write: the file waits for it, unread.
            self._waiting.add(source)
            look.failed = True
            return look
        refused: str | None = None  # what is said of the store (not of this file): said anew
        for attempt in (1, 2):
            state = self._files.get(source)
            if state is None:
                state = self._files[source] = FileState(self._marks.get(source))
            try:
                self._look(path, source, state, look)
                break
            except ConflictError:
                # Another watcher recorded this file meanwhile: start again from its mark,
                # and from the sessions as it left them.
                self._marks = self.store.watch_marks()
                if self._owners is not None:
                    self._owners = Provenance(self.store)
                self._files[source] = FileState(self._marks.get(source))
                self._files[source].said = state.said
                if attempt == 2:
                    look.problems.append(f"{source}: another watcher keeps recording it; "
                                         "left to it")
            except FileNotFoundError:
                self._gone(source, state, look)
                break
            except (InputError, OSError) as exc:
                look.failed = True
                look.problems.append(str(exc) if isinstance(exc, InputError)
                                     else f"{source}: cannot read: {exc.strerror or exc}")
                break
            except StoreError as exc:
                # The store cannot take it (read-only, full, locked too long): every file
                # waits, longer at each refusal, then is read whole, since what was read is
                # not recorded. Said once, until the store takes a write again.
                look.failed = True
                self._forget(state)
                self._waiting.add(source)
                first = not self._backoff
                self._backoff = (min(2 * self._backoff, _BACKOFF_MOST) if self._backoff
                                 else _BACKOFF_FIRST)
                self._refused_until = self._clock() + self._backoff
                if first:
                    refused = (f"{source}: cannot record: {exc}; the watch goes on, trying "
                               f"again in {_BACKOFF_FIRST:g} s, then less and less often "
                               f"(every {_BACKOFF_MOST:g} s at most)")
                break
            except SesstreeError as exc:
                # What this file holds cannot be recorded: tried again when it changes.
                look.failed = True
                look.problems.append(f"{source}: cannot record: {exc}; tried again when the "
                                     "file changes")
                self._forget(state)
                try:
                    st = os.stat(source)
                    self._files[source].unreadable = (st.st_size, st.st_mtime_ns)
                except OSError:
                    pass
                break
        if not look.failed and source in self._waiting:
            self._waiting.discard(source)
            if self._backoff:
                refused = f"{source}: recorded; the store takes writes again"
                self._backoff = 0.0
        said = self._files[source].said
        for r in look.results:  # what the importer met, said here once, not at every look
            # (A reply or tool call still being written is what a watch waits for: not said.)
            look.problems.extend(p for p in r.problems
                                 if not any(words in p for words in STILL_WRITTEN))
            r.problems = []
        look.problems = [p for p in dict.fromkeys(look.problems) if p not in said]
        said.update(look.problems)
        if refused is not None:
            look.problems.insert(0, refused)
        return look

    # -- one look ----------------------------------------------------------------------------

    def _look(self, path: Path, source: str, state: FileState, look: Look) -> None:
        try:
            st = path.stat()
        except FileNotFoundError:
            self._gone(source, state, look)
            return
        if not stat.S_ISREG(st.st_mode):
            # A pipe or a device named like a transcript: reading it could wait for ever.
            raise InputError("not a regular file; passed over", path=source)
        now = self._clock()
        mark = state.mark
        settle = mark is not None and mark.pending and st.st_mtime + claude.LIVE_WINDOW < now
        if mark is not None and (mark.size, mark.mtime_ns, mark.inode) == (
                st.st_size, st.st_mtime_ns, st.st_ino) and not settle and not racy(mark):
            # Nothing new (a second notice of a write already recorded, or a restart).
            if state.quiet_at is not None and state.quiet_at <= now:
                self._forget(state)  # quiet, and nothing pending: let go of its records
            elif mark.pending and state.quiet_at is None:
                state.quiet_at = st.st_mtime + claude.LIVE_WINDOW + 1  # to be settled then
            return
        if state.unreadable == (st.st_size, st.st_mtime_ns):
            return  # said once already; waits for the file to change
        fmt = mark.format if mark is not None and mark.format else None
        if fmt is None:
            fmt = detect_format(path) if st.st_size else None
            if fmt not in WATCHED_FORMATS:
                # Not a transcript (yet: an empty file, a first line half written). Marked,
                # so that a restart does not sniff it again until it changes.
                self._write_mark(state, source, WatchMark("", 0, 0, st.st_size, st.st_mtime_ns,
                                                          st.st_ino, "", seen_ns=self._now_ns()))
                return
        assert fmt is not None
        if fmt == "gemini" and path.name.endswith(".json"):
            self._look_document(path, source, state, look, st, settle)
        else:
            self._look_lines(path, source, state, look, st, fmt, settle)

    def _pending(self, fmt: str, st: os.stat_result) -> bool:
        """Whether a landing now takes the file as still being written (see claude.py)."""
        return fmt in ("claude", "gemini") and st.st_mtime + claude.LIVE_WINDOW >= self._clock()

    def _look_document(self, path: Path, source: str, state: FileState, look: Look,
                       st: os.stat_result, settle: bool) -> None:
        raw = path.read_bytes()
        digest = blake3.blake3(raw).hexdigest()
        mark = WatchMark("gemini", len(raw), raw.count(b"\n"), len(raw), st.st_mtime_ns,
                         st.st_ino, digest, seen_ns=self._now_ns())
        if state.mark is not None and state.mark.digest == digest:
            self._write_mark(state, source, mark)  # touched, not changed
            return
        try:
            decode_line(raw)
        except InputError as exc:
            state.unreadable = (st.st_size, st.st_mtime_ns)
            look.problems.append(f"{source}: {exc} (a document being rewritten?); "
                                 "read again when it changes")
            return
        state.unreadable = None
        with self._landing(state, source, mark):
            look.results = import_gemini(self.store, path, owners=self._provenance())

    def _look_lines(self, path: Path, source: str, state: FileState, look: Look,
                    st: os.stat_result, fmt: str, settle: bool) -> None:
        before = len(state.problems) if state.records is not None else 0
        taken, end, whole = self._read_new(path, state, st)
        records = state.records
        assert records is not None  # _read_new leaves the file's records read
        if whole and state.mark is not None and state.mark.format and not settle and (
                state.offset == state.mark.offset
                and state.hasher.hexdigest() == state.mark.digest):
            # The very bytes recorded (a file touched, or one last line still half written):
            # nothing to land.
            self._forget(state)
            self._write_mark(state, source, msgspec.structs.replace(
                state.mark, size=end, mtime_ns=st.st_mtime_ns, inode=st.st_ino,
                seen_ns=self._now_ns()))
            return
        if not taken and not whole and not settle:
            if state.mark is not None and end == state.mark.size and racy(state.mark):
                # Checked byte for byte: seen now, the stat can be trusted once it is not racy.
                seen = msgspec.structs.replace(state.mark, mtime_ns=st.st_mtime_ns,
                                               seen_ns=self._now_ns())
                if not racy(seen) or seen.mtime_ns != state.mark.mtime_ns:
                    self._write_mark(state, source, seen)
            return  # nothing new, or only half a line more: it waits for its end
        look.problems.extend(state.problems[before:])
        pending = self._pending(fmt, st)
        mark = WatchMark(fmt, state.offset, state.lines, end, st.st_mtime_ns, st.st_ino,
                         state.hasher.hexdigest(), pending, self._now_ns())
        with self._landing(state, source, mark):
            look.results = _JSONL[fmt](self.store, path, owners=self._provenance(),
                                       records=list(records), problems=list(state.problems))
        # Kept while the file is being written; let go of once it has been quiet this long.
        state.quiet_at = st.st_mtime + claude.LIVE_WINDOW + 1
        if state.quiet_at <= self._clock():
            self._forget(state)

    def _read_new(self, path: Path, state: FileState, st: os.stat_result) -> tuple[int, int, bool]:
        """Take in the whole lines appended since the last look (into ``state``): how many
        bytes were taken, the size read up to, and whether the file was read whole (it was
        not followed, or was not simply appended to: then the records kept are dropped, to
        be read again).

        A file that grew is taken as appended to when the bytes at the start and just before
        the end of what was read are still there; one that did not grow (its bytes rewritten
        in place, as long as before) is hashed, its digest telling whether it changed."""
        with path.open("rb") as f:
            followed = state.records is not None and state.mark is not None
            if followed and state.mark is not None and st.st_ino == state.mark.inode \
                    and st.st_size > state.mark.size:
                head = f.read(len(state.head))
                f.seek(state.offset - len(state.tail))
                if head == state.head and f.read(len(state.tail)) == state.tail:
                    return take_lines(f, path, state), f.tell(), False
            elif followed and state.mark is not None and st.st_ino == state.mark.inode \
                    and st.st_size == state.mark.size:
                if digest(f, state.offset) == state.hasher.hexdigest():
                    return 0, st.st_size, False  # the same bytes: nothing new
            # Not followed yet (a restart), or rewritten, truncated, replaced: read it whole.
            f.seek(0)
            state.records, state.problems = [], []
            state.hasher, state.tail, state.offset, state.lines = blake3.blake3(), b"", 0, 0
            state.head = b""
            take_lines(f, path, state)
            return state.offset, f.tell(), True

    # -- bookkeeping -------------------------------------------------------------------------

    def _now_ns(self) -> int:
        return int(self._clock() * 1e9)

    def _provenance(self) -> Provenance:
        return self._owners if self._owners is not None else Provenance(self.store)

    @contextmanager
    def _landing(self, state: FileState, source: str, mark: WatchMark) -> Iterator[None]:
        """One transaction: the mark moved (first, so that a second watcher of the file waits
        for it or loses), then what the block lands. If it fails, the file's mark is the one
        still stored, so that the next look records it."""
        before = state.mark
        try:
            with self.store.batch():
                self._write_mark(state, source, mark)
                yield
        except BaseException:
            state.mark = before
            if before is None:
                self._marks.pop(source, None)
            else:
                self._marks[source] = before
            raise

    def _write_mark(self, state: FileState, source: str, mark: WatchMark) -> None:
        if mark != state.mark:
            self.store.set_watch_mark(source, state.mark, mark)
            state.mark = mark
            self._marks[source] = mark

    def _gone(self, source: str, state: FileState, look: Look) -> None:
        """A file deleted (or moved away) after it was listed or notified, before or while it
        was read: said, and what was recorded of it stays."""
        self._forget(state)
        look.problems.append(f"{source}: deleted before it could be read; passed over (what "
                             "was recorded of it stays)")

    @staticmethod
    def _forget(state: FileState) -> None:
        """Let go of a file's records (it is read whole again if it changes)."""
        state.records = None
        state.problems = []
        state.quiet_at = None
