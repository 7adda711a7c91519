"""Deterministic agent traffic for the benchmarks: OpenAI chat messages as a coding agent writes them.

A turn is a user message, then a few rounds of an assistant message with tool calls
(``tool_calls`` with ``function.name`` and JSON ``arguments``) and one tool result per call,
then the assistant's answer. Tool results are 200-4,000 characters, skewed short (a clipped
lognormal, median about 700). The text is drawn word by word from a vocabulary of a few thousand
generated words with a Zipf-like distribution (frequent words short, as in a language), mixed
with identifiers, paths, numbers and code lines, and call ids are random: nothing is a repeated
phrase, so a compressor finds only what it would find in real traffic.

    from agent_traffic import Traffic
    messages = Traffic(seed=22).messages(10_000)   # the same 10,000 messages on every run
"""

from __future__ import annotations

import json
import math
import random
import string
from itertools import accumulate
from typing import Any

__all__ = ["Traffic"]

_ONSETS = ("", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
           "z", "br", "ch", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "st", "str", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "io", "ou", "y")
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "rk", "st", "x")
_KEYWORDS = ("def", "return", "if", "else", "for", "in", "import", "from", "class", "self",
             "None", "True", "False", "raise", "with", "as", "not", "and", "or", "yield", "await")
_EXTENSIONS = (".py", ".py", ".py", ".ts", ".md", ".json", ".toml", ".rs", ".go", ".yaml")
_TOOLS = ("read_file", "grep", "run_tests", "list_dir", "edit_file", "shell", "search_docs",
          "git_diff", "write_file", "find_symbol")
_ALNUM = string.ascii_letters + string.digits


