"""One rendering of event content to text (sesstree.text) with each reader's style gives, over
a generated corpus of every content shape, exactly what that reader's own function gave before
there was one: tests/data/text_expected.json holds those outputs (long ones as digests)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from text_corpus import contents, datas

from sesstree import text as text_module
from sesstree.cli.conversation import GREP, node_text
from sesstree.fmt import LINE, summary
from sesstree.node import Node, NodeId
from sesstree.text import FULL, TextStyle, content_text, event_text, json_text
from sesstree.web.render import MAX_SHOWN, PAGE, snippet

EXPECTED = json.loads((Path(__file__).parent / "data" / "text_expected.json").read_text())
CONTENT_STYLES = {"line": LINE, "full": FULL, "page": PAGE}


def _squeezed(text: str) -> Any:
    if len(text) > 1000:
        return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "chars": len(text)}
    return text


def test_the_corpus_is_the_one_the_expectations_were_made_from() -> None:
    assert len(contents()) == len(EXPECTED["contents"])
    assert [t for t, _ in datas()] == [row["type"] for row in EXPECTED["events"]]


@pytest.mark.parametrize("style", sorted(CONTENT_STYLES))
def test_content_renders_as_each_reader_rendered_it(style: str) -> None:
    got = [_squeezed(content_text(c, CONTENT_STYLES[style])) for c in contents()]
    assert got == [row[style] for row in EXPECTED["contents"]]


def test_grep_reads_events_as_it_did() -> None:
    for (type, data), row in zip(datas(), EXPECTED["events"], strict=True):
        node = Node(NodeId("0" * 64), None, type, data)
        grep = node_text(node)
        if row["grep"] == {"raises": "TypeError"}:
            # A number as `tool_calls` made `--grep` fail; the one rendering skips it (and
            # an event left with no text is matched on its JSON, as any other).
            without = {k: v for k, v in data.items() if k != "tool_calls"}
            text = event_text(type, without, GREP)
            assert grep == (json_text(data) if text == json_text(without) else text)
        else:
            assert _squeezed(grep) == row["grep"], (type, data)


def test_summaries_and_snippets_built_on_it_are_unchanged() -> None:
    for (type, data), row in zip(datas(), EXPECTED["events"], strict=True):
        node = Node(NodeId("0" * 64), None, type, data)
        assert summary(node, 200) == row["summary"], (type, data)
        assert summary(node, 80, with_type=True) == row["typed"], (type, data)
        assert snippet(node) == row["snippet"], (type, data)


def test_styles_name_their_differences() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u"}}, 3]
    assert content_text(parts) == "a\n\n[image u]\n\n3"
    assert content_text(parts, PAGE) == "a\n\n[image_url]"
    assert content_text(parts, LINE) == "a 3"
    assert content_text(parts, TextStyle(placeholder="none", scalars=False)) == "a"


def test_pretty_json_is_clipped_with_a_note() -> None:
    text = content_text({"k": "v" * MAX_SHOWN}, PAGE)
    whole = json_text({"k": "v" * MAX_SHOWN}, pretty=True)
    assert text == whole[:MAX_SHOWN] + f"\n… ({len(whole) - MAX_SHOWN:,} more characters)"
    assert content_text({"b": 1, "a": 2}) == '{"b":1,"a":2}'


def test_text_parts_are_read_without_a_call_each(monkeypatch: pytest.MonkeyPatch) -> None:
    # `--grep` and the search render every event they read: a call per text part doubled the
    # time of a list content, so only the other parts go through the slower path.
    asked: list[Any] = []
    slow = text_module._part_text
    monkeypatch.setattr(text_module, "_part_text", lambda p, s: asked.append(p) or slow(p, s))
    image = {"type": "image_url", "image_url": {"url": "u"}}
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": ""}, image]
    assert content_text(parts) == "a\n\n\n\n[image u]"
    assert content_text(parts, LINE) == "a"
    assert asked == [image, image]


@pytest.mark.parametrize(("data", "named", "shown"), [
    ({"step": 1, "finish_reason": "stop"}, False, "#1, stop"),
    ({"step": 1, "finish_reason": None, "incomplete": True}, False, "#1, cut short"),
    ({"step": 2, "finish_reason": None, "incomplete": True}, True, "step 2 ends, cut short"),
])
def test_a_step_cut_short_says_so(data: dict[str, Any], named: bool, shown: str) -> None:
    """A cut attempt's step/end (sess run retries it, sess proxy records it) reads as cut."""
    node = Node(NodeId(bytes(32)), None, "step/end", data)
    assert summary(node, with_type=named) == shown
