"""The ``sess`` CLI in-process: diff, tag, import/export, stats, fsck, gc, finding the store,
ambiguous ids.

Sessions, HEAD, log, append and friends are in test_cli.py.
"""

from __future__ import annotations

import importlib.metadata
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from cli_kit import Sess, msg, user_error

from sesstree import Node, make_node, open_store
from sesstree.fmt import SHORT
from sesstree.node import encode_data

SEED = [
    {"role": "system", "content": "You are the narrator.", "x-extra": {"keep": [1, 2]}},
    {"role": "user", "content": "I need to get into the Cave of Echoes."},
    {"role": "assistant", "content": "Go west past the old mill.", "name": "guide"},
    {"role": "narrator", "content": "Wind howls.", "weight": 0.5},
]
META = {"id": "quest-1", "title": "The Cave of Echoes", "tags": ["demo"]}


def write_seed(path: Path, messages: list[dict[str, object]], meta: dict[str, object] | None = None
               ) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    if meta is not None:
        path.with_name(path.name.removesuffix(".jsonl") + ".meta.json").write_text(json.dumps(meta))
    return path


def short(id: str) -> str:
    return id[:SHORT]


def read_jsonl(path: Path) -> list[object]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- import --------------------------------------------------------------------------------------


def test_import_seed_file_with_meta(sess: Sess, tmp_path: Path) -> None:
    src = write_seed(tmp_path / "in" / "quest-1.jsonl", SEED, META)
    out = sess.ok("import", str(src))
    assert out == f"quest-1: created, 4 events (4 new) from {src.resolve()}\n"
    assert sess.json("messages", "quest-1") == SEED  # every key and the unknown role kept
    log = sess.json("log", "quest-1", "--reverse")
    assert [n["type"] for n in log] == ["system/message", "user/message", "assistant/message",
                                        "message"]
    assert len(sess.lines("log", "quest-1")) == 4  # one node per message, no marker nodes
    with sess.store() as store:
        origin = store.session_origin("quest-1")
        assert origin is not None and origin.format == "seed"
        assert store.get_session_meta("quest-1") == META


def test_import_again_grown_and_copied_share_nodes(sess: Sess, tmp_path: Path) -> None:
    src = write_seed(tmp_path / "quest-1.jsonl", SEED)
    sess.ok("import", str(src))
    assert sess.ok("import", str(src)) == f"quest-1: up to date, 4 events (0 new) from {src.resolve()}\n"
    write_seed(src, [*SEED, {"role": "user", "content": "I go west."}])
    assert sess.ok("import", str(src)) == (
        f"quest-1: fast-forward, 5 events (1 new) from {src.resolve()}\n")
    # the seed's fork: copy the file and append
    fork = write_seed(tmp_path / "quest-2.jsonl", [*SEED, {"role": "user", "content": "I go east."}])
    data = sess.json("import", str(fork))
    assert data == [{"source": str(fork.resolve()), "session": "quest-2", "outcome": "created",
                     "events": 5, "new_nodes": 1, "head": sess.head("quest-2"), "problems": []}]
    assert sess.json("stats")["nodes"] == 6  # the shared prefix is stored once
    diff = sess.json("diff", "quest-1", "quest-2")
    assert diff["base"] == sess.head("quest-1~1")


def test_import_as_name(sess: Sess, tmp_path: Path) -> None:
    src = write_seed(tmp_path / "quest-1.jsonl", SEED)
    out = sess.ok("import", str(src), "--as", "renamed")
    assert out.startswith("renamed: created, 4 events (4 new) from ")
    assert [b["name"] for b in sess.json("branch")] == ["renamed"]
    sess.fail("import", str(src), "--as", "../x", needles=("'../x'",))
    sess.fail("import", str(src), str(src), "--as", "two", needles=("--as names one session",))
    assert [b["name"] for b in sess.json("branch")] == ["renamed"]


