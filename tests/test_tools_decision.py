"""Decision and the parser of raw model output."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arena_envs.tools import Decision, ErrorCode, ToolCallError, parse_decision
from arena_envs.tools.decision import MAX_OUTPUT_CHARS, parse_call

MOVE = Decision("move_to", {"target": [12.0, 0.0, 6.0], "speed": 1.5})


# --- Decision -------------------------------------------------------------------------------


def test_decision_fields_and_defaults():
    decision = Decision(tool="collect", params={"target_name": "Berry1"}, reasoning="Nearest, in range")
    assert (decision.tool, decision.params, decision.reasoning) == (
        "collect",
        {"target_name": "Berry1"},
        "Nearest, in range",
    )
    assert Decision("query_inventory").params == {}
    assert Decision("a").params is not Decision("b").params


def test_idle_helper():
    assert Decision.idle() == Decision(tool="idle", params={})
    assert Decision.idle().reasoning is None
    assert Decision.idle("nothing in sight").reasoning == "nothing in sight"


def test_to_dict_and_from_dict_round_trip():
    assert MOVE.to_dict() == {"tool": "move_to", "params": {"target": [12.0, 0.0, 6.0], "speed": 1.5}}
    with_reason = Decision("idle", {}, "waiting")
    assert with_reason.to_dict() == {"tool": "idle", "params": {}, "reasoning": "waiting"}
    for decision in (MOVE, with_reason, Decision.idle()):
        assert Decision.from_dict(decision.to_dict()) == decision
        assert Decision.from_dict(json.loads(json.dumps(decision.to_dict()))) == decision


def test_to_dict_is_a_deep_copy():
    data = MOVE.to_dict()
    data["params"]["target"].append(99)
    assert MOVE.params["target"] == [12.0, 0.0, 6.0]


def test_from_dict_fills_missing_params():
    assert Decision.from_dict({"tool": "idle"}) == Decision.idle()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "tool"),
        ({"tool": 3}, "tool"),
        ({"tool": ""}, "tool"),
        ({"tool": "idle", "params": [1]}, "params"),
        ({"tool": "idle", "params": None}, "params"),
        ({"tool": "idle", "reasoning": 5}, "reasoning"),
        ({"tool": "idle", "param": {}}, "param"),
        ({"name": "idle"}, "name"),
    ],
)
def test_from_dict_is_strict(data, field):
    with pytest.raises(ToolCallError) as caught:
        Decision.from_dict(data)
    assert caught.value.field == field
    assert caught.value.code == ErrorCode.INVALID_PARAMS


def test_from_dict_refuses_non_objects():
    with pytest.raises(ToolCallError, match="must be an object"):
        Decision.from_dict(["idle"])


# --- parse_decision: what it reads ----------------------------------------------------------

MOVE_JSON = '{"tool": "move_to", "params": {"target": [12.0, 0.0, 6.0], "speed": 1.5}}'
MOVE_ARGS = {"target": [12.0, 0.0, 6.0], "speed": 1.5}


class SdkObject:
    """Stands in for an OpenAI SDK object, which dumps itself to a dict."""

    def __init__(self, data):
        self.data = data

    def model_dump(self):
        return self.data


READABLE = {
    "canonical dict": {"tool": "move_to", "params": MOVE_ARGS},
    "plain JSON": MOVE_JSON,
    "JSON with whitespace": f"\n\n   {MOVE_JSON}\n",
    "bytes": MOVE_JSON.encode(),
    "fenced json block": f"Here is my move:\n```json\n{MOVE_JSON}\n```\n",
    "fenced block without language": f"```\n{MOVE_JSON}\n```",
    "unclosed fence": f"```json\n{MOVE_JSON}",
    "embedded in prose": f"The berry is 12 units east, so {MOVE_JSON} should get me there.",
    "inside XML tags": f"<tool_call>\n{MOVE_JSON}\n</tool_call>",
    "after braces that are not JSON": f"Set {{x}} aside; {{not json}}. {MOVE_JSON}",
    "after JSON that is not a call": f'Observation: {{"health": 100}}. Call: {MOVE_JSON}',
    "nested in an object": f'{{"answer": {MOVE_JSON}}}',
    "encoded twice": json.dumps(MOVE_JSON),
    "name/arguments": {"name": "move_to", "arguments": MOVE_ARGS},
    "tool_name/parameters": {"tool_name": "move_to", "parameters": MOVE_ARGS},
    "action/args": {"action": "move_to", "args": MOVE_ARGS},
    "action/action_input": '{"action": "move_to", "action_input": ' + json.dumps(MOVE_ARGS) + "}",
    "function/arguments": {"function": "move_to", "arguments": MOVE_ARGS},
    "arguments as a JSON string": {"name": "move_to", "arguments": json.dumps(MOVE_ARGS)},
    "flat parameters": {"tool": "move_to", **MOVE_ARGS},
    "tool name padded": {"tool": "  move_to ", "params": MOVE_ARGS},
    "OpenAI function": {"type": "function", "function": {"name": "move_to", "arguments": json.dumps(MOVE_ARGS)}},
    "OpenAI message": {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "move_to", "arguments": json.dumps(MOVE_ARGS)},
            }
        ],
    },
    "OpenAI message as JSON": json.dumps(
        {"tool_calls": [{"type": "function", "function": {"name": "move_to", "arguments": json.dumps(MOVE_ARGS)}}]}
    ),
    "OpenAI legacy function_call": {
        "role": "assistant",
        "function_call": {"name": "move_to", "arguments": json.dumps(MOVE_ARGS)},
    },
    "OpenAI Responses item": {
        "type": "function_call",
        "call_id": "c1",
        "name": "move_to",
        "arguments": json.dumps(MOVE_ARGS),
    },
    "OpenAI SDK object": SdkObject(
        {"id": "c1", "type": "function", "function": {"name": "move_to", "arguments": json.dumps(MOVE_ARGS)}}
    ),
    "chat message answered in text": {"role": "assistant", "content": f"Moving.\n```json\n{MOVE_JSON}\n```"},
    "Anthropic tool_use block": {"type": "tool_use", "id": "toolu_1", "name": "move_to", "input": MOVE_ARGS},
    "Anthropic message": {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Heading east."},
            {"type": "tool_use", "id": "toolu_1", "name": "move_to", "input": MOVE_ARGS},
        ],
    },
}


@pytest.mark.parametrize("raw", READABLE.values(), ids=READABLE.keys())
def test_reads_common_shapes(raw):
    decision = parse_decision(raw)
    assert decision.tool == "move_to"
    assert decision.params == MOVE_ARGS


def test_a_decision_passes_through():
    assert parse_decision(MOVE) is MOVE


@pytest.mark.parametrize(
    "raw",
    [
        '{"tool": "idle"}',
        '{"name": "idle", "arguments": ""}',
        '{"name": "idle", "arguments": null}',
        '{"name": "idle", "arguments": "  "}',
        '{"type": "function_call", "name": "idle", "call_id": "c2"}',
        '{"type": "tool_use", "id": "t", "name": "idle"}',
    ],
)
def test_calls_without_arguments_have_empty_params(raw):
    assert parse_decision(raw) == Decision.idle()


def test_reasoning_is_kept():
    assert parse_decision('{"tool": "idle", "reasoning": "nothing to do"}').reasoning == "nothing to do"
    assert parse_decision({"thought": "wait", "action": "idle"}).reasoning == "wait"
    assert parse_decision({"reason": "wait", "tool_call": {"name": "idle"}}).reasoning == "wait"
    flat = parse_decision({"tool": "collect", "target_name": "Berry1", "reasoning": "close"})
    assert flat == Decision("collect", {"target_name": "Berry1"}, "close")


def test_parsed_params_are_not_validated_here():
    assert parse_decision('{"tool": "fly", "params": {"to": "moon"}}') == Decision("fly", {"to": "moon"})


def test_the_first_call_in_prose_wins():
    text = 'First {"tool": "collect", "params": {"target_name": "Berry1"}} then {"tool": "idle"}'
    assert parse_decision(text).tool == "collect"


def test_long_output_within_the_limit_is_searched():
    text = "x" * (MAX_OUTPUT_CHARS - 200) + MOVE_JSON
    assert parse_decision(text).params == MOVE_ARGS


@given(
    tool=st.text(min_size=1).filter(str.strip).map(str.strip),
    params=st.dictionaries(st.text(), st.one_of(st.none(), st.booleans(), st.integers(), st.text()), max_size=3),
    reasoning=st.one_of(st.none(), st.text()),
)
def test_round_trips_through_json_text(tool, params, reasoning):
    decision = Decision(tool, params, reasoning)
    assert parse_decision(json.dumps(decision.to_dict())) == decision
    assert parse_decision(f"Answer:\n```json\n{json.dumps(decision.to_dict(), indent=2)}\n```") == decision


# --- parse_decision: what it refuses --------------------------------------------------------

GARBAGE = {
    "empty string": "",
    "only whitespace": " \n\t ",
    "None": None,
    "integer": 42,
    "float": 3.5,
    "boolean": True,
    "list": [{"tool": "idle"}],
    "object()": object(),
    "JSON number": "42",
    "JSON null": "null",
    "JSON array": "[1, 2, 3]",
    "JSON string of prose": '"walk north"',
    "prose with a tool name in it": "I will move_to the berry",
    "JSON array of calls": '[{"tool": "idle"}]',
    "truncated JSON": '{"tool": "move_to", "params": {"target": [1, 0,',
    "truncated in a fence": '```json\n{"tool": "move_to", "params": {"targ',
    "prose without JSON": "I think I should walk toward the berry.",
    "JSON without a tool": '{"x": 1, "y": 2}',
    "tool is not a string": '{"tool": 5}',
    "tool is empty": '{"tool": "  "}',
    "tool is null": '{"name": null, "arguments": {}}',
    "params are a list": '{"tool": "move_to", "params": [1, 0, 2]}',
    "params are a number": '{"tool": "move_to", "params": 3}',
    "arguments are bad JSON": '{"name": "move_to", "arguments": "{\\"target\\": [1, 0"}',
    "arguments are a JSON array": '{"name": "move_to", "arguments": "[1, 0, 2]"}',
    "two tool calls": {
        "tool_calls": [
            {"function": {"name": "idle", "arguments": "{}"}},
            {"function": {"name": "collect", "arguments": "{}"}},
        ]
    },
    "tool_calls not a list": {"tool_calls": {"name": "idle"}},
    "tool_calls of strings": {"tool_calls": ["idle"]},
    "empty message": {"role": "assistant", "content": None, "tool_calls": []},
    "message without a call": {"role": "assistant", "content": "I'm not sure what to do."},
    "Anthropic message without tool_use": {"role": "assistant", "content": [{"type": "text", "text": "Hmm."}]},
    "not UTF-8": b"\xff\xfe{",
    "too long": "x" * (MAX_OUTPUT_CHARS + 1),
    "too long even if valid": " " * MAX_OUTPUT_CHARS + '{"tool": "idle"}',
    "deeply nested arrays": "[" * 100_000,
    "deeply nested objects": '{"a":' * 19_999,
    "many braces": "{" * 99_999,
    "deeply nested wrappers": json.dumps(
        {"function": {"function": {"function": {"function": {"function": {"function": {"name": "idle"}}}}}}}
    ),
    "SDK object dumping a list": SdkObject([{"tool": "idle"}]),
}


@pytest.mark.parametrize("raw", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_raises_a_clear_tool_call_error(raw):
    with pytest.raises(ToolCallError) as caught:
        parse_decision(raw)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.code == ErrorCode.INVALID_PARAMS
    assert len(error.message) > 10
    assert len(error.message) < 300
    assert error.to_dict()["error_code"] == "INVALID_PARAMS"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("", "empty"),
        ("x" * (MAX_OUTPUT_CHARS + 1), "too long"),
        ('{"tool": "move_to", "params": {"target": [1,', "not valid JSON"),
        ("I will walk north.", "no JSON tool call found in model output 'I will walk north.'"),
        ("[1, 2]", "got a JSON array"),
        ('{"x": 1}', "no tool name found"),
        ('{"name": "move_to", "arguments": "{bad"}', "arguments of 'move_to' are not valid JSON"),
        ({"tool_calls": [{"name": "idle"}, {"name": "idle"}]}, "exactly one tool call per step, got 2"),
        (None, "expected model output as text, a dict or a Decision, got NoneType"),
        ('{"tool": 5}', "tool name must be a non-empty string, got 5"),
    ],
)
def test_error_messages_say_what_is_wrong(raw, words):
    with pytest.raises(ToolCallError, match=words.replace("[", r"\[").replace("(", r"\(")):
        parse_decision(raw)


@given(st.text(max_size=300))
def test_any_text_gives_a_decision_or_a_tool_call_error(text):
    try:
        decision = parse_decision(text)
    except ToolCallError as error:
        assert error.code == ErrorCode.INVALID_PARAMS
    else:
        assert isinstance(decision.tool, str) and decision.tool
        assert isinstance(decision.params, dict)


JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=5),
        st.sampled_from(["idle", "move_to", "tool", "name", "function", "arguments", "tool_calls"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "tool",
                    "name",
                    "action",
                    "function",
                    "params",
                    "arguments",
                    "tool_calls",
                    "content",
                    "role",
                    "type",
                    "reasoning",
                    "x",
                ]
            ),  # fmt: skip
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@given(JSON)
def test_any_json_value_gives_a_decision_or_a_tool_call_error(value):
    for raw in (value, json.dumps(value)):
        try:
            decision = parse_decision(raw)
        except ToolCallError as error:
            assert error.code == ErrorCode.INVALID_PARAMS
        else:
            assert isinstance(decision.tool, str) and decision.tool
            assert isinstance(decision.params, dict)


# --- parse_call: the env loop's reader --------------------------------------------------

PLAIN_AND_NOT = {
    **READABLE,
    "plain with reasoning": {"tool": "collect", "params": {"target_name": "Berry1"}, "reasoning": "near"},
    "plain without params": {"tool": "idle"},
    "plain with padded name": {"tool": " idle ", "params": {}},
    "plain with blank name": {"tool": "  ", "params": {}},
    "plain with params not an object": {"tool": "idle", "params": [1]},
    "plain with reasoning not text": {"tool": "idle", "params": {}, "reasoning": 3},
    "a Decision": Decision("move_to", {"target": [1, 0, 2]}),
}


@pytest.mark.parametrize("raw", [*PLAIN_AND_NOT.values(), *GARBAGE.values()],
                         ids=[*PLAIN_AND_NOT, *(f"garbage: {name}" for name in GARBAGE)])
def test_parse_call_reads_exactly_what_parse_decision_reads(raw):
    try:
        decision = parse_decision(raw)
    except ToolCallError as error:
        with pytest.raises(ToolCallError) as caught:
            parse_call(raw)
        assert (caught.value.code, caught.value.message) == (error.code, error.message)
    else:
        assert parse_call(raw) == (decision.tool, decision.params)


@pytest.mark.parametrize(("raw", "expected"), [
    ({"tool": " idle ", "params": {}}, ("idle", {})),
    ({"tool": "collect", "params": {"target_name": "Berry1"}, "reasoning": "near"},
     ("collect", {"target_name": "Berry1"})),
    ({"tool": "query_inventory"}, ("query_inventory", {})),
    ('{"tool": "move_to", "params": {"target": [1, 0, 2]}}', ("move_to", {"target": [1, 0, 2]})),
])
def test_parse_call_gives_the_tool_stripped_and_its_params(raw, expected):
    assert parse_call(raw) == expected


@pytest.mark.parametrize("raw", [{"tool": "  ", "params": {}}, {"tool": "idle", "params": [1]}])
def test_parse_call_refuses_a_plain_shape_with_bad_parts(raw):
    with pytest.raises(ToolCallError):
        parse_call(raw)


@pytest.mark.parametrize("fields, field", [
    ((None,), "tool"), (("",), "tool"), (("  ",), "tool"), ((7,), "tool"), ((["idle"],), "tool"),
    (("idle", None), "params"), (("idle", [1]), "params"), (("idle", "{}"), "params"),
    (("idle", {}, 3), "reasoning"), (("idle", {}, {"why": 1}), "reasoning"),
])
def test_a_caller_built_decision_of_wrong_types_gets_a_clear_error(fields, field):
    with pytest.raises(ToolCallError) as refused:
        Decision(*fields)
    assert refused.value.field == field and refused.value.code == ErrorCode.INVALID_PARAMS
    assert f"'{field}' must be" in refused.value.message


def test_a_decision_changed_after_it_was_made_is_refused_where_it_is_read():
    import asyncio

    from arena_envs.tools import ToolPool

    decision = Decision("idle")
    decision.tool = None  # a slotted dataclass does not check assignments
    with pytest.raises(ToolCallError, match="'tool' must be a non-empty string"):
        parse_decision(decision)

    async def main():  # through the pool: a failed result for that call, not a TypeError
        pool = ToolPool(size=1)
        step = await pool.call(decision, id="a")
        result = step.observation.last_action_result
        assert not result.success and result.error_code == "INVALID_PARAMS" and "'tool'" in result.error_message

    asyncio.run(main())


# --- the embedded-call search is linear in the text's length --------------------------------


def test_a_call_is_found_inside_valid_json_and_inside_an_object_that_does_not_decode():
    assert parse_decision('{"reply": {"note": 1, "call": [{"tool": "idle"}]}}') == Decision("idle")
    assert parse_decision('I think {oops, then {"tool": "collect", "params": {"target_name": "Berry1"}} }') == (
        Decision("collect", {"target_name": "Berry1"}))
    assert parse_decision('{"a": "{\\"tool\\": \\"not me\\"}", "b": {"tool": "idle"}}') == Decision("idle")


STALL_TEXTS = {  # within the limits checked first: 100,000 characters, 32 levels
    "never closed": '{"a":[' * 15 + "1," * 40_000,
    "balanced, each failing at its end": '{"a":[' * 15 + "1," * 40_000 + "]x}" * 15,
    "many siblings that fail late": ('{"a":[' + "1," * 30 + "x]}") * 1_000,
}


@pytest.mark.parametrize("kind", STALL_TEXTS)
def test_the_embedded_call_search_decodes_a_bounded_number_of_characters(kind, monkeypatch):
    """Issue 24: a decode from each of up to 200 braces cost 0.7 s on a 63 KB reply. Now the
    characters the search decodes are at most four times the text's length (plus a constant)."""
    from arena_envs.tools import decision

    text = STALL_TEXTS[kind] + ' {"tool": "idle"}'
    decoded = []

    class CountingDecoder:
        def raw_decode(self, s, start):
            try:
                value, end = json.JSONDecoder().raw_decode(s, start)
            except ValueError as error:
                decoded.append(error.pos - start)
                raise
            decoded.append(end - start)
            return value, end

    monkeypatch.setattr(decision, "_DECODER", CountingDecoder())
    try:
        result = parse_decision(text)
    except ToolCallError:
        result = None
    assert sum(decoded) <= decision._EMBEDDED_BUDGET_FACTOR * len(text) + 4096, kind
    if kind != "balanced, each failing at its end":  # there the budget runs out before the call
        assert result == Decision("idle")
