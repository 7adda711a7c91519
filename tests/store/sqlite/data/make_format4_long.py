"""How ``format4_long.db.zst`` and ``format4_long.json`` were made: a format-4 store with a long
history, written by the sesstree of format 4 (835aec1).

    PYTHONPATH=<checkout of 835aec1>/src python make_format4_long.py FOLDER > format4_long.json
    python -c "import sys, zstandard; sys.stdout.buffer.write(zstandard.ZstdCompressor(
        level=19).compress(open(sys.argv[1], 'rb').read()))" FOLDER/store.db > format4_long.db.zst

(the store file is kept compressed: 250 KB of rows, 70 KB as a zstd frame). It holds 1,152
nodes: past the store's first 1,000 payloads, so its later rows are zstd frames made with the
trained dictionary; a session with a fork part-way, a fork that adds nothing, a payload over
64 KiB (stored apart), a tag and a deleted session; short messages, the first 1,000 in
batches, to keep the file small. The JSON holds, for what that sesstree read back from it,
the number of messages and a digest of each session's messages and chain, and of every node.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from sesstree import open_store

WORDS = "read the file then run the tests and fix the error in store session".split()
SESSIONS = ("main", "side", "bare", "big")


def message(tag: str, i: int) -> dict[str, Any]:
    text = f"{tag} {i} " + " ".join(WORDS[(i * k + k) % len(WORDS)] for k in range(i % 9))
    return {"role": "user" if i % 2 else "assistant", "content": text}


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def summary(store: Any) -> dict[str, Any]:
    """What the store reads back, in digests (the same function reads it after an upgrade)."""
    out: dict[str, Any] = {}
    for name in SESSIONS:
        chain = store.chain(name)
        out[name] = {
            "messages": len(store.messages(name)),
            "messages_digest": digest(store.messages(name)),
            "chain_digest": digest([chain.types, chain.datas, chain.ids, chain.start_depth]),
        }
    nodes = sorted((n.id, n.parent, n.depth, n.type, n.encoded.hex())
                   for n in store.backend.iter_nodes())
    out["nodes"] = [len(nodes), digest(nodes)]
    out["tags"] = [[t.name, t.target] for t in store.tags()]
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    with open_store(folder) as store:  # closed at 1,000 payloads: the dictionary is trained
        main = store.session("main")
        for start in range(0, 1000, 100):  # in batches: a reflog entry each (a smaller file)
            with store.batch():
                for i in range(start, start + 100):
                    main.add_message(message("main", i))
    with open_store(folder) as store:  # one at a time, each row a frame made with it
        main = store.session("main")
        for i in range(1000, 1100):
            main.add_message(message("main", i))
        store.fork("side", "main~700")
        for i in range(40):
            store.session("side").add_message(message("side", i))
        store.fork("bare", "main~100")
        big = store.session("big")
        big.add_message(message("big", 0))
        big.add_message({"role": "tool", "tool_call_id": "c1",
                         "content": " ".join(WORDS[k % 7] for k in range(14_000))})
        for i in range(1, 10):
            big.add_message(message("big", i))
        store.tag("v1", "main~5")
        store.session("gone").add_message({"role": "user", "content": "soon deleted"})
        store.delete_session("gone")
    with open_store(folder) as store:
        assert store.fsck() == []
        print(json.dumps(summary(store), indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
