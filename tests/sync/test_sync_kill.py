"""A client killed in the middle of a push: the remote stays consistent, no ref moves, and a
rerun sends only what is still missing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from sync_kit import TOKEN, serving

from sesstree import open_store, sync
from sesstree.server import create_app
from sesstree.sync import clone
from sesstree.sync.pack import PACK_BYTES


def test_killed_pusher_moves_no_ref_and_rerun_completes(tmp_path: Path) -> None:
    origin = open_store(tmp_path / "origin")
    origin.session("main").append("user/message", {"role": "user", "content": "start"})
    app = create_app(origin, token=TOKEN)
    pushes = 0
    second = threading.Event()
    release = asyncio.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    async def gate(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal pushes
        if scope["type"] == "http" and scope["path"] == "/api/v1/push":
            pushes += 1
            if pushes == 2:  # the last pack, with the ref update: never applied
                loops.append(asyncio.get_running_loop())
                second.set()
                await release.wait()
                await send({"type": "http.response.start", "status": 503, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
        await app(scope, receive, send)

    try:
        with serving(gate) as url:
            mine = clone(url, tmp_path / "mine")
            # Large events, so the push takes two packs: the first is stored on its own.
            count = PACK_BYTES // 200_000 + 3  # just over one pack
            mine.session("main").extend(
                [("user/message", {"role": "user", "content": os.urandom(100_000).hex()})
                 for _ in range(count)])
            before = origin.session_head("main")
            mine.close()
            env = {**os.environ, "SESS_TOKEN": TOKEN}
            child = subprocess.Popen(
                [sys.executable, "-c", "from sesstree.cli import main; main()",
                 "--store", str(tmp_path / "mine"), "push"], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                assert second.wait(60), "the push never reached its second pack"
                child.kill()
                child.wait(20)
            finally:
                for loop in loops:
                    loop.call_soon_threadsafe(release.set)
            assert origin.session_head("main") == before
            assert origin.fsck() == []
            stored = origin.backend.count_nodes() - 1
            assert 0 < stored < count
            with open_store(tmp_path / "mine") as again:
                result = sync.push(again, "origin", ["main"], token=TOKEN)
                assert result.nodes == count - stored
                assert origin.session_head("main") == again.session_head("main")
            assert origin.fsck() == []
    finally:
        origin.close()

