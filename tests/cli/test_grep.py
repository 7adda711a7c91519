"""``sess grep``: one line per matching node, grouped, newest first; -l, --json, --all,
filters, REVs; exit 1 when nothing matched; hostile patterns one clear line."""

from __future__ import annotations

import pytest
from cli_kit import Sess, msg

from sesstree.testing.contract.search import HOSTILE


@pytest.fixture
def sess(sess: Sess) -> Sess:
    """The CLI tests' fresh store, holding a session q forked three times (w1 goes on)."""
    s = sess
    s.ok("append", "q", "user/message", msg("user", "Where do we drop the cache_control header?"))
    s.ok("append", "q", "assistant/message", msg("assistant", "In the proxy. ECONNRESET meanwhile."))
    for name in ("w1", "w2", "w3"):
        s.ok("branch", "q", name)
    s.ok("append", "w1", "user/message", msg("user", "and the Cache itself?"))
    return s


def test_one_line_per_node_grouped_newest_first(sess: Sess) -> None:
    lines = sess.lines("grep", "cache_control")
    assert lines == ["w1~2: Where do we drop the cache_control header?  (and 3 other sessions)"]
    assert sess.lines("grep", "-i", "cache") == ["w1: and the Cache itself?"]
    assert sess.lines("grep", "-F", "ache_") == [
        "w1~2: Where do we drop the cache_control header?  (and 3 other sessions)"]
    assert len(sess.lines("grep", "-F", "ache")) == 2
    assert sess.lines("grep", "--phrase", "drop the") == [
        "w1~2: Where do we drop the cache_control header?  (and 3 other sessions)"]
    assert sess.lines("grep", "econnreset", "-i", "--role", "assistant") == [
        "w1~1: In the proxy. ECONNRESET meanwhile.  (and 3 other sessions)"]
    assert sess.lines("grep", "-l", "-i", "cache") == ["w1"]
    assert sess.lines("grep", "-l", "cache_control") == ["w1", "w3", "w2", "q"]
    assert sess.lines("grep", "cache_control", "q") == ["q~1: Where do we drop the cache_control header?"]
    assert sess.lines("grep", "-n", "1", "-F", "e") == ["w1: and the Cache itself?"]


def test_json_hits(sess: Sess) -> None:
    hits = sess.json("grep", "header")
    assert len(hits) == 1
    assert hits[0]["role"] == "user" and hits[0]["type"] == "user/message"
    assert hits[0]["match"] == "header" and hits[0]["session_count"] == 4


def test_nothing_found_exits_1_quietly(sess: Sess) -> None:
    result = sess("grep", "nowhere")
    assert result.exit_code == 1 and result.stdout == "" and result.exception is not None
    assert isinstance(result.exception, SystemExit)


def test_rewound_away_only_with_all(sess: Sess) -> None:
    sess.ok("append", "w2", "user/message", msg("user", "a rewound thought"))
    sess.ok("reset", "w2", "w2~1")
    assert sess("grep", "rewound").exit_code == 1
    [line] = sess.lines("grep", "--all", "rewound")
    assert line.endswith(": a rewound thought") and not line.startswith("w2")


def test_hostile_patterns_are_one_line_or_a_literal_match(sess: Sess) -> None:
    for pattern in [*HOSTILE, "x" * 5000]:
        for flags in ((), ("-F",), ("--phrase",), ("-i",)):
            result = sess("grep", *flags, "--", pattern)
            assert "Traceback" not in result.output
            assert result.exit_code in (0, 1, 2), result.output
            if result.exit_code != 0 and result.stderr:
                assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    sess.fail("grep", "", needles=("empty",))
    sess.fail("grep", "-F", "--phrase", "a")


def test_fsck_rebuild_index(sess: Sess) -> None:
    out = sess.ok("fsck", "--rebuild-index")
    assert "text index rebuilt: 3 nodes indexed" in out
    assert sess.lines("grep", "header")[0].startswith("w1~2:")
