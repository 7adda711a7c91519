"""The limits of the write-ahead log, and what sesstree does about them.

A commit lives only in the WAL until a checkpoint copies it into the main file. SQLite reads
the WAL frame by frame while each frame's checksum holds, so one flipped bit ends the log
there: that commit and every later one are gone at the next open. sesstree checkpoints a
writer's commits when it pauses and when it closes, so little lives only in the WAL
(test_sqlite_checkpoints.py). Damage that hides commits is found before SQLite opens the
store, the log is kept, and every command refuses with one line until the loss is accepted
(sesstree.store.sqlite.walguard); fsck reports it too. What sesstree cannot do is bring those
commits back.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from core_testkit import HELPERS

from sesstree import WalDamagedError, open_store
from sesstree.store.sqlite.wal import scan_wal
from sesstree.store.sqlite.walguard import accept_wal_loss


def killed_writer(folder: Path, acks: int, *args: str) -> int:
    """A writer killed after ``acks`` appends, its commits still only in the WAL."""
    child = subprocess.Popen([sys.executable, str(HELPERS / "append_loop.py"), str(folder), "q",
                              *args], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for _ in range(acks):
        child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    return acks + sum(1 for line in out.splitlines() if line.startswith("ACK"))


def page_of(data: bytes | bytearray) -> int:
    return int(struct.unpack(">I", data[8:12])[0])


def frame_at(data: bytes | bytearray, k: int) -> int:
    """The offset of frame ``k`` (0-based)."""
    return 32 + k * (24 + page_of(data))


def committed_frames(folder: Path) -> int:
    """The frames the killed writer's WAL index says were committed."""
    return int(struct.unpack("=I", (folder / "store.db-shm").read_bytes()[16:20])[0])


def zero_frame(data: bytearray, k: int, rng: random.Random) -> None:
    at = frame_at(data, k)
    data[at : at + 24 + page_of(data)] = bytes(24 + page_of(data))


def flip_page_bit(data: bytearray, k: int, rng: random.Random) -> None:
    data[frame_at(data, k) + 24 + rng.randrange(page_of(data))] ^= 1 << rng.randrange(8)


def flip_header_bit(data: bytearray, k: int, rng: random.Random) -> None:
    data[frame_at(data, k) + rng.randrange(24)] ^= 1 << rng.randrange(8)


def wrong_salts(data: bytearray, k: int, rng: random.Random) -> None:
    at = frame_at(data, k)
    data[at + 8 : at + 16] = bytes(b ^ 0x5A for b in data[at + 8 : at + 16])


def cut_short(data: bytearray, k: int, rng: random.Random) -> None:
    del data[frame_at(data, k) + rng.randrange(1, 24 + page_of(data)) :]


def cut_out_of_the_middle(data: bytearray, k: int, rng: random.Random) -> None:
    at = frame_at(data, k) + rng.randrange(24 + page_of(data))
    del data[at : at + rng.randrange(1, 3000)]


def damage_log_header(data: bytearray, k: int, rng: random.Random) -> None:
    data[rng.randrange(32)] ^= 1 << rng.randrange(8)


Damage = Callable[[bytearray, int, random.Random], None]
DAMAGE: dict[str, Damage] = {
    "zeroed frame": zero_frame, "flipped page bit": flip_page_bit,
    "flipped frame-header bit": flip_header_bit, "wrong salts": wrong_salts,
    "cut short": cut_short, "bytes cut out of the middle": cut_out_of_the_middle,
    "damaged log header": damage_log_header,
}


