"""The code blocks of the tool-system seed (seeds/tool_system.md), run as the seed writes them.

Only the imports are adapted (``agentfly.tools`` / ``agentfly.agents`` -> ``arena_envs.tools``),
plus three typos of the seed that Python cannot parse, each marked ``# seed typo``: an
unterminated string, a class statement without its colon, and the AdditionTool block's
stray indentation. ``PythonSandboxEnv`` is our Python session in
an OS sandbox (:mod:`arena_envs.tools.sandbox`); the seed says its ``step`` takes a code string and
returns what ran on stdout or stderr, and that is what it does.
"""

import asyncio
import traceback

import pytest

from arena_envs.tools import BaseAgent, BaseTool, PythonSandboxEnv, StatefulToolPool, ToolPool, tool

# --- "Definition", way 1: @tool ------------------------------------------------------------


@tool(name="tool name", description="Description about the tool")  # seed typo: the closing quote
async def custom_tool(arg1, arg2):
    """
    Description about the tool.

    Args:
        arg1: arg1 of the tool
        arg2: arg2 of the tool

    Returns:
        An observation string.
    """
    # tool logic here
    observation = "This is the return"
    return observation


def test_way_1_a_decorated_async_function_with_a_spaced_name():
    assert custom_tool.name == "tool_name" and custom_tool.title == "tool name"
    function = custom_tool.schema["function"]
    assert function["name"] == "tool_name"
    assert function["description"] == "Description about the tool"
    assert function["parameters"]["title"] == "tool name"
    assert function["parameters"]["required"] == ["arg1", "arg2"]
    assert asyncio.run(custom_tool("a", "b")) == "This is the return"
    assert asyncio.run(custom_tool.acall(arg1="a", arg2="b")) == "This is the return"


# --- way 2: a BaseTool subclass ----------------------------------------------------------------


class APITool(BaseTool):  # seed typo: the colon
    name="api_tool"
    description="This is a tool that uses API key"

    def __init__(self, api_key):
        self.api_key = api_key

    def call(self, query):
        """
        This is a tool that uses API key

        Args:
            query (str): query to use for the tool

        Returns:
            observation: observation string
        """

        return f"Call with query {query} and key {self.api_key}"


def test_way_2_a_base_tool_subclass():
    api = APITool("key-1")
    assert api.schema["function"]["parameters"]["properties"] == {
        "query": {"type": "string", "description": "query to use for the tool"}}
    assert asyncio.run(api.acall(query="weather")) == "Call with query weather and key key-1"


# --- way 3: tools as methods of a BaseAgent ----------------------------------------------------


class CustomAgent(BaseAgent):
    def __init__(self, special_api_key, **kwargs):
        self.special_api_key = special_api_key
        super().__init__(**kwargs)

    def processing_query(self, query):
        return query

    @tool(name="specialized_tool")
    async def specialized_tool(self, query: str):
        query = self.processing_query(query)
        result = f"Call query {query} with special api key: {self.special_api_key}"

        return result


def test_way_3_agent_methods_bind_to_the_agent_and_are_dispatched():
    first, second = CustomAgent("k1"), CustomAgent("k2", tools=[APITool("k3")])
    assert [s["function"]["name"] for s in first.tool_schemas()] == ["specialized_tool"]
    assert [s["function"]["name"] for s in second.tool_schemas()] == ["specialized_tool", "api_tool"]
    assert first.tool_schemas()[0]["function"]["parameters"]["properties"] == {"query": {"type": "string"}}
    assert asyncio.run(first.call_tool("specialized_tool", {"query": "hi"})) == \
        "Call query hi with special api key: k1"
    assert asyncio.run(second.specialized_tool("yo")) == "Call query yo with special api key: k2"
    assert asyncio.run(second.call_tool('{"name": "api_tool", "arguments": {"query": "q"}}')) == \
        "Call with query q and key k3"


# --- Non-stateful tool ------------------------------------------------------------------------


@tool(name="AdditionTool", description="Adds two numbers.")  # seed typo: indented one level in the seed
def add(a, b: int = 1):
    """
    Adds two numbers.

    Args:
        a (int): The first number.
        b (int): The second number which should be a non-negative integer.

    Returns:
        int: The sum of a and b.
    """
    return a + b


def test_non_stateful_tool():
    assert add(2, 3) == 5
    assert asyncio.run(add.acall(a=2)) == 3
    assert add.schema["function"]["parameters"]["required"] == ["a"]


# --- Stateful tool and Isolation --------------------------------------------------------------


@tool(env_cls=PythonSandboxEnv, name="code_interpreter", description="Run the code in docker container and return the output from stdout or stderr", stateful=True, pool_size=16)  # noqa: E501
async def code_interpreter(code: str, env: PythonSandboxEnv):
    """
    Run the code in docker container and return the output from stdout or stderr
    Args:
        code (str): The code to run.
    Returns:
        str: The output from stdout or stderr
    """
    try:
        obs = await env.step(code)
        return obs
    except Exception as e:
        return f"Error: {str(e)}\n{traceback.format_exc()}"


def test_stateful_code_interpreter_with_id_and_release_as_the_seed_writes_them():
    async def main():
        result = await code_interpreter("print('Hello World')", id="12345")
        await code_interpreter.release(id="12345")
        return result

    assert asyncio.run(main()) == "Hello World\n"
    assert code_interpreter.pool.monitor()["acquired"] == 0


def test_same_id_same_session_new_id_its_own_session_release_clears_it():
    async def main():
        await code_interpreter("x = 6 * 7", id="a")
        same = await code_interpreter("print(x)", id="a")
        other = await code_interpreter("print(x)", id="b")
        held = code_interpreter.pool.monitor()
        await code_interpreter.release(id="a")
        await code_interpreter.release(id="b")
        after = await code_interpreter("print(x)", id="a")  # a new session for a fresh "a"
        await code_interpreter.release(id="a")
        return same, other, held, after

    same, other, held, after = asyncio.run(main())  # a second event loop for the same pool
    assert same == "42\n"
    assert "NameError: name 'x' is not defined" in other
    assert held["acquired"] == 2 and held["size"] == 16
    assert "NameError" in after


def test_code_interpreter_schema_hides_env():
    assert code_interpreter.schema["function"]["parameters"] == {
        "type": "object", "properties": {"code": {"type": "string", "description": "The code to run."}},
        "required": ["code"], "additionalProperties": False}


def test_tool_pool_of_a_stateful_tool_or_an_env_class_is_the_generic_pool():
    async def main():
        by_tool = ToolPool(code_interpreter, size=2)
        by_class = ToolPool(PythonSandboxEnv, size=2)
        printed = await by_tool.call({"code": "print(1 + 1)"}, id="t")
        stepped = await by_class.call("print(2 + 2)", id="c")
        monitors = by_tool.monitor(), by_class.monitor()
        await by_tool.release("t")
        await by_class.release("c")
        await by_class.aclose()
        await by_tool.envs.aclose()
        return by_tool, printed, stepped, monitors

    by_tool, printed, stepped, (tool_monitor, class_monitor) = asyncio.run(main())
    assert isinstance(by_tool, StatefulToolPool)
    assert (printed, stepped) == ("2\n", "4\n")
    assert tool_monitor["ids"] == {"t": 0} and class_monitor["ids"] == {"c": 0}


def test_tool_pool_of_a_plain_tool_says_it_needs_no_pool():
    with pytest.raises(TypeError, match="not a stateful tool"):
        ToolPool(add)