class Traffic:
    """A seeded stream of agent messages; the same seed gives the same messages."""

    def __init__(self, seed: int = 22, vocabulary: int = 4000) -> None:
        self.rng = random.Random(seed)
        self.vocab = self._make_vocabulary(vocabulary)
        # Zipf-like: the word of rank r is drawn with weight 1 / r**1.05.
        self.cum = list(accumulate(1 / (r + 1) ** 1.05 for r in range(len(self.vocab))))
        self.modules = [self._ident() for _ in range(60)]
        self.files = [self._path() for _ in range(400)]
        # A file reads back the same on every read (agents re-read what they work on).
        self.contents: dict[str, list[str]] = {}
        self.working = self.files[:4]

    # -- words -------------------------------------------------------------------------------

    def _make_vocabulary(self, n: int) -> list[str]:
        rng = self.rng
        seen: set[str] = set()
        words: list[str] = []
        while len(words) < n:
            syllables = min(4, 1 + int(rng.expovariate(0.9)))
            w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                        for _ in range(syllables))
            if w and w not in seen:
                seen.add(w)
                words.append(w)
        # Frequent words are short (as in a language), with some noise in the order.
        words.sort(key=lambda w: len(w) + rng.random() * 4)
        return words

    def words(self, k: int) -> list[str]:
        """``k`` words drawn from the vocabulary's Zipf-like distribution."""
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=k)

    def _ident(self) -> str:
        a, b = self.words(2)
        style = self.rng.random()
        if style < 0.6:
            return f"{a}_{b}"
        if style < 0.85:
            return a + b.capitalize()
        return a.capitalize() + b.capitalize()

    def _path(self) -> str:
        parts = self.words(self.rng.randint(1, 3))
        return "/".join(["src", *parts[:-1], self._ident()]) + self.rng.choice(_EXTENSIONS)

    def _number(self) -> str:
        r = self.rng.random()
        if r < 0.5:
            return str(self.rng.randint(0, 999))
        if r < 0.8:
            return f"{self.rng.uniform(0, 100):.{self.rng.randint(1, 4)}f}"
        return hex(self.rng.getrandbits(32))

    def sentence(self) -> str:
        """A sentence of prose with, now and then, an identifier, a path or a number in it."""
        rng = self.rng
        words = self.words(rng.randint(5, 22))
        for _ in range(rng.randint(0, 2)):
            r = rng.random()
            token = (f"`{self._ident()}`" if r < 0.4 else rng.choice(self.files) if r < 0.7
                     else self._number())
            words.insert(rng.randrange(len(words) + 1), token)
        words[0] = words[0].capitalize()
        return " ".join(words) + rng.choice(".....?!:")

    def prose(self, sentences: int) -> str:
        return " ".join(self.sentence() for _ in range(sentences))

    def code_line(self) -> str:
        """A line of code-like text: keywords, identifiers, calls, numbers."""
        rng = self.rng
        indent = "    " * rng.randint(0, 3)
        r = rng.random()
        if r < 0.15:
            args = ", ".join(self.words(rng.randint(0, 3)))
            return f"{indent}def {self._ident()}({args}):"
        if r < 0.3:
            return f"{indent}{rng.choice(_KEYWORDS)} {self._ident()} = {self._ident()}({self._number()})"
        if r < 0.45:
            return f"{indent}return {rng.choice(self.words(3))}.{self._ident()}()"
        if r < 0.55:
            return f"{indent}# {' '.join(self.words(rng.randint(3, 10)))}"
        if r < 0.62:
            return f"from {rng.choice(self.modules)} import {self._ident()}"
        if r < 0.7:
            return ""
        words = self.words(rng.randint(2, 6))
        return f"{indent}{self._ident()}.{words[0]}({', '.join(words[1:])})"

    def _lines(self, make: Any, size: int) -> str:
        out: list[str] = []
        length = 0
        while length < size:
            line = make()
            out.append(line)
            length += len(line) + 1
        return "\n".join(out)[:size]

    # -- messages ----------------------------------------------------------------------------

    def _result_size(self) -> int:
        """200 to 4,000 characters, skewed short: a lognormal (median 700) clipped."""
        return max(200, min(4000, int(self.rng.lognormvariate(math.log(700), 0.8))))

    def _call(self) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        tool = rng.choice(_TOOLS)
        if tool in ("read_file", "edit_file", "write_file", "list_dir", "git_diff"):
            args: dict[str, Any] = {"path": rng.choice(self.working)}
            if tool == "read_file" and rng.random() < 0.3:
                args["start_line"] = rng.randint(1, 900)
            if tool == "edit_file":
                args["old"] = self.code_line().strip()
                args["new"] = self.code_line().strip()
        elif tool == "grep":
            args = {"pattern": self._ident(), "path": "src/"}
        elif tool == "find_symbol":
            args = {"name": self._ident()}
        elif tool == "run_tests":
            args = {"target": rng.choice(self.files).replace("src/", "tests/test_", 1)}
        elif tool == "shell":
            args = {"command": f"{rng.choice(('python', 'git', 'ls', 'make', 'pytest'))} "
                               + " ".join(self.words(rng.randint(1, 4)))}
        else:
            args = {"query": " ".join(self.words(rng.randint(2, 7)))}
        return tool, args

    def _content(self, path: str) -> list[str]:
        if path not in self.contents:
            self.contents[path] = [self.code_line() for _ in range(self.rng.randint(40, 400))]
        return self.contents[path]

    def _window(self, path: str, size: int, start: int | None = None) -> str:
        """Part of a file as a read shows it: numbered lines from ``start`` (or anywhere)."""
        lines = self._content(path)
        first = self.rng.randrange(len(lines)) if start is None else min(start, len(lines) - 1)
        out: list[str] = []
        length = 0
        for n in range(first, first + len(lines)):
            line = f"{n % len(lines) + 1:>5}  {lines[n % len(lines)]}"
            out.append(line)
            length += len(line) + 1
            if length >= size:
                break
        return "\n".join(out)[:size]

    def _grep_line(self) -> str:
        path = self.rng.choice(self.working)
        lines = self._content(path)
        n = self.rng.randrange(len(lines))
        return f"{path}:{n + 1}: {lines[n].strip()}"

    def _result(self, tool: str, args: dict[str, Any]) -> str:
        rng = self.rng
        size = self._result_size()
        if tool in ("read_file", "git_diff", "write_file", "edit_file"):
            return self._window(args["path"], size, args.get("start_line"))
        if tool in ("grep", "find_symbol"):
            return self._lines(self._grep_line, size)
        if tool == "list_dir":
            return self._lines(lambda: rng.choice(self.files), size)
        if tool == "run_tests":
            return self._lines(lambda: (f"{rng.choice(self.files)}::test_{self._ident()} "
                                        f"{rng.choice(('PASSED', 'PASSED', 'PASSED', 'FAILED'))}"
                                        if rng.random() < 0.8 else self.sentence()), size)
        return self._lines(lambda: self.prose(rng.randint(1, 3)), size)

    def _call_id(self) -> str:
        return "call_" + "".join(self.rng.choices(_ALNUM, k=24))

    def turn(self) -> list[dict[str, Any]]:
        """One user turn: the question, tool rounds (calls and their results), the answer."""
        rng = self.rng
        # Each turn works on a few files, the popular ones more often (Zipf over the files).
        self.working = rng.choices(self.files, cum_weights=self.cum[:len(self.files)],
                                   k=rng.randint(2, 6))
        out: list[dict[str, Any]] = [{"role": "user", "content": self.prose(rng.randint(1, 5))}]
        for _ in range(min(8, int(rng.expovariate(0.5)))):
            calls = []
            for _ in range(rng.choice((1, 1, 1, 1, 1, 1, 2, 2, 3))):
                tool, args = self._call()
                calls.append((self._call_id(), tool, args))
            msg: dict[str, Any] = {
                "role": "assistant",
                "content": self.prose(1) if rng.random() < 0.3 else None,
                "tool_calls": [{"id": cid, "type": "function",
                                "function": {"name": tool, "arguments": json.dumps(args)}}
                               for cid, tool, args in calls],
            }
            out.append(msg)
            out += [{"role": "tool", "tool_call_id": cid, "content": self._result(tool, args)}
                    for cid, tool, args in calls]
        answer = self.prose(rng.randint(1, 6))
        if rng.random() < 0.3:
            answer += "\n\n```python\n" + self._lines(self.code_line, rng.randint(80, 600)) + "\n```"
        out.append({"role": "assistant", "content": answer})
        return out

    def messages(self, n: int) -> list[dict[str, Any]]:
        """The next ``n`` messages of the stream (a turn may be cut at the end)."""
        out: list[dict[str, Any]] = []
        while len(out) < n:
            out += self.turn()
        return out[:n]