def damaged_store(folder: Path, how: Damage, acks: int = 300, seed: int = 1) -> int:
    """A store whose writer was killed after ``acks`` appends, its WAL then damaged a third
    of the way into what the writer committed. Returns the appends acknowledged."""
    acked = killed_writer(folder, acks)
    wal = folder / "store.db-wal"
    data = bytearray(wal.read_bytes())
    how(data, committed_frames(folder) // 3, random.Random(seed))
    wal.write_bytes(bytes(data))
    return acked


def sess(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``sess`` command in a process of its own, as a user runs it."""
    return subprocess.run([sys.executable, "-c", "from sesstree.cli import main; main()",
                           "--store", str(folder), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "SESS_HOME": str(folder.parent / "h")})


def refused(run: subprocess.CompletedProcess[str]) -> str:
    """The one line a command refusing a store with a damaged WAL gives."""
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "damaged write-ahead log" in lines[0] and "--accept-wal-loss" in lines[0], lines
    return lines[0].removeprefix("Error: ")


def kept_copies(folder: Path) -> list[Path]:
    return sorted(folder.glob("store.db-wal.damaged-*"))


def test_a_zeroed_frame_is_reported_not_dropped(tmp_path: Path) -> None:
    """The audit's case: a zeroed frame a third of the way in. Every command refuses the store
    with one line naming the copy of the log, the log stays as it was, fsck shows it, and only
    an explicit --accept-wal-loss opens the store as SQLite recovers it (an older, sound
    state)."""
    folder = tmp_path / "s"
    acked = damaged_store(folder, zero_frame)
    damaged = (folder / "store.db-wal").read_bytes()
    line = refused(sess(folder, "messages", "q"))
    assert kept_copies(folder) and kept_copies(folder)[0].name in line
    assert kept_copies(folder)[0].read_bytes() == damaged
    assert refused(sess(folder, "log", "-n", "20")) == line  # it stays reported
    assert (folder / "store.db-wal").read_bytes() == damaged  # and nothing was folded
    check = sess(folder, "fsck")
    assert check.returncode == 1 and f"fault: {line}" in check.stdout, check
    accept = sess(folder, "fsck", "--accept-wal-loss")
    assert accept.returncode == 0 and "accepted" in accept.stdout, accept
    contents = sess(folder, "messages", "q").stdout.split()
    assert 0 < sum(1 for c in contents if c.startswith("m:")) < acked  # what was hidden is gone
    assert sess(folder, "fsck").returncode == 0
    assert kept_copies(folder)[0].read_bytes() == damaged  # the evidence stays


def test_no_command_before_fsck_erases_the_evidence(tmp_path: Path) -> None:
    """A flipped bit, then reads and writes before anyone runs fsck: none of them opens the
    store (so none checkpoints the shortened log away), and fsck still reports it."""
    folder = tmp_path / "s"
    damaged_store(folder, flip_page_bit)
    damaged = (folder / "store.db-wal").read_bytes()
    for command in (["messages", "q"], ["log"], ["status"], ["stats"], ["gc"],
                    ["append", "user/message", '{"role": "user", "content": "x"}']):
        refused(sess(folder, *command))
        assert (folder / "store.db-wal").read_bytes() == damaged, command
    with pytest.raises(WalDamagedError, match=r"store\.db-wal\.damaged-"):
        open_store(folder, create=False)
    check = sess(folder, "fsck")
    assert check.returncode == 1 and "damaged write-ahead log" in check.stdout


@pytest.mark.parametrize("shm", ["index", "no index"])
@pytest.mark.parametrize("kind", list(DAMAGE))
def test_every_kind_of_wal_damage_is_found_on_open(tmp_path: Path, kind: str, shm: str) -> None:
    """Zeroed and flipped frames, wrong salts, a file cut short or with bytes cut out, a
    damaged log header: each is found when the store is opened, with the index the killed
    writer left and without it (a folder copied without store.db-shm). Cut short is the one
    kind only the index can tell from a torn last write."""
    folder = tmp_path / "s"
    damaged_store(folder, DAMAGE[kind])
    if shm == "no index":
        (folder / "store.db-shm").unlink()
        if kind == "cut short":
            with open_store(folder, create=False) as store:  # indistinguishable: see docs
                assert store.messages("q")
            return
    for _ in range(2):  # and again: it stays reported
        with pytest.raises(WalDamagedError, match=r"store\.db-wal\.damaged-"):
            open_store(folder, create=False)
    assert len(kept_copies(folder)) == 1


def test_damage_is_found_through_a_symbolic_link(tmp_path: Path) -> None:
    """A store opened through a symbolic link to its file (or to its folder): SQLite keeps
    the log beside the file the link leads to, and that is where the check must look."""
    folder = tmp_path / "s"
    acked = damaged_store(folder, zero_frame)
    damaged = (folder / "store.db-wal").read_bytes()
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "store.db").symlink_to(folder / "store.db")
    (tmp_path / "folder-link").symlink_to(folder, target_is_directory=True)
    for via in (tmp_path / "link" / "store.db", tmp_path / "folder-link" / "store.db"):
        for _ in range(2):
            with pytest.raises(WalDamagedError, match=r"store\.db-wal\.damaged-"):
                open_store(via, create=False)
    assert (folder / "store.db-wal").read_bytes() == damaged  # nothing was folded
    assert len(kept_copies(folder)) == 1
    assert accept_wal_loss(tmp_path / "link" / "store.db") is not None
    with open_store(tmp_path / "link" / "store.db", create=False) as store:
        assert 0 < len(store.messages("q")) < acked


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB file system of its own (a real tmpfs: needs root and mount permission): room for
    a store whose WAL holds a few hundred appends (4.4 MB for 300), and a copy of that WAL."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                                            str(where)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def leave_free(disk: Path, free: int) -> None:
    """Fill ``disk`` with a ballast file until at most ``free`` bytes are left."""
    stat = os.statvfs(disk)
    with open(disk / "ballast", "ab") as f:
        f.write(bytes(max(0, stat.f_bavail * stat.f_frsize - free)))


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_damaged_wal_on_a_full_disk_is_refused_in_one_line(tmp_path: Path,
                                                              small_disk: Path) -> None:
    """On a full disk nothing can be kept, and on one with room for the copy only, no record:
    every open still refuses in one line that says what was and was not kept, no partial file
    is left, and accepting the loss refuses too (naming the store and the full disk) rather
    than drop the commits without a copy of the log."""
    damaged_store(tmp_path / "s", zero_frame)
    folder = small_disk / "s"
    shutil.copytree(tmp_path / "s", folder)
    before = files(folder)
    leave_free(small_disk, 0)
    assert "No copy could be kept (No space left" in refused(sess(folder, "messages", "q"))
    accept = sess(folder, "fsck", "--accept-wal-loss")
    assert accept.returncode == 1 and "Traceback" not in accept.stderr, accept
    assert accept.stderr.count("\n") == 1 and f"store {folder}:" in accept.stderr  # its folder
    assert "disk is full" in accept.stderr and "no loss was accepted" in accept.stderr
    assert files(folder) == before
    (small_disk / "ballast").unlink()
    wal = (folder / "store.db-wal").stat().st_size
    leave_free(small_disk, wal + 4096 - wal % 4096)  # the copy fits, its record does not
    stat = os.statvfs(small_disk)
    assert wal <= stat.f_bavail * stat.f_frsize < wal + 8192  # (the disk had that room)
    line = refused(sess(folder, "log"))
    assert "The log is kept as store.db-wal.damaged-" in line and "no record" in line, line
    assert kept_copies(folder) and kept_copies(folder)[0].read_bytes() == before["store.db-wal"]
    assert set(files(folder)) == {*before, kept_copies(folder)[0].name}  # no partial file
    assert "no record" in refused(sess(folder, "log"))  # (the copy is not written again)
    (small_disk / "ballast").unlink()
    line = refused(sess(folder, "messages", "q"))
    assert refused(sess(folder, "messages", "q")) == line and "no record" not in line
    assert (folder / "store.db.wal-damage").is_file() and len(kept_copies(folder)) == 1
    assert (folder / "store.db-wal").read_bytes() == before["store.db-wal"]


def test_a_store_open_in_another_pid_namespace_is_not_read(tmp_path: Path) -> None:
    """A process in a PID namespace of its own (a container sharing the folder) does not see
    the other processes' locks in /proc/locks: the store it opens is in use all the same, so
    its open must leave the live log alone rather than read it as a crashed one."""
    folder = tmp_path / "s"
    code = ("import sys; from sesstree import open_store; "
            "from sesstree.store.sqlite import walguard as g; "
            "g.find_damage = lambda path: sys.exit('the live log was read'); "
            "print(len(open_store(sys.argv[1], create=False).messages('q')))")
    with open_store(folder) as store:
        for i in range(50):
            store.session("q").add_message({"role": "user", "content": f"m:{i}"})
        assert (folder / "store.db-wal").stat().st_size > 32
        run = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                              "-c", code, str(folder)], capture_output=True, text=True,
                             timeout=120)
        if run.returncode and "unshare" in run.stderr:
            pytest.skip(f"no PID namespace here: {run.stderr.strip()}")
        assert run.returncode == 0 and run.stdout.split() == ["50"], run


def shm_locked_here(folder: Path) -> bool:
    """Whether this process holds a lock on the store's ``store.db-shm`` (an open store)."""
    inode = (folder / "store.db-shm").stat().st_ino
    return any(f":{inode} " in line and f" {os.getpid()} " in line
               for line in Path("/proc/locks").read_text().splitlines())


def test_a_check_in_one_thread_keeps_the_lock_another_thread_connects_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads open a store a killed writer left: the first one's check reads the index
    (opening and closing store.db-shm, which drops every POSIX lock this process holds on
    it) while the second connects. The second connection must keep the lock that tells other
    processes the store is open, or one of them would rebuild the index under it."""
    import threading

    from sesstree.store.sqlite import walguard as sqlite_walguard

    folder = tmp_path / "s"
    killed_writer(folder, 100)
    reading, connected = threading.Event(), threading.Event()
    real_index = sqlite_walguard._stale_index

    def slow_index(path: Path) -> tuple[int, int, bytes] | None:
        if threading.current_thread().name == "first":
            reading.set()
            connected.wait(5)  # (never set while the threads take turns: then 5 s pass)
        return real_index(path)

    monkeypatch.setattr(sqlite_walguard, "_stale_index", slow_index)
    stores = []
    first = threading.Thread(target=lambda: stores.append(open_store(folder, create=False)),
                             name="first")
    first.start()
    assert reading.wait(60)
    second = open_store(folder, create=False)
    connected.set()
    first.join(60)
    try:
        assert len(stores) == 1 and len(second.messages("q")) >= 100
        assert shm_locked_here(folder)
    finally:
        second.close()
        for store in stores:
            store.close()


def test_damage_past_an_older_index_is_found(tmp_path: Path) -> None:
    """An index older than its log (a folder copied while a writer ran: cp and rsync copy
    store.db-shm before store.db-wal) covers only the first commits; a damaged frame past
    what it covers hides the later ones as surely as one without an index does."""
    folder = tmp_path / "s"
    killed_writer(folder, 100)
    older = (folder / "store.db-shm").read_bytes()
    covered = committed_frames(folder)
    acked = killed_writer(folder, 200)
    (folder / "store.db-shm").write_bytes(older)
    wal = folder / "store.db-wal"
    data = bytearray(wal.read_bytes())
    frames = (len(data) - 32) // (24 + page_of(data))
    assert frames > covered + 20
    zero_frame(data, (covered + frames) // 2, random.Random(1))
    wal.write_bytes(bytes(data))
    with pytest.raises(WalDamagedError, match=r"store\.db-wal\.damaged-"):
        open_store(folder, create=False)
    assert len(kept_copies(folder)) == 1 and acked >= 200


def test_accepting_the_loss_keeps_what_sqlite_recovers(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    acked = damaged_store(folder, flip_page_bit)
    with pytest.raises(WalDamagedError):
        open_store(folder, create=False)
    report = accept_wal_loss(folder / "store.db")
    assert report is not None and "damaged write-ahead log" in report
    assert accept_wal_loss(folder / "store.db") is None  # nothing more to accept
    with open_store(folder, create=False) as store:
        contents = [m["content"] for m in store.messages("q")]
        assert contents == [f"m:{i}" for i in range(len(contents))]  # a sound, older state
        assert 0 < len(contents) < acked
        assert store.fsck() == []
        store.session("q").add_message({"role": "user", "content": f"m:{len(contents)}"})
    assert len(kept_copies(folder)) == 1


def test_a_sound_wal_left_by_a_kill_is_not_reported(tmp_path: Path) -> None:
    """A killed writer's WAL, not damaged, with and without its index: the store opens with
    every acknowledged append, and nothing is kept or recorded."""
    for round, shm in enumerate(("index", "no index")):
        folder = tmp_path / f"s{round}"
        acked = killed_writer(folder, 300)
        if shm == "no index":
            (folder / "store.db-shm").unlink()
        with open_store(folder, create=False) as store:
            assert len(store.messages("q")) >= acked
            assert store.fsck() == []
        assert not kept_copies(folder) and not (folder / "store.db.wal-damage").exists()


def test_fsck_reports_a_zeroed_frame_sqlite_has_already_read_past(tmp_path: Path) -> None:
    """fsck's own look at the log, for a store that SQLite opened without sesstree's check
    (another program, say): a zeroed frame, whose salts no longer match the log's, hides the
    commits after it like a flipped bit does, and is reported like one."""
    folder = tmp_path / "s"
    damaged_store(folder, zero_frame)
    other = sqlite3.connect(folder / "store.db")  # SQLite's recovery, the log left in place
    try:
        other.execute("SELECT count(*) FROM nodes").fetchone()
        found = scan_wal(folder / "store.db")
    finally:
        other.close()
    assert found is not None and "damaged" in found, found


def random_damage(data: bytearray, rng: random.Random, cuts: bool) -> str:
    """Zero, flip, or (with ``cuts``) truncate or cut out bytes at a random place."""
    kinds = ["zero", "flip", "salts"] + (["truncate", "cut out"] if cuts else [])
    kind = rng.choice(kinds)
    at = rng.randrange(len(data))
    frames = (len(data) - 32) // (24 + page_of(data))
    if kind == "zero":
        end = min(len(data), at + rng.randrange(1, 5000))
        data[at:end] = bytes(end - at)
    elif kind == "flip":
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "salts":
        wrong_salts(data, rng.randrange(frames), rng)
    elif kind == "truncate":
        del data[at:]
    else:
        del data[at : at + rng.randrange(1, 5000)]
    return kind


@pytest.mark.stress
def test_random_wal_damage_is_reported_or_harmless(tmp_path: Path) -> None:
    """The campaign: a WAL holding acknowledged commits, damaged at random (zeroed ranges,
    flipped bits, wrong salts, truncation, bytes cut out), with the index the kill left or
    without it. Every outcome is either every acknowledged append there and a clean fsck, or
    a damage report that every later open repeats, with the log kept, and a sound store once
    the loss is accepted. Never a silent loss: without the index, only the last acknowledged
    transaction can go unnoticed (a damaged frame just before its commit frame looks like a
    torn write), and truncation cannot be told from a shorter log at all (docs/storage.md)."""
    rng = random.Random(19)
    outcomes: dict[str, int] = {}
    for round in range(150):
        folder = tmp_path / f"s{round}"
        acked = killed_writer(folder, rng.randint(20, 400), *(
            ["--durable"] if round % 5 == 0 else []))
        with_index = rng.random() < 0.7
        wal = folder / "store.db-wal"
        data = bytearray(wal.read_bytes())
        kind = random_damage(data, rng, cuts=with_index)
        wal.write_bytes(bytes(data))
        if not with_index:
            (folder / "store.db-shm").unlink()
        try:
            with open_store(folder, create=False) as store:
                contents = [m["content"] for m in store.messages("q")]
                assert contents == [f"m:{i}" for i in range(len(contents))], (round, kind)
                least = acked if with_index else acked - 1
                assert len(contents) >= least, (round, kind, with_index, len(contents), acked)
                assert store.fsck() == [], (round, kind)
            outcome = "intact"
        except WalDamagedError as exc:
            with pytest.raises(WalDamagedError) as again:
                open_store(folder, create=False)
            assert str(again.value) == str(exc)
            assert (folder / "store.db-wal").read_bytes() == bytes(data)  # nothing folded
            assert [p.read_bytes() for p in kept_copies(folder)] == [bytes(data)]
            assert accept_wal_loss(folder / "store.db") == str(exc)
            with open_store(folder, create=False) as store:
                if store.has_session("q"):
                    contents = [m["content"] for m in store.messages("q")]
                    assert contents == [f"m:{i}" for i in range(len(contents))]
            outcome = "reported"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) == {"intact", "reported"}, outcomes
