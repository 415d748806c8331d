"""AgentFly-style tools, written here with postponed annotations (every hint is a string)."""

from __future__ import annotations

import asyncio
import enum
from typing import Any, Literal, Optional

import jsonschema
import pytest

from arena_envs.tools import BaseTool, ErrorCode, ToolCallError, tool
from arena_envs.tools.function_tools import FunctionTool


def run(awaitable):
    return asyncio.run(awaitable)


def parameters(some_tool):
    schema = some_tool.schema
    jsonschema.Draft202012Validator.check_schema(schema["function"]["parameters"])
    assert schema["type"] == "function"
    assert schema["function"]["name"] == some_tool.name
    return schema["function"]["parameters"]


# --- @tool on functions ---------------------------------------------------------------------


@tool(name="AdditionTool", description="Adds two numbers.")
def add(a, b: int = 1):
    """
    Adds two numbers.

    Args:
        a (int): The first number.
        b (int): The second number which should be a
            non-negative integer.

    Returns:
        int: The sum of a and b.
    """
    return a + b


def test_annotations_here_are_postponed():
    assert add.func.__annotations__ == {"b": "int"}


def test_sync_tool_schema_from_signature_and_docstring():
    assert add.name == "AdditionTool"
    assert add.schema == {
        "type": "function",
        "function": {
            "name": "AdditionTool",
            "description": "Adds two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "The first number."},
                    "b": {
                        "type": "integer",
                        "description": "The second number which should be a non-negative integer.",
                        "default": 1,
                    },
                },
                "required": ["a"],
                "additionalProperties": False,
            },
        },
    }
    parameters(add)


def test_sync_tool_is_still_a_plain_call_and_awaitable_through_acall():
    assert isinstance(add, BaseTool)
    assert add(2, 3) == 5
    assert add(a=2) == 3
    assert run(add.acall(a=2, b=5)) == 7
    assert add.__name__ == "add"
    assert "Adds two numbers" in add.__doc__


@tool(name="tool_name", description="Description about the tool")
async def custom_tool(arg1, arg2):
    """
    Description about the tool.

    Args:
        arg1: arg1 of the tool
        arg2: arg2 of the tool

    Returns:
        An observation string.
    """
    await asyncio.sleep(0)
    return f"observation {arg1} {arg2}"


def test_async_tool():
    assert run(custom_tool.acall(arg1="x", arg2=2)) == "observation x 2"
    assert run(custom_tool("x", 3)) == "observation x 3"
    params = parameters(custom_tool)
    assert params["properties"] == {
        "arg1": {"description": "arg1 of the tool"},
        "arg2": {"description": "arg2 of the tool"},
    }
    assert params["required"] == ["arg1", "arg2"]
    assert custom_tool.schema["function"]["description"] == "Description about the tool"


@tool
def search_notes(query: str, limit: int = 5) -> list[str]:
    """Find notes that mention a phrase.

    Longer explanation that
    spans two lines.

    Args:
        query: Phrase to look for.
        limit: At most this many notes.
    """
    return [query] * limit


def test_bare_decorator_takes_name_and_description_from_the_function():
    assert isinstance(search_notes, FunctionTool)
    assert search_notes.name == "search_notes"
    assert search_notes.description == ("Find notes that mention a phrase.\n\nLonger explanation that spans two lines.")
    assert parameters(search_notes)["properties"]["limit"] == {
        "type": "integer",
        "description": "At most this many notes.",
        "default": 5,
    }
    assert search_notes("a", 2) == ["a", "a"]


class Kind(enum.Enum):
    RESOURCE = "resource"
    HAZARD = "hazard"


@tool
def typed(
    count: int,
    ratio: float,
    label: str,
    flag: bool,
    ids: list[int],
    table: dict,
    scores: dict[str, float],
    maybe: int | None,
    legacy: Optional[str],  # noqa: UP045 - the old spelling is what is tested
    mode: Literal["fast", "slow"],
    level: Literal[1, 2, 3],
    pair: tuple[float, float],
    many: tuple[str, ...],
    kind: Kind,
    later: Forward,
    anything: Any,
    tags: list[str] | None = None,
    note: str = "none",
    *rest,
    **extra,
):
    """Exercise every supported hint.

    Args:
        count (int): How many.
        ratio: A fraction.
    """
    return count


