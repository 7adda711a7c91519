"""How ``format4.json.gz`` was made: a PostgreSQL store written by the sesstree of format 4
(835aec1, the commit before format 5), dumped with what that sesstree read back from it.

    git -C REPO archive 835aec1 src | tar -x -C OLD
    PYTHONPATH=OLD/src python make_format4.py URL format4.json.gz

``URL`` names an empty schema (``?options=-csearch_path%3D...``). The dump holds the
statements that sesstree ran to create the store (its migrations and server-side functions,
in its order), every row of every table, and ``read``: the sessions' messages, tags, reflog,
HEAD and fsck as that sesstree gave them. ``test_postgres_upgrade.py`` loads it into a schema
of its own and opens it with this sesstree.
"""

from __future__ import annotations

import gzip
import json
import sys
from typing import Any

import psycopg

from sesstree import open_store
from sesstree.store.postgres.objects import OBJECT_FUNCTIONS
from sesstree.store.postgres.refs import REF_FUNCTIONS
from sesstree.store.postgres.schema import FORMAT_VERSION, MIGRATIONS

#: Over 1 KB: a payload stored apart in format 4 (it goes into the frame of its pack in 5).
LONG = "line of a file\n" * 200
#: Over 64 KB: a payload a pack keeps apart.
HUGE = "".join(f"row {i}: the cave opens at dusk; bring the key\n" for i in range(3000))
TABLES = ["meta", "blobs", "nodes", "refs", "reflog", "dicts"]


def message(i: int) -> dict[str, Any]:
    kind = i % 6
    if kind == 0:
        return {"role": "user", "content": f"question {i}: h\u00e9llo \u2603 \U0001f600 what now?"}
    if kind == 1:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{i}", "type": "function",
            "function": {"name": "read", "arguments": f"{{\"path\": \"f{i}.txt\"}}"}}]}
    if kind == 2:
        return {"role": "tool", "tool_call_id": f"c{i - 1}", "content": f"contents of f{i - 1}"}
    if kind == 3:
        return {"role": "assistant", "content": f"answer {i}: the file says what it says"}
    if kind == 4:
        return {"role": "user", "content": "", "extra": {"n": -i, "f": i / 7, "deep": [[i]]}}
    return {"role": "assistant", "content": "ok " * (i % 40)}


def write(url: str) -> None:
    with open_store(url) as store:
        main = store.session("main")
        with store.batch():  # past TRAIN_AFTER: the dictionary is trained when it ends
            for i in range(1050):
                main.add_message(message(i))
        for i in range(1050, 1250):
            main.add_message({"role": "tool", "tool_call_id": "c", "content": LONG}
                             if i % 50 == 7 else message(i))
        main.add_message({"role": "tool", "tool_call_id": "h", "content": HUGE})
        main.add_message(message(1251))
        store.fork("side", "main~150")
        side = store.session("side")
        for i in range(20):
            side.add_message({"role": "tool", "tool_call_id": "s", "content": LONG}
                             if i == 5 else message(5000 + i))
        store.tag("v1", "main~10")
        gone = store.session("gone")
        for i in range(3):
            gone.add_message(message(9000 + i))
        store.delete_session("gone")
        store.rename_session("side", "branch")
        store.set_session_meta("main", {"title": "golden"})


def read(url: str) -> dict[str, Any]:
    with open_store(url) as store:
        return {
            "messages": {n: store.messages(n) for n in ("main", "branch")},
            "tags": [[t.name, t.target] for t in store.tags()],
            "reflog": [[e.ref, e.old, e.new, e.time, e.reason, e.started]
                       for e in store.reflog()],
            "meta": store.get_session_meta("main"),
            "nodes": store.backend.count_nodes(),
            "fsck": store.fsck(),
        }


def value(v: Any) -> Any:
    return {"hex": bytes(v).hex()} if isinstance(v, (bytes, memoryview)) else v


def dump(url: str) -> dict[str, Any]:
    tables: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name in TABLES:
            cur = conn.execute(f"SELECT * FROM {name} ORDER BY 1")  # type: ignore[arg-type]
            assert cur.description is not None
            tables[name] = {"columns": [c.name for c in cur.description],
                            "rows": [[value(v) for v in row] for row in cur.fetchall()]}
    return {
        "format": FORMAT_VERSION,
        "statements": [s for step in MIGRATIONS for s in step] + OBJECT_FUNCTIONS + REF_FUNCTIONS,
        "tables": tables,
    }


def main() -> None:
    url, out = sys.argv[1], sys.argv[2]
    assert FORMAT_VERSION == 4, "run with the sesstree of format 4 first on the path"
    write(url)
    seen = read(url)
    golden = dump(url)
    golden["read"] = seen
    with gzip.open(out, "wt") as f:
        json.dump(golden, f, sort_keys=True)


if __name__ == "__main__":
    main()
