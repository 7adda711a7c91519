"""What only the PostgreSQL backend has: its schema and version, its connection, its errors,
and the CLI on a URL. The rest of its behaviour is the shared conformance suite's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_kit import Sess, user_error
from core_testkit import user

from sesstree import (
    ConflictError,
    StoreCorruptError,
    StoreError,
    StoreFormatError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    make_node,
    open_store,
)
from sesstree.store.base import StoreFormat
from sesstree.store.postgres.backend import (
    PostgresBackend,
    StoreUnavailableError,
)
from sesstree.store.postgres.schema import FORMAT_VERSION
from sesstree.store.urls import is_store_url, redact_url

SESS = str(Path(sys.executable).with_name("sess"))  # the console script, as a user runs it


def terminate_others(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")


# -- schema ------------------------------------------------------------------------------


def test_opening_without_create_finds_no_store(postgres_url: str) -> None:
    with pytest.raises(StoreNotFoundError, match="sess init"):
        open_store(postgres_url, create=False)


def test_created_on_first_use_with_its_version(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        assert store.backend.store_format() == StoreFormat(FORMAT_VERSION, "blake3-msgpack-v1")
    with open_store(postgres_url, create=False) as again:
        assert again.sessions() == []


def test_newer_format_is_refused_and_left_alone(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        store.session("q").add_message(user("kept"))
        store.backend._db.execute("UPDATE meta SET value = %s WHERE key = 'format'",
                                  (str(FORMAT_VERSION + 1),))
    with pytest.raises(StoreFormatError, match="Upgrade sesstree"):
        open_store(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() == (
            str(FORMAT_VERSION + 1),)
        assert conn.execute("SELECT count(*) FROM nodes").fetchone() == (1,)


def test_format_1_is_upgraded_with_its_history_kept(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        store.session("q").add_message(user("kept"))
    # Put the store back to format 1: its flag-taking functions, no functions key.
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'format'")
        conn.execute("DELETE FROM meta WHERE key = 'functions'")
        conn.execute("ALTER TABLE reflog DROP COLUMN started")
        conn.execute("DROP FUNCTION sesstree_append_run")
        conn.execute("CREATE FUNCTION sesstree_append_run(text, bytea, bytea[], bytea[], bytea[], "
                     "bytea[], bigint[]) RETURNS text LANGUAGE sql AS $$ SELECT 'old' $$")
    with open_store(postgres_url) as store:
        assert store.backend.store_format().version == FORMAT_VERSION == 7
        q = store.session("q")
        assert [m["content"] for m in q.messages()] == ["kept"]
        with store.batch():
            for i in range(3):
                q.add_message(user(str(i)))
        assert store.reflog("q")[-1].reason == "append: user/message (batch of 3 moves)"
        assert store.reflog("q")[-1].started is not None
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        arities = conn.execute("SELECT pronargs FROM pg_proc WHERE proname = "
                               "'sesstree_append_run'").fetchall()
        assert arities == [(8,)]  # the old one is gone, not left beside the new one


def test_foreign_tables_are_not_taken_for_a_store(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE nodes(x int)")
    with pytest.raises(StoreCorruptError, match="not a sesstree store"):
        open_store(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('meta')").fetchone() == (None,)


def test_fsck_finds_a_wrong_depth_index(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        ids = [store.session("q").add_message(user(str(i))).id for i in range(3)]
        store.backend._db.execute(  # type: ignore[attr-defined]
            "UPDATE nodes SET depth = 7 WHERE id = %s", (bytes.fromhex(ids[2]),))
        assert any("depth" in f for f in store.fsck())


def test_a_long_interleaved_session_reads_back_exactly(postgres_url: str) -> None:
    """Two sessions written alternately: neither is one run of rows, so the chain is read by
    the recursive walk; a session written alone is read by the range scan. Both exact."""
    with open_store(postgres_url) as store:
        a, b, c = store.session("a"), store.session("b"), store.session("c")
        for i in range(300):
            a.add_message(user(f"a{i}"))
            b.add_message(user(f"b{i}"))
        for i in range(300):
            c.add_message(user(f"c{i}"))
        for name in "abc":
            assert [m["content"] for m in store.messages(name)] == [f"{name}{i}" for i in range(300)]
            assert store.chain(name, 7).ids == store.chain(name).ids[-7:]


# -- connection --------------------------------------------------------------------------


def test_a_dropped_connection_comes_back_for_the_next_operation(
    postgres_url: str, postgres_server: str
) -> None:
    with open_store(postgres_url) as store:
        q = store.session("q")
        q.add_message(user("before"))
        terminate_others(postgres_server)
        q.add_message(user("after"))  # reconnects
        terminate_others(postgres_server)
        assert [m["content"] for m in store.messages("q")] == ["before", "after"]


def test_a_dropped_connection_loses_the_open_batch_and_says_so(
    postgres_url: str, postgres_server: str
) -> None:
    with open_store(postgres_url) as store:
        q = store.session("q")
        q.add_message(user("kept"))
        with pytest.raises(StoreUnavailableError, match="batch"), store.batch():
            q.add_message(user("lost with the batch"))
            terminate_others(postgres_server)
            q.add_message(user("never written"))
        assert [m["content"] for m in store.messages("q")] == ["kept"]
        q.refresh()
        q.add_message(user("next"))
        assert [m["content"] for m in store.messages("q")] == ["kept", "next"]
        assert store.fsck() == []


def test_an_unreachable_server_is_one_error_without_the_password() -> None:
    url = "postgresql://someone:s3cr3t-pw@127.0.0.1:9/nowhere"
    with pytest.raises(StoreUnavailableError) as caught:
        open_store(url, timeout=0.2)
    assert "s3cr3t-pw" not in str(caught.value)
    assert "127.0.0.1:9" in str(caught.value)
    assert isinstance(caught.value, StoreError)


def test_a_missing_database_is_one_clear_error(postgres_server: str) -> None:
    url = postgres_server.replace("/postgres?", "/no_such_database?")
    with pytest.raises(StoreError, match=r"no_such_database.* does not exist"):
        open_store(url)


# -- the CLI on a URL --------------------------------------------------------------------


@pytest.fixture
def sess_pg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sess:
    """``sess`` in-process, in an empty folder (no .sess/ to find)."""
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return Sess(tmp_path)


def test_cli_on_a_url(sess_pg: Sess, postgres_url: str) -> None:
    s = sess_pg
    assert "Initialized" in s.ok("init", postgres_url)
    assert not (s.root / ".sess").exists()  # a URL is not a folder
    env = {"SESS_STORE": postgres_url}
    s.ok("append", "user/message", json.dumps(user("hi")), env=env)
    s.ok("append", "assistant/message", json.dumps({"role": "assistant", "content": "yo"}), env=env)
    s.ok("--store", postgres_url, "branch", "main", "side")
    s.ok("--store", postgres_url, "append", "side", "user/message", json.dumps(user("on side")))
    graph = s.ok("--store", postgres_url, "log", "--graph", "--all")
    assert "side" in graph and "main" in graph
    assert "hi" in s.ok("log", env=env)
    assert s.ok("fsck", env=env).startswith("ok: 3 nodes")
    assert "removed 0 unreachable nodes; 3 kept" in s.ok("gc", env=env)
    stats = json.loads(s.ok("stats", "--json", env=env))
    assert (stats["nodes"], stats["sessions"], stats["reflog_entries"]) == (3, 2, 4)
    assert stats["physical_bytes"] > 0


def test_cli_errors_on_a_url_are_one_line(sess_pg: Sess, postgres_url: str) -> None:
    s = sess_pg
    user_error(s("--store", postgres_url, "log"), "no store at", "sess init")
    bad = "postgresql://someone:s3cr3t-pw@127.0.0.1:9/nowhere"
    line = user_error(s("--store", bad, "log"), "cannot reach")
    assert "s3cr3t-pw" not in line


def test_cli_user_sees_one_line_when_the_server_drops_every_connection(
    postgres_url: str, postgres_server: str
) -> None:
    """A real `sess` process: the drop between two commands is not even noticed, and a store
    that went away under it is one line, exit 1, no traceback."""
    def sess(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SESS, *args], capture_output=True, text=True,
                              env={"SESS_STORE": postgres_url, "PATH": ""}, timeout=60)

    assert sess("init").returncode == 0
    assert sess("append", "user/message", json.dumps(user("one"))).returncode == 0
    terminate_others(postgres_server)
    assert sess("append", "user/message", json.dumps(user("two"))).returncode == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE refs")
    gone = sess("log")
    assert gone.returncode == 1
    assert "Traceback" not in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1, gone.stderr


def test_a_batch_sends_each_sessions_run_and_reads_see_it(postgres_url: str) -> None:
    """Inside a batch, appends to a session the batch already moved wait to be sent as one
    run; anything that reads or moves refs sends them first, and a stale handle still loses."""
    with open_store(postgres_url) as store:
        a, b = store.session("a"), store.session("b")
        a.add_message(user("a0"))
        stale = store.session("a")
        with store.batch():
            for i in range(1, 4):
                a.add_message(user(f"a{i}"))
                b.add_message(user(f"b{i}"))
            assert [m["content"] for m in store.messages("a")] == ["a0", "a1", "a2", "a3"]
            store.fork("c", "a~1")
            a.add_message(user("a4"))
            with pytest.raises(ConflictError):
                stale.add_message(user("lost"))
            store.session("c").add_message(user("c3"))
        assert [m["content"] for m in store.messages("a")] == ["a0", "a1", "a2", "a3", "a4"]
        assert [m["content"] for m in store.messages("b")] == ["b1", "b2", "b3"]
        assert [m["content"] for m in store.messages("c")] == ["a0", "a1", "a2", "c3"]
        assert [e.reason for e in store.reflog("a")][-1].endswith("(batch of 4 moves)")
        assert len(store.reflog("b")) == 1
        with pytest.raises(RuntimeError), store.batch():
            a.add_message(user("a5"))
            a.add_message(user("a6"))
            raise RuntimeError("boom")
        assert len(store.messages("a")) == 5
        assert store.fsck() == []


def test_writers_on_other_sessions_never_wait_and_one_on_a_locked_session_times_out(
    postgres_url: str,
) -> None:
    """A long batch holds only its own sessions' rows: another session's writer goes on at
    once; a writer on the batch's session waits out the timeout, then StoreLockedError."""
    with open_store(postgres_url) as holder, open_store(postgres_url, timeout=0.3) as other:
        holder.session("q").add_message(user("q0"))
        with holder.batch():
            holder.session("q").add_message(user("held"))
            other.session("free").add_message(user("not blocked"))
            with pytest.raises(StoreLockedError):
                other.session("q").add_message(user("blocked"))
        assert [m["content"] for m in other.messages("q")] == ["q0", "held"]
        assert [m["content"] for m in other.messages("free")] == ["not blocked"]


