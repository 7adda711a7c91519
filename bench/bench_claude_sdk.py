"""What a fork made through the Claude Agent SDK costs a sesstree store, against a copy.

    .venv/bin/python bench/bench_claude_sdk.py [FORKS]

For each real Claude Code session in ``tests/interop/samples/claude-code`` (more than 20
lines), in a fresh SQLite store behind ``SesstreeSessionStore``: the session is appended in
batches of 50 lines (as the SDK's mirror flushes them), then forked ``FORKS`` times (default
4) with ``fork_session_via_store``, alternately of the session and of the newest fork, and
once as the CLI forks (resume with ``fork_session=True``: the lines again under the new
session id, ``promptId`` renewed). Each fork's cost is measured two ways, in the same run:

- ``logical``: the bytes of the nodes it added (their canonical msgpack), over the bytes of
  the nodes the session took;
- ``physical``: how much the store's files grew (after a WAL checkpoint), over how much they
  grew for the session.

The baseline is a copy: the same fork's lines appended to a key of another project, where no
source is found to fork from, so every line is stored again (what a store that copies costs,
and what the SDK's own JSONL fork costs: 100%). Prints one JSON object per session and the
largest fork ratio of all.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from sesstree import Store

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "tests" / "interop" / "samples" / "claude-code"

__all__ = ["main"]


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for text in path.read_text().splitlines():
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _nodes(store: Store) -> dict[str, int]:
    return {n.id: len(n.encoded) for n in store.backend.iter_nodes()}


def _physical(store: Store) -> int:
    checkpoint = getattr(store.backend, "checkpoint", None)
    if checkpoint is not None:
        checkpoint()
    return store.backend.physical_bytes()


class _Meter:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.nodes = _nodes(store)
        self.physical = _physical(store)

    def step(self) -> tuple[int, int]:
        """Bytes added since the last step: (logical, physical)."""
        nodes, physical = _nodes(self.store), _physical(self.store)
        logical = sum(b for i, b in nodes.items() if i not in self.nodes)
        grew = physical - self.physical
        self.nodes, self.physical = nodes, physical
        return logical, grew


async def _session(path: Path, forks: int, tmp: Path) -> dict[str, Any]:
    from claude_agent_sdk import fork_session_via_store, project_key_for_directory

    from sesstree.integrations.claude_agent_sdk import SesstreeSessionStore

    lines = _lines(path)
    sids = [e["sessionId"] for e in lines if isinstance(e.get("sessionId"), str)]
    sid = max(set(sids), key=sids.count)
    project = tmp / "project"
    project.mkdir()
    pk = project_key_for_directory(project)
    sdk = SesstreeSessionStore(tmp / "store")
    try:
        meter = _Meter(sdk.store)
        for start in range(0, len(lines), 50):
            await sdk.append({"project_key": pk, "session_id": sid}, lines[start:start + 50])  # type: ignore[arg-type]
        base_logical, base_physical = meter.step()
        rows: list[dict[str, Any]] = []
        source = sid
        for n in range(forks):
            made = await fork_session_via_store(sdk, source, directory=str(project))
            logical, physical = meter.step()
            forked = await sdk.load({"project_key": pk, "session_id": made.session_id})
            assert forked is not None
            # the same lines as a copy: under a project of its own there is nothing to fork from
            for start in range(0, len(forked), 50):
                await sdk.append({"project_key": f"elsewhere-{n}", "session_id": made.session_id},
                                 forked[start:start + 50])
            copy_logical, copy_physical = meter.step()
            rows.append({"fork": "fork_session_via_store", "of": "session" if n % 2 == 0 else "fork",
                         "logical": logical / base_logical, "physical": physical / base_physical,
                         "copy_logical": copy_logical / base_logical,
                         "copy_physical": copy_physical / base_physical})
            source = made.session_id if n % 2 == 0 else sid
        new_sid = "7f1c2d3e-4b5a-4697-8887-a9b0c1d2e3f4"
        # as the CLI writes it: the lines with a uuid again (the rest it writes anew)
        copied = [{**e, "sessionId": new_sid, **({"promptId": "renewed"} if e.get("type") == "user"
                                                  else {})} for e in lines if "uuid" in e]
        for start in range(0, len(copied), 50):
            await sdk.append({"project_key": pk, "session_id": new_sid}, copied[start:start + 50])  # type: ignore[arg-type]
        logical, physical = meter.step()
        rows.append({"fork": "cli fork_session=True", "of": "session",
                     "logical": logical / base_logical, "physical": physical / base_physical})
        return {"session": path.name[-42:], "lines": len(lines), "logical_bytes": base_logical,
                "physical_bytes": base_physical, "forks": rows}
    finally:
        sdk.close()


#: The files grow by whole 4 KiB pages: below this size a page is more than the figure measured.
PHYSICAL_FROM = 1 << 20


def main(argv: list[str]) -> int:
    """Run the benchmark; print JSON lines and the largest ratios; exit 1 past 5%."""
    forks = int(argv[1]) if len(argv) > 1 else 4
    worst: dict[str, float] = {}
    for path in sorted(SAMPLES.glob("*.jsonl")):
        if len(_lines(path)) <= 20:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            result = asyncio.run(_session(path, forks, Path(tmp)))
        for row in result["forks"]:
            kinds = ["logical"] + (["physical"] if result["physical_bytes"] >= PHYSICAL_FROM else [])
            for k in kinds:
                name = f"{row['fork']} {k}"
                worst[name] = max(worst.get(name, 0.0), row[k])
            for k in list(row):
                if isinstance(row[k], float):
                    row[k] = round(row[k], 4)
        print(json.dumps(result))
    print(json.dumps({"largest fork / session ratio": {k: round(v, 4) for k, v in worst.items()},
                      "physical counted for sessions of": f">= {PHYSICAL_FROM} bytes",
                      "bound": 0.05}))
    return 0 if max(worst.values()) <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
