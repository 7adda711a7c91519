"""pi session files: v3 trees, v1 order, compaction, branch summaries, corrupt lines."""

from __future__ import annotations

from pathlib import Path

from sesstree import Store
from sesstree.interop import detect_format, export_session, import_files


def test_v3_tree(store: Store, data: Path, tmp_path: Path) -> None:
    path = data / "pi_v3_tree.jsonl"
    assert detect_format(path) == "pi"
    results = import_files(store, [path])
    assert [r.session for r in results] == ["pi-abc", "pi-abc/branch-2", "pi-abc/branch-3"]
    main = store.messages("pi-abc")  # ends at e11, the last entry
    assert main[0] == {"role": "user", "content": "q1"}
    assert main[1]["content"].startswith("The following is a summary of a branch")
    assert main[2]["content"] == "Ran `pwd`\n```\n/w\n```\n\nCommand exited with code 1"
    branch = store.messages("pi-abc/branch-2")  # e7: through the compaction
    assert branch[0]["content"] == "<summary>\nwe listed files\n</summary>"
    assert [m.get("content") for m in branch[1:]] == ["done", "q2"]  # kept from e5
    aborted = store.messages("pi-abc/branch-3")  # e10: an aborted reply is not sent
    assert aborted[-1]["role"] == "user"
    meta = store.get_session_meta("pi-abc")
    assert meta is not None and meta["header"]["parentSession"] == "/x/parent.jsonl"
    assert meta["title"] == "My session"
    out = export_session(store, "pi-abc/branch-2", out=tmp_path / "o.jsonl", format="pi")[0]
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 8  # header + e0..e7


def test_v1_glued_and_truncated_lines(store: Store, data: Path) -> None:
    results = import_files(store, [data / "pi_v1.jsonl"])
    assert len(results) == 1
    problems = results[0].problems
    assert any("pi_v1.jsonl:4: 2 JSON objects on one line" in p for p in problems)
    assert any("pi_v1.jsonl:7: truncated line" in p for p in problems)
    messages = store.messages("pi-v1")
    # firstKeptEntryIndex 3 is "three": the summary replaces "one" and "two"
    assert [m["content"] for m in messages] == [
        "<summary>\ncounted\n</summary>", "three", "four", "five"]


def test_fork_collapses_onto_parent(store: Store, data: Path, tmp_path: Path) -> None:
    parent = data / "pi_v1.jsonl"
    lines = parent.read_text().splitlines()
    fork = tmp_path / "fork.jsonl"
    header = lines[0].replace('"pi-v1"', '"pi-fork"')
    fork.write_text("\n".join([header, *lines[1:3]]) + "\n")
    import_files(store, [parent])
    result = import_files(store, [fork])[0]
    assert result.session == "pi-fork" and result.new_nodes == 0


def test_real_samples(store: Store, samples: Path) -> None:
    results = import_files(store, [samples / "pi"], recursive=True)
    by = {r.session: r for r in results}
    before = by["pi-ffae836b"]
    assert before.events == 1975
    chain = store.chain(before.session)
    assert chain.types.count("compaction/marker") == 2
    assert store.messages(before.session)[0]["content"].startswith("<summary>")
    large = by["pi-d703a1a9"]
    first = store.messages(large.session)[:2]
    assert first[0]["role"] == "user" and first[1]["role"] == "user"  # aborted reply skipped
    v3 = store.messages("pi-c3391bdd")
    assert [m["role"] for m in v3] == ["user", "assistant"]
    assert "pi/model_change" in store.chain("pi-c3391bdd").types