def test_without_the_driver_a_url_is_one_clear_error(tmp_path: Path) -> None:
    """A machine without psycopg (no ``sesstree[postgres]``): `sess` says what to install."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules['psycopg'] = None  # as if not installed\n")
    result = subprocess.run(
        [SESS, "--store", "postgresql://someone@127.0.0.1:9/db", "log"], capture_output=True,
        text=True, env={"PYTHONPATH": str(tmp_path), "PATH": ""}, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: a PostgreSQL store needs psycopg, which is not installed (psycopg): "
        "pip install 'sesstree[postgres]'"]


def test_urls_are_shown_without_their_password() -> None:
    assert redact_url("postgresql://u:pw@h:5432/db?sslmode=require&password=pw2") == (
        "postgresql://u@h:5432/db?sslmode=require")
    assert redact_url("postgres://u@/db?host=/run/postgresql") == "postgres://u@/db?host=/run/postgresql"
    assert is_store_url("POSTGRESQL://h/db") and not is_store_url("./postgresql")


@pytest.mark.parametrize("url", [
    "postgresql://u:se/cret@h:5432/db", "postgresql://u:se?cret@h/db",
    "postgresql://u:se#cret@h/db", "postgresql://u:a@b/cret@h/db",
])
def test_unquoted_passwords_never_show_even_in_part(url: str) -> None:
    """A password with an unquoted ``/``, ``?``, ``#`` or ``@`` ends a parser's host part early;
    no piece of it may reach a message, the path or the query included."""
    shown = redact_url(url)
    assert "cret" not in shown and "se" not in shown.partition("://")[2]
    assert shown.endswith("h/db") or shown.endswith("h:5432/db")


def test_durable_mode_insists_on_synchronous_commit(postgres_url: str) -> None:
    """The default keeps the server's (or role's) setting; durable sets it on regardless."""
    url = postgres_url + "%20-csynchronous_commit%3Doff"  # a role or server default of off
    with open_store(url) as lax, open_store(url, durability="durable") as durable:
        lax_setting = lax.backend._db.execute("SHOW synchronous_commit").fetchone()  # type: ignore[attr-defined]
        durable_setting = durable.backend._db.execute(  # type: ignore[attr-defined]
            "SHOW synchronous_commit").fetchone()
    assert (lax_setting, durable_setting) == (("off",), ("on",))


def edit(db: psycopg.Connection[Any], table: str, key: str, value: bytes, old: bytes,
         new: bytes) -> None:
    """Replace bytes ``old`` by ``new`` in the ``data`` of one row, as damage would."""
    (data,) = db.execute(f"SELECT data FROM {table} WHERE {key} = %s", (value,)).fetchone()
    assert old in data
    db.execute(f"UPDATE {table} SET data = %s WHERE {key} = %s", (data.replace(old, new), value))


def test_every_read_checks_what_it_returns_against_the_id(postgres_url: str) -> None:
    """Damage made with SQL (a changed word, a changed payload stored apart) is an error that
    names the node, on every read path: a range, the server-side walk, one node."""
    with open_store(postgres_url) as store:
        q = store.session("q")
        ids = [q.add_message(user(text)).id for text in ("hello", "transfer 100 to alice")]
        ids.append(q.add_message({"role": "tool", "tool_call_id": "c", "content": "x" * 5000}).id)
        ids.append(q.add_message(user("done")).id)
        other = store.session("other")
        other.add_message(user("interleaved"))
        store.fork("f", "q~1")
        store.session("f").add_message(user("fork"))  # its path is two runs: the walk reads it
        db = store.backend._db  # type: ignore[attr-defined]
        edit(db, "nodes", "id", bytes.fromhex(ids[1]), b"alice", b"mallo")
        for read in (lambda: store.messages("q"), lambda: store.messages("f"),
                     lambda: store.show(ids[1])):
            with pytest.raises(StoreCorruptError, match=ids[1][:12]):
                read()
        edit(db, "nodes", "id", bytes.fromhex(ids[1]), b"mallo", b"alice")
        assert len(store.messages("q")) == 4
        (digest,) = db.execute("SELECT hash FROM blobs").fetchone()
        # (A zstd frame: a changed literal inflates to a changed payload, the hash tells.)
        edit(db, "blobs", "hash", digest, b"content", b"cantent")
        with pytest.raises(StoreCorruptError, match=ids[2][:12]):
            store.messages("q")
        with pytest.raises(StoreCorruptError, match=ids[2][:12]):
            store.show(ids[2])
        assert any(ids[2][:12] in f for f in store.fsck())


def test_a_read_only_server_is_store_read_only_and_reads_still_work(postgres_url: str) -> None:
    """A session that may not write (a hot standby, a read-only role): SQLSTATE 25006 is
    StoreReadOnlyError, one line, and reading goes on."""
    with open_store(postgres_url) as store:
        store.session("q").add_message(user("kept"))
    url = postgres_url + "%20-cdefault_transaction_read_only%3Don"
    with open_store(url, create=False) as ro:
        assert [m["content"] for m in ro.messages("q")] == ["kept"]
        with pytest.raises(StoreReadOnlyError, match="read-only"):
            ro.session("q").add_message(user("refused"))
        assert [m["content"] for m in ro.messages("q")] == ["kept"]


def test_gc_keeps_what_became_reachable_after_its_walk(postgres_url: str) -> None:
    """gc walks a snapshot without blocking anyone, then removes under a short lock: a node
    that a ref reached only after the walk (a fork at an unnamed node) is kept, the rest goes.
    The two steps are run by hand here, with the move in between."""
    with open_store(postgres_url) as store:
        store.session("q").add_message(user("named"))
        a = make_node(None, "user/message", user("unnamed a"))
        b = make_node(a.id, "user/message", user("unnamed b"))
        junk = make_node(None, "user/message", user("junk"))
        store.write([a, b, junk])
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        plan = backend.gc_walk(None)
        assert sorted(plan.ids.values()) == sorted([a.id, b.id, junk.id])
        store.fork("saved", b.id)  # after the walk, before the removal
        gone, removed, _ = backend.gc_remove(plan, None, None)
        assert gone == [junk.id] and removed == 1
        assert store.backend.has([a.id, b.id, junk.id]) == {a.id, b.id}
        assert [m["content"] for m in store.messages("saved")] == ["unnamed a", "unnamed b"]
        assert store.fsck() == []


def test_each_user_of_a_shared_store_has_a_head_of_their_own(
        postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One user's `sess checkout` must not move everyone's HEAD: on a shared store, HEAD is
    # kept on the user's machine, one file per store URL.
    with open_store(postgres_url) as setup:
        for name in ("quest-1", "quest-2"):
            setup.session(name).add_message({"role": "user", "content": name})
    monkeypatch.setenv("SESS_HOME", str(tmp_path / "alice"))
    with open_store(postgres_url) as alice:
        alice.checkout("quest-1")
        detached = alice.resolve("quest-2")
    monkeypatch.setenv("SESS_HOME", str(tmp_path / "bob"))
    with open_store(postgres_url) as bob:
        assert bob.head() == ("main", None)  # untouched by alice
        bob.checkout("quest-2")
        bob.rename_session("quest-2", "west")
        assert bob.head()[0] == "west"
    monkeypatch.setenv("SESS_HOME", str(tmp_path / "alice"))
    with open_store(postgres_url) as alice:
        assert alice.head()[0] == "quest-1"
        alice.checkout(detached[:12])
        # alice's detached HEAD keeps its node through her gc, though no ref names it
        alice.delete_session("west")
        alice.expire_reflog("west")
        assert detached not in alice.gc(dry_run=True).unreachable
        assert alice.fsck() == []
    files = list((tmp_path / "alice" / "heads").iterdir())
    assert len(files) == 1 and files[0].read_text().strip() == detached
    assert oct(files[0].stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(("url", "secret", "shown"), [
    # An @ in the query is no user part: the query stays, its password goes.
    ("postgresql://127.0.0.1:1/db?user=admin@srv&password=SECRET", "SECRET",
     "postgresql://127.0.0.1:1/db?user=admin@srv"),
    ("postgresql://u@127.0.0.1:1/db?sslpassword=KEYSECRET", "KEYSECRET",
     "postgresql://u@127.0.0.1:1/db"),
    # An unquoted & in a query password: its tail is no key=value, and goes too.
    ("postgresql://u@127.0.0.1:1/db?password=SE&CRETX&sslmode=disable", "CRETX",
     "postgresql://u@127.0.0.1:1/db?sslmode=disable"),
    ("postgresql://u:SE/CRET?X@127.0.0.1:1/db?application_name=a", "CRET",
     "postgresql://127.0.0.1:1/db?application_name=a"),
])
def test_secrets_in_the_query_never_show(url: str, secret: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert secret not in redact_url(url)


def test_stores_that_differ_only_in_their_query_are_shown_apart() -> None:
    """The checkout's HEAD file is keyed by the shown URL: two stores must not share it."""
    a = redact_url("postgresql://host1/db1?application_name=ci@x")
    b = redact_url("postgresql://host2/db2?application_name=dev@x")
    assert a != b and "host1" in a and "host2" in b


@pytest.mark.parametrize(("url", "secret"), [
    ("postgresql://u:SECRETzz%zz/x@127.0.0.1:1/db", "SECRETzz"),  # libpq quotes the bad token
    ("postgresql://u@127.0.0.1:1/db?password=QSEC%zzRET", "QSEC"),
    ("postgresql://u:SE[CRET@127.0.0.1:1/db", "CRET"),  # not even a URL for a parser
    ("postgresql://127.0.0.1:1/db?user=admin@srv&password=SECRETQ", "SECRETQ"),
    ("postgresql://u@127.0.0.1:1/db?sslpassword=KEYSECRET", "KEYSECRET"),
])
def test_connection_errors_never_quote_a_password(url: str, secret: str) -> None:
    result = subprocess.run([SESS, "--store", url, "log"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "internal error" not in lines[0]
    assert secret not in result.stderr + result.stdout
