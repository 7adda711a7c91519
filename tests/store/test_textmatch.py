"""What an index keeps of a text: its folded tokens, the same runs of word characters
whichever way they are found (the ASCII fast path and the general one)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from sesstree.store.textmatch import fold, tokens

_WORD = re.compile(r"\w+")


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_text_gives_the_runs_of_word_characters_folded(text: str) -> None:
    assert tokens(text) == _WORD.findall(fold(text))


@given(st.text())
def test_any_text_gives_the_runs_of_word_characters_of_its_fold(text: str) -> None:
    assert tokens(text) == _WORD.findall(fold(text))


def test_identifiers_and_errors_stay_one_token_each() -> None:
    assert tokens("Set cache_control; got ECONNRESET (errno=104)\x1f\tdone") == [
        "set", "cache_control", "got", "econnreset", "errno", "104", "done"]
    assert tokens("Straße Café 東京") == ["strasse", "cafe", "東京"]
