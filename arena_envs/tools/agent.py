"""``BaseAgent``: an agent whose tools are its own methods (AgentFly's third way to define tools).

    class CustomAgent(BaseAgent):
        def __init__(self, special_api_key, **kwargs):
            self.special_api_key = special_api_key
            super().__init__(**kwargs)

        @tool(name="specialized_tool")
        async def specialized_tool(self, query: str):
            return f"Call query {query} with special api key: {self.special_api_key}"

    agent = CustomAgent("k")
    agent.tool_schemas()                                   # OpenAI function-calling schemas
    await agent.call_tool("specialized_tool", {"query": "hi"})
    await agent.call_tool(Decision("specialized_tool", {"query": "hi"}))
    await agent.tool_messages(assistant_message)           # [{"role": "tool", ...}] for its tool_calls

The whole API:

=====================================  =============================================================
``tools``                              name -> tool: the ``@tool`` methods, bound to this agent, then
                                       the ``tools=`` given to ``__init__``
``tool_schemas()``                     their OpenAI schemas (``{"type": "function", ...}``), in order
``await call_tool(call, args, id=)``   run one call: a tool name and an arguments dict, a ``Decision``,
                                       or any tool-call shape ``parse_decision`` reads (sync or async
                                       tools; ``id=`` picks a stateful tool's environment)
``await tool_messages(message, id=)``  run every call of an OpenAI assistant message, return the
                                       ``role: "tool"`` messages (errors become their text)
=====================================  =============================================================

A model-driven agent subclasses this and adds its own ``act``/``generate``; the tool
plumbing stays here.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from .decision import Decision, parse_decision
from .errors import ToolCallError
from .function_tools import BaseTool


class BaseAgent:
    """Subclass it and define tools as ``@tool`` methods; they bind to the instance."""

    def __init__(self, tools: Iterable[BaseTool] = (), **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"{type(self).__name__} got unexpected arguments: {', '.join(sorted(kwargs))}")
        extra = list(tools)
        for extra_tool in extra:
            if not isinstance(extra_tool, BaseTool):
                raise TypeError(f"tools must be tools (@tool functions or BaseTool instances), got {extra_tool!r}")
        found: dict[str, BaseTool] = {}
        for klass in reversed(type(self).__mro__):  # a subclass's method overrides its base's
            for attribute, value in vars(klass).items():
                if isinstance(value, BaseTool):
                    found[attribute] = getattr(self, attribute)  # bound to this instance
        named: dict[str, BaseTool] = {}
        for one in [*found.values(), *extra]:
            if one.name in named:
                raise ValueError(f"two tools of {type(self).__name__} are named {one.name!r}")
            named[one.name] = one
        self.tools: dict[str, BaseTool] = named

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The agent's tools in the OpenAI function-calling format."""
        return [one.schema for one in self.tools.values()]

    async def call_tool(self, call: Any, arguments: Mapping[str, Any] | None = None, *,
                        id: Hashable | None = None) -> Any:
        """Run one tool call and return the tool's result.

        ``call`` is a tool name (with ``arguments``), a :class:`Decision`, or a tool call in
        any shape :func:`parse_decision` reads (OpenAI ``tool_calls`` entries included).
        An unknown tool is ToolCallError NOT_FOUND, arguments that do not fit are
        ToolCallError INVALID_PARAMS; errors raised by the tool itself propagate.
        """
        if isinstance(call, str) and (arguments is not None or call in self.tools):
            name, params = call, dict(arguments or {})
        else:
            if arguments is not None:
                raise TypeError("arguments go with a tool name, not with a whole tool call")
            decision = call if isinstance(call, Decision) else parse_decision(call)
            name, params = decision.tool, dict(decision.params)
        chosen = self.tools.get(name)
        if chosen is None:
            known = ", ".join(self.tools) or "none"
            raise ToolCallError(f"unknown tool {name!r}; this agent's tools: {known}", code="NOT_FOUND",
                                field="tool", tool=name)
        for reserved in ("env", "id"):
            if chosen.stateful and reserved in params:
                raise ToolCallError(f"{name}: unexpected argument {reserved!r}", field=reserved, tool=name)
        if chosen.stateful:
            if id is None:
                raise ToolCallError(f"{name} is a stateful tool: call it with id=...", field="id", tool=name)
            return await chosen.acall(**params, id=id)
        return await chosen.acall(**params)

    async def tool_messages(self, message: Mapping[str, Any], *, id: Hashable | None = None) -> list[dict[str, Any]]:
        """Run the ``tool_calls`` of an OpenAI assistant message, one after another, and return
        one ``{"role": "tool", "tool_call_id", "content"}`` message per call. A call that
        fails gives its error as the content (``"Error: ..."``) and the others still run."""
        replies = []
        for entry in message.get("tool_calls") or ():
            call_id = entry.get("id") if isinstance(entry, Mapping) else None
            try:
                result = await self.call_tool(entry, id=id)
                content = result if isinstance(result, str) else _to_text(result)
            except ToolCallError as error:
                content = f"Error: {error.message}"
            except Exception as error:  # the tool's own failure is the model's to read
                content = f"Error: {type(error).__name__}: {error}"
            replies.append({"role": "tool", "tool_call_id": call_id, "content": content})
        return replies


def _to_text(result: Any) -> str:
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError):
        return str(result)