class Forward(enum.IntEnum):
    """Defined after the tool that names it: resolved when the schema is built."""

    ONE = 1
    TWO = 2


def test_type_hints_map_to_json_schema():
    params = parameters(typed)
    props = params["properties"]
    assert props["count"] == {"type": "integer", "description": "How many."}
    assert props["ratio"] == {"type": "number", "description": "A fraction."}
    assert props["label"] == {"type": "string"}
    assert props["flag"] == {"type": "boolean"}
    assert props["ids"] == {"type": "array", "items": {"type": "integer"}}
    assert props["table"] == {"type": "object"}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["maybe"] == {"type": ["integer", "null"]}
    assert props["legacy"] == {"type": ["string", "null"]}
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert props["level"] == {"type": "integer", "enum": [1, 2, 3]}
    assert props["pair"] == {
        "type": "array",
        "prefixItems": [{"type": "number"}, {"type": "number"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert props["many"] == {"type": "array", "items": {"type": "string"}}
    assert props["kind"] == {"type": "string", "enum": ["resource", "hazard"]}
    assert props["later"] == {"type": "integer", "enum": [1, 2]}
    assert props["anything"] == {}
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "default": None,
    }
    assert props["note"] == {"type": "string", "default": "none"}
    assert "rest" not in props and "extra" not in props
    assert params["required"] == [
        "count", "ratio", "label", "flag", "ids", "table", "scores", "maybe", "legacy",
        "mode", "level", "pair", "many", "kind", "later", "anything",
    ]  # fmt: skip
    assert "additionalProperties" not in params  # **extra takes any other argument


def test_generated_schema_validates_arguments():
    validator = jsonschema.Draft202012Validator(parameters(search_notes))
    assert validator.is_valid({"query": "berry"})
    assert validator.is_valid({"query": "berry", "limit": 2})
    assert not validator.is_valid({})
    assert not validator.is_valid({"query": 3})
    assert not validator.is_valid({"query": "berry", "limit": "2"})
    assert not validator.is_valid({"query": "berry", "page": 2})


@tool
def documented(path, depth, names, verbose=False):
    """List a directory.

    Args:
        path (str): Directory to list.
        depth (int, optional): How deep.
        names (list[str]): Names to keep.
        verbose (bool): Say more.
    Returns:
        The listing.
    """
    return path


def test_docstring_types_stand_in_for_missing_annotations():
    props = parameters(documented)["properties"]
    assert props["path"] == {"type": "string", "description": "Directory to list."}
    assert props["depth"] == {"type": "integer", "description": "How deep."}
    assert props["names"] == {"type": "array", "items": {"type": "string"}, "description": "Names to keep."}
    assert props["verbose"] == {"type": "boolean", "description": "Say more.", "default": False}
    assert documented.description == "List a directory."


def test_schema_is_a_fresh_copy_each_time():
    add.schema["function"]["parameters"]["properties"].clear()
    assert "a" in add.schema["function"]["parameters"]["properties"]


# --- BaseTool subclasses --------------------------------------------------------------------


class APITool(BaseTool):
    name = "api_tool"
    description = "This is a tool that uses API key"

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


class AsyncLookup(BaseTool):
    name = "lookup"

    async def call(self, key: str, default: str | None = None) -> str | None:
        """Look a key up in the table.

        Args:
            key: The key.
            default: What to return when the key is missing.
        """
        await asyncio.sleep(0)
        return {"a": "1"}.get(key, default)


def test_base_tool_subclass():
    api = APITool("secret")
    assert api.name == "api_tool"
    assert api("hi") == "Call with query hi and key secret"
    assert run(api.acall(query="hi")) == "Call with query hi and key secret"
    assert api.schema["function"]["description"] == "This is a tool that uses API key"
    assert parameters(api) == {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "query to use for the tool"}},
        "required": ["query"],
        "additionalProperties": False,
    }


def test_async_base_tool_takes_its_description_from_the_docstring():
    lookup = AsyncLookup()
    assert lookup.schema["function"]["description"] == "Look a key up in the table."
    assert parameters(lookup)["properties"]["default"] == {
        "type": ["string", "null"],
        "description": "What to return when the key is missing.",
        "default": None,
    }
    assert run(lookup.acall(key="a")) == "1"
    assert run(lookup.acall(key="b", default="?")) == "?"