@pytest.mark.parametrize(("text", "needles"), [
    ('{"role": "user", "content": "a"}\n{"role": "user", "content": "b"}\n{"role": "assis\n',
     ("bad.jsonl:3:", "truncated line")),
    ('{"role": "user", "content": "a"}\nnot json at all\n{"role": "user", "content": "c"}\n',
     ("bad.jsonl:2:", "malformed JSON")),
    ('{"role": "user", "content": "a"}\n\n[1, 2]\n', ("bad.jsonl:3:", "expected a JSON object")),
])
def test_import_malformed_line_names_file_and_line_and_imports_nothing(
        sess: Sess, tmp_path: Path, text: str, needles: tuple[str, ...]) -> None:
    (tmp_path / "bad.jsonl").write_text(text)
    sess.fail("import", "bad.jsonl", needles=needles)
    sess.fail("import", "bad.jsonl", "--json", needles=needles)
    assert sess.json("branch") == []
    assert sess.json("stats")["nodes"] == 0


def test_import_user_errors(sess: Sess, tmp_path: Path) -> None:
    sess.fail("import", "missing.jsonl", needles=("missing.jsonl", "no such file"))
    (tmp_path / "folder").mkdir()
    sess.fail("import", "folder", needles=("folder", "--recursive"))
    sess.fail("import", "--format", "weird", "x.jsonl", needles=("unknown format 'weird'",))
    meta_bad = write_seed(tmp_path / "m.jsonl", SEED)
    (tmp_path / "m.meta.json").write_text("{nope")
    sess.fail("import", str(meta_bad), needles=("m.meta.json", "malformed JSON"))
    assert sess.json("branch") == []


# -- export --------------------------------------------------------------------------------------


def test_export_round_trips_the_imported_file(sess: Sess, tmp_path: Path) -> None:
    src = write_seed(tmp_path / "in" / "quest-1.jsonl", SEED, META)
    sess.ok("import", str(src))
    out = tmp_path / "out" / "copy.jsonl"
    out.parent.mkdir()
    assert sess.lines("export", "quest-1", "-o", str(out)) == [
        f"wrote {out}", f"wrote {out.with_name('copy.meta.json')}"]
    assert read_jsonl(out) == read_jsonl(src) == SEED
    assert json.loads(out.with_name("copy.meta.json").read_text()) == META
    # and back in: the same session, nothing new
    again = sess.json("import", str(out), "--as", "quest-1")
    assert (again[0]["outcome"], again[0]["new_nodes"]) == ("up to date", 0)


def test_export_default_names_the_file_after_the_session(sess: Sess, tmp_path: Path) -> None:
    sess.quest()
    sess.ok("checkout", "-b", "quest-2")
    sess.ok("append", "assistant/message", msg("assistant", "East it is."))
    assert sess.lines("export") == ["wrote quest-2.jsonl", "wrote quest-2.meta.json"]
    assert read_jsonl(tmp_path / "quest-2.jsonl") == sess.json("messages")
    meta = json.loads((tmp_path / "quest-2.meta.json").read_text())
    assert (meta["id"], meta["head"], meta["messages"]) == ("quest-2", sess.head(), 4)
    assert sess.lines("export", "main~1") == ["wrote main.jsonl", "wrote main.meta.json"]
    assert len(read_jsonl(tmp_path / "main.jsonl")) == 2
    sess.fail("export", "nosuch", needles=("'nosuch'",))


# Guards a past bug.
def test_export_into_missing_folder_is_a_user_error(sess: Sess) -> None:
    sess.quest()
    sess.fail("export", "-o", "no/such/dir/x.jsonl", needles=("no/such/dir",))


# Guards a past bug.
def test_export_reflog_revision_is_named_after_the_session(sess: Sess, tmp_path: Path) -> None:
    sess.quest()
    sess.ok("reset", "main", "main~1")
    assert sess.lines("export", "main@{1}") == ["wrote main.jsonl", "wrote main.meta.json"]


