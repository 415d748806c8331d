"""What the parsers say about a call they cannot read, pinned exactly (what an agent reads is all
it has to correct its call with), and the edges of each format: several calls, fences, SDK objects.
Also: the search for a call inside broken JSON gives up once it has read the text a few times over."""

import json

import pytest
from openai.types.chat import ChatCompletionMessageToolCall

from arena_envs.llm.parsers import MAX_CALLS, parse_reply
from arena_envs.tools import ToolCallError
from arena_envs.tools.decision import MAX_JSON_DEPTH, MAX_NAME_CHARS, Decision, is_plain_call, parse_decision

CAT = [{"type": "function", "function": {"name": "cat", "parameters": {"properties": {"file": {"type": "string"}}}}}]


# -- the tool layer: Decision and parse_decision -------------------------------------------------


@pytest.mark.parametrize(("data", "message", "field"), [
    (5, "a decision must be an object, got number", None),
    ({"tool": "idle", "params": [1]}, "'params' must be an object, got array", "params"),
    ({"tool": "idle", 7: "x"}, "unknown decision key(s): 7", "7"),
    ({"tool": "idle", "k" * (MAX_NAME_CHARS + 36): "x"},
     f"unknown decision key(s): {'k' * 32}... (68 more characters)", f"{'k' * 32}... (68 more characters)"),
])
def test_a_decision_of_another_shape_is_refused_naming_what_was_found(data, message, field):
    with pytest.raises(ToolCallError) as caught:
        Decision.from_dict(data)
    assert (caught.value.message, caught.value.field) == (message, field)


@pytest.mark.parametrize("call", [
    '{"tool": "idle", "params": ' + "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1) + "}",
    {"tool": "idle", "params": "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)},
])
def test_json_too_deep_is_refused_naming_the_limit_and_the_params(call):
    with pytest.raises(ToolCallError) as caught:
        parse_decision(call)
    assert caught.value.message == (f"tool call is nested too deeply: more than {MAX_JSON_DEPTH} levels of "
                                    "objects and arrays")
    assert caught.value.field == "params"