def test_base_tool_without_a_name_is_refused_at_class_creation():
    with pytest.raises(ValueError, match="tool name"):

        class Nameless(BaseTool):
            def call(self, x: int) -> int:
                return x


def test_intermediate_base_classes_need_no_name():
    class Base(BaseTool):
        description = "shared"

    class Concrete(Base):
        name = "concrete"

        def call(self) -> str:
            return "ok"

    assert Concrete().schema["function"]["description"] == "shared"
    assert run(Concrete().acall()) == "ok"


# --- tools as methods of an agent -----------------------------------------------------------


class CustomAgent:
    def __init__(self, special_api_key):
        self.special_api_key = special_api_key

    def processing_query(self, query):
        return query.upper()

    @tool(name="specialized_tool")
    async def specialized_tool(self, query: str) -> CustomAgent:
        """Query with the agent's key.

        Args:
            query: What to ask.
        """
        query = self.processing_query(query)
        return f"Call query {query} with special api key: {self.special_api_key}"

    @tool
    def count_words(self, text: str) -> int:
        """Count words."""
        return len(text.split())


def test_method_tools_leave_self_out_of_the_schema():
    expected = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to ask."}},
        "required": ["query"],
        "additionalProperties": False,
    }
    assert parameters(CustomAgent.specialized_tool) == expected
    assert parameters(CustomAgent("k").specialized_tool) == expected


def test_method_tools_bind_to_their_instance():
    first, second = CustomAgent("k1"), CustomAgent("k2")
    assert run(first.specialized_tool.acall(query="hi")) == "Call query HI with special api key: k1"
    assert run(second.specialized_tool("yo")) == "Call query YO with special api key: k2"
    assert first.count_words("a b c") == 3
    assert run(second.count_words.acall(text="a b")) == 2
    assert first.specialized_tool.name == "specialized_tool"


def test_unbound_method_tool_needs_its_instance():
    with pytest.raises(ToolCallError, match="self"):
        run(CustomAgent.specialized_tool.acall(query="hi"))
    assert run(CustomAgent.count_words.acall(CustomAgent("k"), text="a")) == 1


def test_tool_defined_inside_a_function_is_not_a_method():
    @tool
    def local(self, x: int) -> int:
        return x

    assert list(parameters(local)["properties"]) == ["self", "x"]


# --- argument errors and refused definitions ------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({}, "missing a required argument: 'query'"),
        ({"query": "a", "page": 2}, "unexpected argument 'page'; the arguments are query, limit"),
        ({"qeury": "a"}, "unexpected argument 'qeury'"),
    ],
)
def test_arguments_that_do_not_fit_raise_invalid_params(kwargs, words):
    with pytest.raises(ToolCallError, match=words) as caught:
        run(search_notes.acall(**kwargs))
    assert caught.value.code == ErrorCode.INVALID_PARAMS


def test_errors_inside_a_tool_propagate():
    @tool
    async def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run(broken.acall())


@pytest.mark.parametrize("name", ["", "  ", "?!", "\u2603", 3])
def test_names_without_a_letter_or_digit_are_refused(name):
    with pytest.raises(ValueError, match="tool name"):
        tool(name=name)(lambda_free)


@pytest.mark.parametrize(
    ("written", "name"),
    [("tool name", "tool_name"), ("naïve", "naive"), ("x" * 65, "x" * 64), ("Web search (beta)", "Web_search_beta"),
     ("a.b/c", "a_b_c"), ("--x--", "--x--")],
)
def test_names_that_are_not_function_names_are_made_into_one(written, name):
    made = tool(name=written, description="d")(lambda_free)
    assert made.name == name
    assert made.title == (None if written == name else written)
    assert made.schema["function"]["name"] == name
    if made.title is not None:
        assert made.schema["function"]["parameters"]["title"] == written
        jsonschema.Draft202012Validator.check_schema(made.schema["function"]["parameters"])


def test_a_base_tool_name_with_spaces_is_made_into_one():
    class Spaced(BaseTool):
        name = "api tool"

        def call(self, query: str) -> str:
            return query

    assert (Spaced.name, Spaced.title) == ("api_tool", "api tool")
    assert Spaced().schema["function"]["name"] == "api_tool"


def lambda_free(x: int) -> int:
    return x


