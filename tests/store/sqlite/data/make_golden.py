"""How ``formatN.db`` and the "read" part of ``formatN.json`` were made: run with the sesstree of
that format first on the path (format 1: f1241fa, format 2: 16907e7, format 3: 31cfdea,
format 4: 835aec1).

    PYTHONPATH=<checkout of that commit>/src python make_golden.py FOLDER > read.json

The "upgraded" part is ``test_sqlite_golden.dump`` of that store once the sesstree of format 5
(c6933c9, the first with the ``loose`` table) had opened it, read it
(``test_sqlite_golden.read``) and closed it. (Formats 1 to 3 were first checked against the
sesstree before numbered migrations, 8e3a8aa, format 4; their dumps changed with format 5 only
by its migration: the ``pack`` column, the ``packs`` table, the format and ``pack_pending`` in
``meta`` as ffea8c2, the first with packs, left them, then the empty ``loose`` table; format 6
added the ``t`` column of ``nodes``, NULL in every old row, and its format in ``meta``; format 7
the text index's tables, ``nodes_parent``, and ``index_mark`` and ``index_text_bytes`` in ``meta``, as the
reader's fsck caught the index up: no other row changed.)

To make it again (the "read" part must not change; check that the "upgraded" one changed only
by what the new code's migration adds)::

    python -c "import json, shutil, sys, tempfile; from pathlib import Path
    sys.path[:0] = ['tests/store/sqlite', 'tests/helpers']; import test_sqlite_golden as t
    for v in t.VERSIONS:
        f = t.DATA / f'format{v}.json'; g = json.loads(f.read_text())
        s = Path(tempfile.mkdtemp()); shutil.copyfile(t.DATA / f'format{v}.db', s / 'store.db')
        assert t.read(s) == g['read']; g['upgraded'] = t.dump(s / 'store.db')
        f.write_text(json.dumps(g, indent=1, sort_keys=True, ensure_ascii=False) + '\\n')"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sesstree import open_store

LONG = "line of a file\n" * 200  # over 1 KB: a payload stored apart (a zlib blob before format 4)
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "h\u00e9llo \u2603 \U0001f600"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "c1", "type": "function",
        "function": {"name": "read", "arguments": "{\"path\": \"a.txt\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": LONG},
    {"role": "assistant", "content": "done"},
]


def main() -> None:
    folder = Path(sys.argv[1])
    with open_store(folder) as store:
        session = store.session("main")
        for m in MESSAGES:
            session.add_message(m)
        store.fork("side", "main")
        store.session("side").add_message({"role": "user", "content": "and then?"})
        store.session("side").add_message({"role": "tool", "tool_call_id": "c1", "content": LONG})
        store.tag("v1", "main")
        store.session("gone").add_message({"role": "user", "content": "soon deleted"})
        store.delete_session("gone")
        store.rename_session("side", "branch")
        store.set_session_meta("main", {"title": "golden"})
        store.set_head_session("main")
    with open_store(folder) as store:
        out = {
            "messages": {n: store.messages(n) for n in ("main", "branch")},
            "tags": [[t.name, t.target] for t in store.tags()],
            "reflog": [[e.ref, e.old, e.new, e.time, e.reason] for e in store.reflog()],
            "head": list(store.head()),
            "fsck": store.fsck(),
        }
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
