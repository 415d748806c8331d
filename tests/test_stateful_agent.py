"""BaseAgent: tools as methods, bound to the instance, exposed as schemas and dispatched by call."""

import asyncio
import json
import threading

import pytest

from arena_envs.tools import BaseAgent, Decision, ErrorCode, PythonSandboxEnv, ResourcePool, ToolCallError, tool


@tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


class Notebook(BaseAgent):
    """An agent with a sync tool, an async tool and a stateful one."""

    def __init__(self, owner: str, **kwargs):
        self.owner = owner
        self.notes: list[str] = []
        super().__init__(**kwargs)

    @tool
    def remember(self, fact: str) -> str:
        """Write a fact down.

        Args:
            fact: What to remember.
        """
        self.notes.append(fact)
        return f"{self.owner} remembers {len(self.notes)} facts"

    @tool(name="recall all")
    async def recall(self, limit: int = 10) -> list[str]:
        """Read the facts back."""
        await asyncio.sleep(0)
        return self.notes[:limit]

    @tool(env_cls=PythonSandboxEnv, stateful=True, pool_size=2)
    async def python(self, code: str, env) -> str:
        """Run Python in this episode's session."""
        return await env.step(code)


class Strict(Notebook):
    @tool
    def remember(self, fact: str) -> str:  # overrides the base's tool of the same name
        """Refuse to remember."""
        return "no"


def test_method_tools_bind_to_each_agent_and_appear_in_its_schemas():
    first, second = Notebook("ann"), Notebook("bob", tools=[shout])
    assert [s["function"]["name"] for s in first.tool_schemas()] == ["remember", "recall_all", "python"]
    assert [s["function"]["name"] for s in second.tool_schemas()] == ["remember", "recall_all", "python", "shout"]
    assert first.tool_schemas()[0]["function"]["parameters"]["properties"] == {
        "fact": {"type": "string", "description": "What to remember."}}
    assert "env" not in first.tool_schemas()[2]["function"]["parameters"]["properties"]
    asyncio.run(first.call_tool("remember", {"fact": "sky is blue"}))
    assert first.notes == ["sky is blue"] and second.notes == []
    assert asyncio.run(second.call_tool("shout", {"text": "hi"})) == "HI"


def test_every_call_shape_is_dispatched():
    agent = Notebook("ann")

    async def main():
        return [
            await agent.call_tool("remember", {"fact": "a"}),
            await agent.call_tool(Decision("remember", {"fact": "b"})),
            await agent.call_tool({"name": "remember", "arguments": {"fact": "c"}}),
            await agent.call_tool({"type": "function", "function": {"name": "remember",
                                                                    "arguments": json.dumps({"fact": "d"})}}),
            await agent.call_tool('```json\n{"tool": "recall_all", "params": {"limit": 2}}\n```'),
        ]

    assert asyncio.run(main()) == ["ann remembers 1 facts", "ann remembers 2 facts", "ann remembers 3 facts",
                                   "ann remembers 4 facts", ["a", "b"]]


def test_unknown_tools_and_bad_arguments_are_clear_errors():
    agent = Notebook("ann")
    with pytest.raises(ToolCallError, match="unknown tool 'forget'; this agent's tools: remember") as caught:
        asyncio.run(agent.call_tool("forget", {}))
    assert caught.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(ToolCallError, match="unexpected argument 'fcat'") as caught:
        asyncio.run(agent.call_tool("remember", {"fcat": "x"}))
    assert caught.value.code == ErrorCode.INVALID_PARAMS
    with pytest.raises(ToolCallError, match="missing a required argument: 'fact'"):
        asyncio.run(agent.call_tool("remember", {}))
    with pytest.raises(ToolCallError, match="stateful tool: call it with id"):
        asyncio.run(agent.call_tool("python", {"code": "1"}))
    with pytest.raises(ToolCallError, match="unexpected argument 'env'"):
        asyncio.run(agent.call_tool("python", {"code": "1", "env": None}, id="x"))
    with pytest.raises(TypeError, match="unexpected arguments: model"):
        Notebook("ann", model="gpt")
    with pytest.raises(TypeError, match="tools must be tools"):
        Notebook("ann", tools=[print])
    with pytest.raises(ValueError, match="two tools .* named 'shout'"):
        Notebook("ann", tools=[shout, shout])
    assert agent.notes == []


def test_a_subclass_overrides_a_tool_of_the_same_name():
    agent = Strict("ann")
    assert [s["function"]["name"] for s in agent.tool_schemas()] == ["remember", "recall_all", "python"]
    assert asyncio.run(agent.call_tool("remember", {"fact": "x"})) == "no"


def test_stateful_method_tools_run_per_id_and_release():
    agent = Notebook("ann")
    agent.python.pool = ResourcePool(PythonSandboxEnv, size=2)

    async def main():
        await agent.call_tool("python", {"code": "x = 1"}, id="e1")
        mine = await agent.call_tool("python", {"code": "print(x)"}, id="e1")
        other = await agent.call_tool("python", {"code": "print(x)"}, id="e2")
        await agent.python.release(id="e1")
        await agent.python.release(id="e2")
        monitor = agent.python.pool.monitor()
        await agent.python.pool.aclose()
        return mine, other, monitor

    mine, other, monitor = asyncio.run(main())
    assert mine == "1\n" and "NameError" in other
    assert monitor["acquired"] == 0


def test_tool_messages_answer_every_call_of_an_assistant_message():
    agent = Notebook("ann", tools=[shout])
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "remember", "arguments": '{"fact": "x"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
        {"id": "call_3", "type": "function", "function": {"name": "recall_all", "arguments": "{}"}},
        {"id": "call_4", "type": "function", "function": {"name": "shout", "arguments": '{"text": 3'}},
    ]}
    replies = asyncio.run(agent.tool_messages(message))
    assert [r["tool_call_id"] for r in replies] == ["call_1", "call_2", "call_3", "call_4"]
    assert all(r["role"] == "tool" and isinstance(r["content"], str) for r in replies)
    assert replies[0]["content"] == "ann remembers 1 facts"
    assert replies[1]["content"].startswith("Error: unknown tool 'nope'")
    assert json.loads(replies[2]["content"]) == ["x"]
    assert replies[3]["content"].startswith("Error: ")
    assert asyncio.run(agent.tool_messages({"role": "assistant", "content": "no calls"})) == []


def test_sync_tools_may_be_called_from_worker_threads_too():
    agent = Notebook("ann")
    results = []

    def worker(n):
        results.append(asyncio.run(agent.call_tool("remember", {"fact": str(n)})))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(agent.notes) == ["0", "1", "2", "3"] and len(results) == 4