def test_only_functions_can_be_decorated():
    with pytest.raises(TypeError, match="decorates functions"):
        tool(len)  # a builtin (print may be replaced by a library earlier in the run)
    with pytest.raises(TypeError, match="decorates functions"):
        tool(lambda_free.__call__)


def test_positional_only_parameters_are_refused():
    with pytest.raises(TypeError, match="positional-only"):

        @tool
        def positional(x: int, /) -> int:
            return x


class Unknown:
    pass


def test_hints_json_cannot_carry_are_reported_with_the_parameter():
    @tool
    def odd(thing: Unknown) -> None:
        pass

    with pytest.raises(TypeError, match="parameter 'thing'.*no JSON Schema"):
        parameters(odd)

    @tool
    def int_keys(table: dict[int, str]) -> None:
        pass

    with pytest.raises(TypeError, match="parameter 'table'.*keys are strings"):
        parameters(int_keys)


def test_unresolvable_hints_are_reported_with_the_parameter():
    @tool
    def dangling(x: NoSuchName) -> None:  # noqa: F821
        pass

    assert dangling(1) is None  # the tool still runs; only its schema needs the type
    with pytest.raises(TypeError, match="parameter 'x'.*NoSuchName"):
        parameters(dangling)


# --- stateful tools: configuration only -----------------------------------------------------


class SandboxEnv:
    def __init__(self):
        self.history = []

    async def step(self, code):
        self.history.append(code)
        return f"ran {code}"


@tool(env_cls=SandboxEnv, name="code_interpreter", description="Run code.", stateful=True, pool_size=16)
async def code_interpreter(code: str, env: SandboxEnv):
    """Run the code.

    Args:
        code (str): The code to run.
    """
    return await env.step(code)


def test_stateful_tool_stores_its_configuration_and_hides_env():
    assert (code_interpreter.stateful, code_interpreter.env_cls, code_interpreter.pool_size) == (True, SandboxEnv, 16)
    assert parameters(code_interpreter) == {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The code to run."}},
        "required": ["code"],
        "additionalProperties": False,
    }
    env = SandboxEnv()
    assert run(code_interpreter.acall(code="print(1)", env=env)) == "ran print(1)"
    assert env.history == ["print(1)"]


def test_stateful_tool_without_an_id_says_so():
    with pytest.raises(ToolCallError, match="stateful tool: call it with id=") as caught:
        run(code_interpreter.acall(code="print(1)"))
    assert caught.value.field == "id"
    with pytest.raises(ToolCallError, match="id="):
        run(code_interpreter("print(1)"))


def test_a_stateful_tool_cannot_take_a_parameter_named_id():
    with pytest.raises(TypeError, match="'id'"):

        @tool(stateful=True, env_cls=SandboxEnv)
        async def clash(id: str, env: SandboxEnv) -> str:
            return id


def test_stateless_tools_have_no_pool_configuration():
    assert (add.stateful, add.env_cls, add.pool_size) == (False, None, None)


class HuntShell(BaseTool):
    name = "shell"
    description = "Run a shell command in the hunt."
    stateful = True
    env_cls = "arena_envs/TreasureHunt-v0"

    def call(self, command: str, env: Any) -> str:
        return env.step(command)


def test_stateful_base_tool():
    shell = HuntShell()
    assert (shell.stateful, shell.env_cls, shell.pool_size) == (True, "arena_envs/TreasureHunt-v0", None)
    assert list(parameters(shell)["properties"]) == ["command"]


@pytest.mark.parametrize(
    "options",
    [
        {"stateful": True},
        {"stateful": True, "env_cls": 3},
        {"stateful": True, "env_cls": SandboxEnv, "pool_size": 0},
        {"stateful": True, "env_cls": SandboxEnv, "pool_size": True},
        {"env_cls": SandboxEnv},
        {"pool_size": 4},
    ],
)
def test_inconsistent_stateful_configuration_is_refused(options):
    with pytest.raises(ValueError):
        tool(**options)(code_interpreter.func)


def test_stateful_tool_must_take_env():
    with pytest.raises(TypeError, match="'env'"):
        tool(stateful=True, env_cls=SandboxEnv)(lambda_free)
    with pytest.raises(TypeError, match="'env'"):

        class NoEnv(BaseTool):
            name = "no_env"
            stateful = True
            env_cls = SandboxEnv

            def call(self, code: str) -> str:
                return code
