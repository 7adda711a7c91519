"""Tools: Python functions the model may call, with a JSON schema taken from their signature.

The schema comes from the type hints (through msgspec, so ``Literal``, ``list[str]``,
``TypedDict``, msgspec ``Struct`` and defaults all work) and the description from the
docstring: its first paragraph describes the tool, an ``Args:`` section describes each
parameter. The model's arguments are validated against the same types before the function
runs; a validation error or an exception in the tool becomes a result the model can read.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints, overload

import msgspec

from .wire import parse_arguments

__all__ = ["Tool", "ToolOutcome", "as_tools", "tool"]

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ToolOutcome(msgspec.Struct, frozen=True):
    """What running a call gave: the text the model reads, and the error, if it failed."""

    content: str
    error: str | None = None


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (first paragraph) and the ``Args:`` entries of a docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if not in_args:
            continue
        if _SECTION.match(line) and not line.startswith((" ", "\t")):
            break  # Returns:, Raises:, ... end the Args section
        m = _ARG_LINE.match(line)
        if m and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif current is not None and line.strip():
            params[current] = (params[current] + " " + line.strip()).strip()
    return " ".join(summary), params


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError):
        return str(value)


class Tool:
    """A callable the model can use: name, description, JSON schema, and the function.

    Build one with the :func:`tool` decorator or directly: ``Tool(fn, name=..., description=...)``.
    Calling the Tool object calls the function unchanged, so decorated functions stay usable.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ValueError(f"tool name {self.name!r}: use 1-64 letters, digits, _ or -")
        summary, param_docs = _parse_docstring(fn.__doc__)
        self.description = description if description is not None else summary
        self.is_async = inspect.iscoroutinefunction(fn)
        self._args_type, self.parameters = self._build_schema(param_docs)

    def _build_schema(self, docs: dict[str, str]) -> tuple[type[msgspec.Struct], dict[str, Any]]:
        signature = inspect.signature(self.fn)
        try:
            hints = get_type_hints(self.fn, include_extras=True)
        except Exception as exc:  # NameError and friends from unresolvable annotations
            raise TypeError(f"tool {self.name}: cannot resolve type hints: {exc}") from exc
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for pname, param in signature.parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {self.name}: *args and **kwargs cannot be described")
            hint = hints.get(pname, Any)
            if param.default is inspect.Parameter.empty:
                fields.append((pname, hint))
            else:
                fields.append((pname, hint, param.default))
        # forbid_unknown_fields: a hallucinated parameter is an error the model should see.
        args_type = msgspec.defstruct(
            f"{self.name}_args", fields, forbid_unknown_fields=True, kw_only=True
        )
        try:
            schema = msgspec.json.schema(args_type)
        except TypeError as exc:
            msg = f"tool {self.name}: a parameter type has no JSON schema: {exc}"
            raise TypeError(msg) from exc
        defs: dict[str, Any] = schema.get("$defs", {})
        ref = schema.get("$ref", "")
        params: dict[str, Any] = dict(defs.pop(ref.rsplit("/", 1)[-1], schema))
        params.pop("title", None)
        params.setdefault("properties", {})
        params.setdefault("required", [])
        for pname, text in docs.items():
            prop = params["properties"].get(pname)
            if isinstance(prop, dict) and text:
                prop.setdefault("description", text)
        if defs:
            params["$defs"] = defs  # "#/$defs/X" refs resolve against the parameters object
        return args_type, params

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, as if it were not a tool."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"

    def schema(self) -> dict[str, Any]:
        """The tool as a chat-completions ``tools`` entry."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}

    def validate(self, raw_arguments: Any) -> tuple[dict[str, Any] | None, str | None]:
        """Check the model's arguments: ``(kwargs, None)``, or ``(None, an error to show)``."""
        parsed, problem = parse_arguments(raw_arguments)
        if parsed is None:
            return None, problem
        try:
            args = msgspec.convert(parsed, self._args_type)
        except msgspec.ValidationError as exc:
            return None, f"invalid arguments for {self.name}: {exc}"
        return {f: getattr(args, f) for f in args.__struct_fields__}, None

    def _failed(self, message: str) -> ToolOutcome:
        return ToolOutcome(f"Error: {message}", error=message)

    def run(self, raw_arguments: Any) -> ToolOutcome:
        """Validate and run, catching every exception into the outcome. Sync tools only."""
        kwargs, problem = self.validate(raw_arguments)
        if kwargs is None:
            return self._failed(problem or "invalid arguments")
        if self.is_async:
            return self._failed(f"{self.name} is async: use Agent.arun")
        try:
            return ToolOutcome(_result_text(self.fn(**kwargs)))
        except Exception as exc:
            return self._failed(f"{self.name} raised {type(exc).__name__}: {exc}")

    async def arun(self, raw_arguments: Any) -> ToolOutcome:
        """Validate and run; sync tools run as they are, async ones are awaited."""
        kwargs, problem = self.validate(raw_arguments)
        if kwargs is None:
            return self._failed(problem or "invalid arguments")
        try:
            value = self.fn(**kwargs)
            if inspect.isawaitable(value):
                value = await value
            return ToolOutcome(_result_text(value))
        except Exception as exc:
            return self._failed(f"{self.name} raised {type(exc).__name__}: {exc}")


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a :class:`Tool`: ``@tool``, ``@tool(name=...)`` or ``tool(fn)``.

    Example::

        @tool
        def talk_to(npc: str) -> str:
            \"\"\"Talk to someone in town. Returns what they say.

            Args:
                npc: who to talk to, e.g. "mayor".
            \"\"\"
    """
    if fn is not None:
        return Tool(fn, name=name, description=description)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description)

    return wrap



def as_tools(items: Any) -> list[Tool]:
    """Tools from a Tool, a plain function, or a list of either (for ``--tools``)."""
    if isinstance(items, Tool):
        return [items]
    if callable(items):
        return [Tool(items)]
    if isinstance(items, (list, tuple)):
        out: list[Tool] = []
        for item in items:
            out.extend(as_tools(item))
        return out
    raise TypeError(f"not a tool or a list of tools: {items!r}")