# -- diff ----------------------------------------------------------------------------------------


def test_diff_fork_human_and_json(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("branch", "main~1", "west")
    sess.ok("append", "west", "user/message", msg("user", "I go east."))
    west = sess.head("west")
    assert sess.lines("diff", "main", "west") == [
        f"common ancestor {short(ids[1])} (2 events)",
        "only in main (1):",
        f"  {short(ids[2])}  user/message       user: I go west.",
        "only in west (1):",
        f"  {short(west)}  user/message       user: I go east.",
    ]
    data = sess.json("diff", "main", "west")
    assert data["base"] == ids[1]
    assert [n["id"] for n in data["a"]] == [ids[2]]
    assert data["b"] == [{"id": west, "parent": ids[1], "type": "user/message",
                          "data": {"role": "user", "content": "I go east."}}]
    # an ancestor: nothing only on the older side
    data = sess.json("diff", "main~2", "main")
    assert (data["base"], data["a"], [n["id"] for n in data["b"]]) == (ids[0], [], ids[1:])


def test_diff_unrelated_and_errors(sess: Sess) -> None:
    sess.quest()
    sess.ok("append", "other", "user/message", msg("user", "x"))
    lines = sess.lines("diff", "main", "other")
    assert lines[0] == "no common ancestor"
    assert lines[1] == "only in main (3):" and "only in other (1):" in lines
    assert sess.json("diff", "main", "other")["base"] is None
    sess.fail("diff", "main", "nosuch", needles=("'nosuch'",))


# -- tag -----------------------------------------------------------------------------------------


def test_tag_create_list_json(sess: Sess) -> None:
    assert sess.ok("tag") == ""
    assert sess.json("tag") == []
    ids = sess.quest()
    assert sess.ok("tag", "start", "main~2") == f"Tagged {short(ids[0])} as start\n"
    assert sess.ok("tag", "now") == f"Tagged {short(ids[2])} as now\n"
    assert sess.lines("tag") == [f"now  {short(ids[2])}", f"start  {short(ids[0])}"]
    data = sess.json("tag")
    assert [(t["name"], t["target"]) for t in data] == [("now", ids[2]), ("start", ids[0])]
    # a tag stays where it was when the session moves
    sess.ok("append", "user/message", msg("user", "more"))
    assert sess.head("now") == ids[2]
    assert sess.json("log", "start") == sess.json("log", "main~3")


@pytest.mark.parametrize(("args", "needles"), [
    (("tag", "start"), ("tag 'start' already exists",)),
    (("tag", "../x"), ("'../x'",)),
    (("tag", "x", "nosuch"), ("'nosuch'",)),
])
def test_tag_user_errors(sess: Sess, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    ids = sess.quest()
    sess.ok("tag", "start", "main~2")
    sess.fail(*args, needles=needles)
    assert [(t["name"], t["target"]) for t in sess.json("tag")] == [("start", ids[0])]


# -- stats, fsck, gc -----------------------------------------------------------------------------


def test_stats_counts_and_bytes(sess: Sess, tmp_path: Path) -> None:
    src = write_seed(tmp_path / "quest-1.jsonl", SEED)
    sess.ok("import", str(src))
    sess.ok("branch", "quest-1", "quest-2")
    sess.ok("tag", "start", "quest-1~3")
    data = sess.json("stats")
    line_bytes = sum(len(json.dumps(m, sort_keys=True, separators=(",", ":"))) + 1 for m in SEED)
    assert {k: data[k] for k in ("nodes", "sessions", "tags", "reflog_entries", "logical_bytes")} == {
        "nodes": 4, "sessions": 2, "tags": 1, "reflog_entries": 3, "logical_bytes": 2 * line_bytes}
    assert data["physical_bytes"] > 0
    assert data["ratio"] == round(data["logical_bytes"] / data["physical_bytes"], 3)
    lines = sess.lines("stats")
    assert lines[:5] == ["nodes           4", "sessions        2", "tags            1",
                         "reflog entries  3",
                         f"logical bytes   {2 * line_bytes}  (as one JSONL file per session)"]
    assert lines[5].startswith("physical bytes  ") and lines[5].endswith("(on disk)")
    assert lines[6].startswith("ratio           ") and "(JSONL bytes per byte on disk: " in lines[6]


def test_fsck_clean_store(sess: Sess) -> None:
    assert sess.ok("fsck") == "ok: 0 nodes, every id, parent and ref checked\n"
    sess.quest()
    sess.ok("branch", "main~1", "west")
    assert sess.ok("fsck") == "ok: 3 nodes, every id, parent and ref checked\n"


def test_fsck_finds_a_tampered_node(sess: Sess, tmp_path: Path) -> None:
    ids = sess.quest()
    with closing(sqlite3.connect(tmp_path / ".sess" / "store.db")) as db, db:
        # (A loose node's type and payload are in `loose`; its `nodes` row is the index.)
        changed = db.execute("UPDATE loose SET data = ? WHERE seq = "
                             "(SELECT seq FROM nodes WHERE id = ?)",
                             (b"\xacuser/message" + encode_data({"role": "user", "content": "I go EAST."}),
                              bytes.fromhex(ids[2]))).rowcount
    assert changed == 1
    result = sess("fsck")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == f"fault: node {ids[2][:12]} does not hash to its id (content damaged)\n"
    assert result.stderr == "Error: 1 fault found\n"


def test_gc_dry_run_then_removes_an_unreachable_node(sess: Sess) -> None:
    sess.quest()
    stray = make_node(None, "user/message", {"role": "user", "content": "never named"})
    with sess.store() as store:
        store.write([stray])
    assert sess.ok("show", stray.id[:12]).startswith(f"node    {stray.id}\n")
    assert sess.ok("gc", "--dry-run") == "would remove 1 unreachable node; 3 kept\n"
    assert sess.json("stats")["nodes"] == 4
    assert sess.ok("gc") == "removed 1 unreachable node; 3 kept\n"
    assert sess.json("stats")["nodes"] == 3
    sess.fail("show", stray.id[:12], needles=(stray.id[:12],))
    assert sess.ok("gc") == "removed 0 unreachable nodes; 3 kept\n"
    assert sess.ok("fsck").startswith("ok: 3 nodes")


def test_gc_keeps_what_only_the_reflog_reaches(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("reset", "main", "main~2")
    assert sess.ok("gc") == "removed 0 unreachable nodes; 3 kept\n"
    sess.ok("reset", "main", "main@{1}")
    assert sess.head("main") == ids[2]


# -- finding the store ---------------------------------------------------------------------------


def test_no_store_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    for args in (("status",), ("log",), ("branch",), ("import", "x.jsonl"), ("fsck",)):
        s.fail(*args, needles=("no store found in this folder or any parent", "sess init"))
    assert not (tmp_path / ".sess").exists()


def test_store_is_found_in_a_parent_folder(sess: Sess, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ids = sess.quest()
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert sess.json("status")["head"] == ids[2]
    sess.ok("append", "user/message", msg("user", "from below"))
    monkeypatch.chdir(tmp_path)
    assert sess.json("status")["length"] == 4


def test_store_option_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    s.ok("--store", "one", "init")
    s.ok("--store", "two", "init")
    s.ok("--store", "one", "append", "user/message", msg("user", "in one"))
    assert s.json("--store", "one", "messages") == [{"role": "user", "content": "in one"}]
    s.fail("status", needles=("no store found",))  # neither is a .sess folder
    env = {"SESS_STORE": str(tmp_path / "one")}
    assert json.loads(s.ok("status", "--json", env=env))["length"] == 1
    # --store wins over SESS_STORE
    assert json.loads(s.ok("--store", "two", "status", "--json", env=env))["length"] == 0
    # SESS_STORE wins over a .sess folder here
    s.ok("init")
    assert json.loads(s.ok("status", "--json", env=env))["length"] == 1
    assert json.loads(s.ok("status", "--json"))["length"] == 0


def test_store_option_or_env_pointing_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    s.fail("--store", "nowhere", "status", needles=("no store at nowhere", "sess --store nowhere init"))
    user_error(s("status", env={"SESS_STORE": "gone"}), "no store at gone")
    (tmp_path / "junk.db").write_text("this is not a database\n" * 20)
    # guards a past bug: a text file passed as the store was called a damaged store
    s.fail("--store", "junk.db", "log", needles=("junk.db is not a sesstree store",))
    (tmp_path / "empty.db").write_bytes(b"")
    s.fail("--store", "empty.db", "log", needles=("empty.db is not a sesstree store", "empty"))
    assert (tmp_path / "junk.db").read_text() == "this is not a database\n" * 20  # not made worse
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "empty").touch()
    s.fail("--store", "empty", "status", needles=("empty", "not a sesstree store"))
    assert (tmp_path / "empty").read_bytes() == b""  # a read never turns a file into a store


def test_init_and_open_agree_on_where_the_store_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sess init foo` then `--store foo` finds it; SESS_STORE names where init creates one."""
    monkeypatch.delenv("SESS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    s = Sess(tmp_path)
    s.ok("init", "foo")
    assert s.ok("--store", "foo", "status") == "On session main\nNo events yet\n"
    s("init", env={"SESS_STORE": str(tmp_path / "env-store")})
    assert (tmp_path / "env-store" / "store.db").exists()
    assert not (tmp_path / ".sess").exists()
    out = s("status", env={"SESS_STORE": str(tmp_path / "env-store")})
    assert out.exit_code == 0, out.output


def test_version() -> None:
    result = Sess(Path.cwd())("--version")
    assert result.exit_code == 0
    assert result.stdout == f"sess, version {importlib.metadata.version('sesstree')}\n"


# -- ambiguous and unknown id prefixes -----------------------------------------------------------


def two_nodes_sharing_a_prefix() -> tuple[Node, Node]:
    """Brute-force two root nodes whose ids start with the same 4 hex digits."""
    seen: dict[str, Node] = {}
    for i in range(100_000):
        node = make_node(None, "user/message", {"role": "user", "content": f"n{i}"})
        twin = seen.setdefault(node.id[:4], node)
        if twin is not node:
            return twin, node
    raise AssertionError("no collision")


def test_ambiguous_and_unknown_prefixes(sess: Sess) -> None:
    a, b = two_nodes_sharing_a_prefix()
    with sess.store() as store:
        store.write([a, b])
    prefix = a.id[:4]
    for args in (("show", prefix), ("log", prefix), ("branch", prefix, "x"), ("checkout", prefix),
                 ("tag", "t", prefix), ("diff", prefix, prefix), ("messages", prefix)):
        line = sess.fail(*args, needles=(f"id prefix '{prefix}' is ambiguous",))
        assert a.id[:12] in line and b.id[:12] in line
    sess.fail("show", prefix.upper(), needles=(f"'{prefix.upper()}' is ambiguous",))
    assert sess.json("branch") == [] and sess.json("tag") == []
    # one more character tells them apart
    k = next(n for n in range(5, 64) if a.id[:n] != b.id[:n])
    assert sess.json("show", b.id[:k])["id"] == b.id
    assert sess.json("show", a.id[:k].upper())["id"] == a.id
    # a prefix nothing has
    unknown = next(p for p in (f"{n:06x}" for n in range(1 << 24))
                   if not a.id.startswith(p) and not b.id.startswith(p))
    sess.fail("show", unknown, needles=(f"unknown revision '{unknown}'",))
    sess.fail("show", "abc", needles=("unknown revision 'abc'",))  # too short to be a prefix


def test_export_never_replaces_a_file_unless_forced(sess: Sess, tmp_path: Path) -> None:
    sess.quest()
    precious = tmp_path / "precious.jsonl"
    precious.write_text("precious\n")
    sess.fail("export", "main", "-o", str(precious), needles=("precious.jsonl", "--force"))
    assert precious.read_text() == "precious\n"
    assert not (tmp_path / "precious.meta.json").exists()  # nothing of the export was written
    sess.ok("export", "main", "-o", str(precious), "--force")
    assert json.loads(precious.read_text().splitlines()[0])["role"] == "user"


def test_parallel_appends_from_the_shell_all_land(tmp_path: Path) -> None:
    """Two shells appending to one session at once: the CLI rebases, so no append is refused
    and every event lands exactly once."""
    import os
    import subprocess
    import sys

    sess_bin = str(Path(sys.executable).with_name("sess"))
    env = {**os.environ, "SESS_STORE": str(tmp_path / "st")}
    subprocess.run([sess_bin, "init"], env=env, check=True, capture_output=True)
    script = (
        'for i in $(seq 25); do "$0" append shared user/message '
        '"{\\"role\\": \\"user\\", \\"content\\": \\"$1-$i\\"}" || echo FAILED; done'
    )
    writers = [
        subprocess.Popen(["sh", "-c", script, sess_bin, w], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for w in ("A", "B")
    ]
    outputs = [w.communicate(timeout=120)[0] for w in writers]
    assert all(w.returncode == 0 for w in writers)
    assert not any("FAILED" in out or "Error" in out for out in outputs), outputs
    with open_store(tmp_path / "st") as store:
        contents = [m["content"] for m in store.messages("shared")]
        assert sorted(contents) == sorted(f"{w}-{i}" for w in "AB" for i in range(1, 26))
        assert store.fsck() == []


def test_tag_delete_and_reflog_expire_then_gc(sess: Sess) -> None:
    ids = sess.quest()
    sess.ok("tag", "v1", "main~1")
    assert sess.ok("tag", "-d", "v1") == f"Deleted tag v1 (was {ids[1][:SHORT]})\n"
    assert sess.json("tag") == []
    sess.ok("checkout", "-b", "side")
    sess.ok("append", "side", "user/message", '{"role": "user", "content": "a detour"}')
    sess.ok("checkout", "main")
    sess.ok("branch", "-d", "side")
    assert sess.ok("gc") == "removed 0 unreachable nodes; 4 kept\n"  # the reflog keeps it
    sess.fail("reflog", "--expire", needles=("usage: sess reflog --expire NAME",))
    assert sess.ok("reflog", "--expire", "side").startswith("Expired 3 reflog entries of side")
    assert sess.ok("gc") == "removed 1 unreachable node; 3 kept\n"
    assert sess.ok("fsck").startswith("ok: 3 nodes")


def test_log_all_without_graph_is_refused_not_ignored(sess: Sess) -> None:
    # Guards a past bug: `sess log --all` silently showed HEAD's history only.
    sess.quest()
    sess.fail("log", "--all", needles=("--all", "--graph"))
    assert sess.ok("log", "--graph", "--all")


def test_reflog_of_head_and_of_a_tag_by_its_short_name(sess: Sess) -> None:
    # Guards a past bug: `sess reflog HEAD` and `sess reflog v1` were unknown.
    ids = sess.quest()
    sess.ok("tag", "v1", "main~1")
    assert sess.ok("reflog", "HEAD") == sess.ok("reflog", "main") == sess.ok("reflog")
    tag_log = sess.json("reflog", "v1")
    assert [(e["ref"], e["new"]) for e in tag_log] == [("tags/v1", ids[1])]
    assert sess.lines("reflog", "v1")[0].startswith(f"{ids[1][:10]} v1@{{0}}: tag: main~1")
    assert sess.json("show", "v1@{0}")["id"] == ids[1]
    sess.ok("checkout", ids[0][:8])
    sess.fail("reflog", "HEAD", needles=("HEAD is detached",))