def nested_lists(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_json_as_deep_as_the_limit_is_read_and_one_level_more_is_refused():
    def call(depth: int) -> str:  # the call's object and its params' object, then lists
        return '{"tool": "idle", "params": {"a": ' + "[" * (depth - 2) + "]" * (depth - 2) + "}}"

    assert parse_decision(call(MAX_JSON_DEPTH)).params == {"a": nested_lists(MAX_JSON_DEPTH - 2)}
    with pytest.raises(ToolCallError, match="nested too deeply"):
        parse_decision(call(MAX_JSON_DEPTH + 1))


def test_the_search_inside_broken_json_reads_the_text_a_few_times_then_gives_up():
    """A call inside one broken object is found; inside two, in a long reply, the search has
    read the text four times over (each level scanned, then decoded) and stops there."""
    filler = "x" * 40_000
    once = "Plan: { " + filler + ' {"tool": "idle"} }'
    assert parse_decision(once) == Decision.idle()
    twice = "Plan: { { " + filler + ' {"tool": "idle"} } }'
    with pytest.raises(ToolCallError, match="^no JSON tool call found in model output"):
        parse_decision(twice)
    short = "Plan: { { { " + "x" * 100 + ' {"tool": "idle"} } } }'  # a short reply: a few KB of leeway
    assert parse_decision(short) == Decision.idle()



def test_a_call_inside_a_broken_object_right_after_a_quoted_word_is_found():
    """The search goes into a broken object from just inside its brace: the quote before the
    brace closes a string of the prose, and must not open one."""
    assert parse_decision('Say "a"{ broken {"tool": "idle"} }') == Decision.idle()


def test_only_a_call_in_the_plain_shape_is_plain():
    assert is_plain_call({"tool": "idle", "params": {}, "reasoning": "why not"})
    assert is_plain_call({"tool": " idle "})
    for data in ({"tool": "idle", "target": "x"}, {"tool": "", "params": {}}, {"tool": "idle", "params": []},
                 {"name": "idle"}, '{"tool": "idle"}', None):
        assert not is_plain_call(data), data


# -- parse_reply: OpenAI tool_calls --------------------------------------------------------------


def test_tool_calls_that_are_not_a_list_are_an_openai_failure_saying_so():
    result = parse_reply({"role": "assistant", "tool_calls": {"id": "c"}})
    assert (result.format, result.calls, result.error) == ("openai", [], "'tool_calls' must be a list")


def test_each_entry_that_is_not_a_call_is_unreadable_and_the_calls_after_it_are_still_read():
    entries = [5, {"id": "b", "type": "function"},
               {"id": "c", "type": "function", "function": {"name": "pwd", "arguments": "{}"}}]
    calls = parse_reply({"role": "assistant", "tool_calls": entries}).calls
    assert [(c.name, c.id, c.error) for c in calls] == [
        (None, None, "a tool call must be an object"),
        (None, "b", "a tool call needs a 'function' object"),
        ("pwd", "c", None)]
    assert [c.raw for c in calls] == [json.dumps(entry) for entry in entries]


def test_sdk_tool_call_objects_in_a_plain_message_are_read():
    entry = ChatCompletionMessageToolCall.model_validate(
        {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": '{"file": "start.txt"}'}})
    [call] = parse_reply({"role": "assistant", "tool_calls": [entry]}).calls
    assert (call.name, call.arguments, call.id) == ("cat", {"file": "start.txt"}, "c1")


# -- parse_reply: text formats -----------------------------------------------------------------


def test_an_empty_hermes_block_does_not_hide_the_blocks_after_it():
    result = parse_reply('<tool_call></tool_call><tool_call>{"name": "pwd", "arguments": {}}</tool_call>')
    assert [(c.name, c.ok) for c in result.calls] == [(None, False), ("pwd", True)]
    assert result.dropped == 0 and result.telemetry()["calls_dropped"] == 0


def test_a_hermes_block_may_fence_its_json_with_or_without_a_language():
    for fence in ("```json", "```"):
        text = f'<tool_call>\n{fence}\n{{\n"name": "pwd",\n"arguments": {{}}\n}}\n```\n</tool_call>'
        assert [(c.name, c.ok) for c in parse_reply(text).calls] == [("pwd", True)], fence


def test_a_broken_call_keeps_its_tool_name_whatever_its_case():
    [call] = parse_reply('<tool_call>{"name": "Cat", "arguments": {"file": }</tool_call>').calls
    assert call.name == "Cat" and call.arguments is None and call.error.startswith("not valid JSON")


def test_an_xml_string_parameter_loses_only_the_newlines_around_it():
    for value in ("  XMAS.txt ", "XMAS.txt  "):
        text = f"<tool_call>\n<function=cat>\n<parameter=file>\n{value}\n</parameter>\n</function>\n</tool_call>"
        assert [(c.name, c.arguments) for c in parse_reply(text, CAT).calls] == [("cat", {"file": value})]


def test_mistral_calls_past_the_limit_are_counted_as_dropped():
    result = parse_reply("[TOOL_CALLS]pwd[ARGS]{}" * (MAX_CALLS + 1))
    assert len(result.calls) == MAX_CALLS and result.dropped == 1
    exactly = parse_reply("[TOOL_CALLS]pwd[ARGS]{}" * MAX_CALLS)
    assert len(exactly.calls) == MAX_CALLS and exactly.dropped == 0


def test_mistral_segments_without_a_name_or_json_are_unreadable_saying_why():
    [nameless] = parse_reply("[TOOL_CALLS]!!![ARGS]{}").calls
    assert (nameless.name, nameless.ok, nameless.error, nameless.raw) == (
        None, False, "no tool name before [ARGS]", "!!![ARGS]{}")
    [bare] = parse_reply("[TOOL_CALLS]oops").calls
    assert (bare.name, bare.error, bare.raw) == (None, "no JSON after [TOOL_CALLS]", "oops")


def test_a_near_miss_names_only_the_faults_it_has():
    assert parse_reply("{'name': 'idle', 'arguments': {}}").error == (
        "a malformed call: single quotes instead of double quotes; write valid JSON")
    assert parse_reply('{"name": "idle", "arguments": {}').error == (
        "a malformed call: unbalanced braces; write valid JSON")
