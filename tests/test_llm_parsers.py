"""Tool-call parsers: each format from real-looking model output, reasoning kept out, hostile input."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arena_envs.llm import parsers
from arena_envs.llm.bench import ADVERSARIAL_REPLIES, REPLY_BYTES, adversarial_reply, parse_seconds, well_formed_reply
from arena_envs.llm.parsers import FORMATS, MAX_CALLS, format_reply, parse_reply
from arena_envs.tools import tool_schemas
from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS

TOOLS = tool_schemas() + TREASURE_HUNT_TOOL_SCHEMAS


def calls_of(result):
    return [(call.name, call.arguments) for call in result.calls]


def test_openai_tool_calls_with_json_string_arguments():
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9xQ", "type": "function", "function": {"name": "cd", "arguments": '{"path": "amber"}'}},
        {"id": "call_9xR", "type": "function", "function": {"name": "ls", "arguments": ""}}]}
    result = parse_reply(message, TOOLS)
    assert result.format == "openai" and not result.failure
    assert calls_of(result) == [("cd", {"path": "amber"}), ("ls", {})]
    assert [c.id for c in result.calls] == ["call_9xQ", "call_9xR"]


def test_openai_call_with_broken_arguments_is_invalid_and_says_why():
    message = {"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "cat", "arguments": '{"file": "start.txt"'}}]}
    result = parse_reply(message, TOOLS)
    (call,) = result.calls
    assert call.name == "cat" and call.arguments is None and "not valid JSON" in call.error
    assert result.telemetry()["calls_unreadable"] == 1


def test_an_unreadable_call_is_refused_by_the_tool_layer_never_run_bare():
    from arena_envs.tools import ToolCallError
    from arena_envs.tools.decision import parse_call

    (call,) = parse_reply('<tool_call>{"name": "pwd", "arguments": {oops}</tool_call>', TOOLS).calls
    assert not call.ok and call.name == "pwd"
    with pytest.raises(ToolCallError) as error:
        parse_call(call.as_call())
    assert error.value.code == "INVALID_PARAMS"


def test_hermes_qwen25_several_blocks_with_prose_and_think():
    text = ("<think>\nThe clue said the next file is in amber. I should read it, then list.\n</think>\n\n"
            "I'll read the clue first.\n"
            '<tool_call>\n{"name": "cat", "arguments": {"file": "./amber/moss.txt"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>')
    result = parse_reply(text, TOOLS)
    assert result.format == "hermes"
    assert calls_of(result) == [("cat", {"file": "./amber/moss.txt"}), ("ls", {})]
    assert "amber. I should read it" in result.reasoning
    assert "<think>" not in result.content and "read the clue first" in result.content


def test_hermes_block_left_open_at_the_stop_token():
    result = parse_reply('<tool_call>\n{"name": "pwd", "arguments": {}}', TOOLS)
    assert result.format == "hermes" and calls_of(result) == [("pwd", {})]


def test_qwen3_reasoning_with_only_a_closing_think_tag():
    # Qwen3's template opens <think> in the prompt, so the reply only closes it
    text = ('Maybe <tool_call>{"name": "give_up"}</tool_call> is best? No.\n</think>\n\n'
            '<tool_call>\n{"name": "pwd", "arguments": {}}\n</tool_call>')
    result = parse_reply(text, TOOLS)
    assert calls_of(result) == [("pwd", {})]
    assert "give_up" in result.reasoning


def test_calls_inside_think_are_not_run():
    result = parse_reply('<think><tool_call>{"name": "give_up", "arguments": {}}</tool_call></think>Done.', TOOLS)
    assert result.failure and result.format == "none"


def test_qwen3_coder_xml_with_typed_parameters():
    text = ("<tool_call>\n<function=move_to>\n<parameter=target>\n[3.5, 0, -4]\n</parameter>\n"
            "<parameter=speed>\n1.5\n</parameter>\n</function>\n</tool_call>\n"
            "<tool_call>\n<function=send_message>\n<parameter=message>\n42\n</parameter>\n"
            "<parameter=target_agent>\nall\n</parameter>\n</function>\n</tool_call>")
    result = parse_reply(text, TOOLS)
    assert result.format == "qwen3_xml"
    # a string parameter stays text even when it looks like a number
    assert calls_of(result) == [("move_to", {"target": [3.5, 0, -4], "speed": 1.5}),
                                ("send_message", {"message": "42", "target_agent": "all"})]


def test_qwen3_coder_xml_without_wrapper_or_closing_tags():
    result = parse_reply("<function=cat>\n<parameter=file>\nstart.txt\n", TOOLS)
    assert result.format == "qwen3_xml" and calls_of(result) == [("cat", {"file": "start.txt"})]


def test_llama3_json_with_python_tag_and_semicolons():
    text = '<|python_tag|>{"name": "cd", "parameters": {"path": "/"}}; {"name": "ls", "parameters": {}}'
    result = parse_reply(text, TOOLS)
    assert result.format == "llama3_json"
    assert calls_of(result) == [("cd", {"path": "/"}), ("ls", {})]


def test_mistral_list_and_v11_forms():
    v3 = parse_reply('[TOOL_CALLS] [{"name": "cat", "arguments": {"file": "start.txt"}}, {"name": "pwd", '
                     '"arguments": {}}]', TOOLS)
    assert v3.format == "mistral" and calls_of(v3) == [("cat", {"file": "start.txt"}), ("pwd", {})]
    v11 = parse_reply('[TOOL_CALLS]cat[ARGS]{"file": "start.txt"}[TOOL_CALLS]pwd[ARGS]{}', TOOLS)
    assert v11.format == "mistral" and calls_of(v11) == [("cat", {"file": "start.txt"}), ("pwd", {})]


def test_fenced_and_embedded_json():
    fenced = parse_reply('Plan: collect.\n```json\n{"tool": "collect", "params": {"target_name": "Berry1"}}\n```',
                         TOOLS)
    assert fenced.format == "json" and calls_of(fenced) == [("collect", {"target_name": "Berry1"})]
    embedded = parse_reply('Sure! {"name": "cd", "arguments": {"path": "amber"}} should work.', TOOLS)
    assert embedded.format == "json" and calls_of(embedded) == [("cd", {"path": "amber"})]


def test_bare_tool_name():
    for text in ("idle", "pwd()", "`ls`", "query_inventory."):
        result = parse_reply(text, TOOLS)
        assert result.format == "bare_name" and len(result.calls) == 1, text
    assert parse_reply("hello", TOOLS).failure  # not a tool: no call


def test_prose_without_a_call_is_a_parse_failure_with_a_reason():
    result = parse_reply("I am not sure what to do next, let me think about the map.", TOOLS)
    assert result.failure and result.format == "none" and "no tool call" in result.error
    telemetry = result.telemetry()
    assert telemetry["parse_failure"] is True and telemetry["calls_parsed"] == 0
    assert parse_reply({"role": "assistant", "content": ""}, TOOLS).failure
    assert parse_reply({"role": "assistant", "content": None, "tool_calls": []}, TOOLS).failure


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "bare_name"])
def test_every_format_round_trips(fmt):
    calls = [("move_to", {"target": [1.5, 0, -2]}), ("collect", {"target_name": "Berry1"})]
    result = parse_reply(format_reply(calls, fmt, reasoning="berry is close"), TOOLS)
    assert result.format == fmt
    assert calls_of(result) == calls


def test_sdk_message_objects_are_read():
    openai = pytest.importorskip("openai")
    from openai.types.chat import ChatCompletionMessage

    message = ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "pwd", "arguments": "{}"}}]})
    assert openai and calls_of(parse_reply(message, TOOLS)) == [("pwd", {})]


# -- hostile input ------------------------------------------------------------------------


def test_deep_json_huge_text_and_surrogates_never_raise():
    deep = '{"name": "cd", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}"
    for text in (deep, "[" * 300_000, "{" * 150_000, "\ud800<tool_call>\udfff</tool_call>",
                 "<tool_call>" * 10_000, "[TOOL_CALLS]" * 5_000, "```json\n" + "{" * 50_000 + "\n```",
                 "<function=" + "x" * 100_000):
        result = parse_reply(text, TOOLS)
        assert result.failure or all(call.error or call.name for call in result.calls)
        json.dumps(result.telemetry())  # the telemetry is always JSON-ready
    huge = parse_reply("a" * 5_000_000, TOOLS)
    assert huge.failure and "too long" in huge.error


def test_many_calls_are_capped_and_counted():
    text = "\n".join('<tool_call>{"name": "pwd", "arguments": {}}</tool_call>' for _ in range(MAX_CALLS + 10))
    result = parse_reply(text, TOOLS)
    assert len(result.calls) == MAX_CALLS


def test_wrong_kinds_of_message():
    assert parse_reply(12345, TOOLS).failure
    assert parse_reply({"role": "assistant", "tool_calls": "nope"}, TOOLS).failure
    result = parse_reply({"role": "assistant", "tool_calls": [1, {"function": "x"}]}, TOOLS)
    assert len(result.calls) == 2 and all(not call.ok for call in result.calls)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=400), st.binary(max_size=200),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                              lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4),
                              max_leaves=20)))
def test_any_input_gives_a_result_or_a_reasoned_failure(value):
    for candidate in (value, {"role": "assistant", "content": value}, {"role": "assistant", "tool_calls": value}):
        result = parse_reply(candidate, TOOLS)
        assert result.failure == (not result.calls)
        if result.failure:
            assert result.error or result.format != "none"
        json.dumps(result.telemetry())


# -- parse statuses: no attempt, near misses, unreadable calls, quoted examples -----------------

CALL = '{"name": "cat", "arguments": {"file": "start.txt"}}'


@pytest.mark.parametrize("text", [
    f"Calls look like this: e.g. {CALL}",
    f"For example, {CALL} reads a file.",
    f"You could write something like {CALL} to read it.",
    f"The syntax is {CALL}.",
    f"Calls look like this: {CALL}",
    f"For example:\n```json\n{CALL}\n```",
    f"A call is written as `{CALL}` in this format.",
])
def test_a_quoted_example_is_never_run(text):
    result = parse_reply(text, TOOLS)
    assert result.failure and result.status == "quoted_example" and "example" in result.error


def test_a_real_call_after_a_quoted_one_runs():
    result = parse_reply(f'For example {CALL}. So now: {{"name": "pwd", "arguments": {{}}}}', TOOLS)
    assert [(c.name, c.arguments) for c in result.calls] == [("pwd", {})] and result.status == "call"
    assert parse_reply(f"Sure! {CALL} should work.", TOOLS).status == "call"  # prose that quotes nothing
    assert parse_reply(f"I'd like to read it, so: {CALL}", TOOLS).status == "call"
    assert parse_reply(f"I will do it like this: {CALL}", TOOLS).status == "call"


@pytest.mark.parametrize("text, fault", [
    ("{'name': 'cat', 'arguments': {'file': 'start.txt'}}", "single quotes"),
    ('{"name": "cat", "arguments": {"file": "start.txt"},}', "a trailing comma"),
    ('{"name": "cat", "arguments": {"file": "start.txt"}', "unbalanced braces"),
    ('I will read it: {name: "cat", arguments: {file: "start.txt"}}', "unquoted keys"),
    ("<tool_call>{'name': 'pwd', 'arguments': {}}</tool_call>", "single quotes"),
    ("<tool_call>{'name': 'cat', 'arguments': {'file': 'start.txt'}}</tool_call>", "single quotes"),
    ('```json\n{"tool": "pwd", "params": {},}\n```', "a trailing comma"),
])
def test_near_misses_are_told_apart_from_prose(text, fault):
    result = parse_reply(text, TOOLS)
    assert result.status == "near_miss" and not any(call.ok for call in result.calls)
    assert fault in (result.error or "") + " ".join(call.error or "" for call in result.calls)
    assert result.telemetry()["parse_status"] == "near_miss"


@pytest.mark.parametrize("text, status", [
    ("I am not sure what to do next.", "none"),
    ("", "none"),
    ("<tool_call>this is not json at all</tool_call>", "unreadable"),
    ("[TOOL_CALLS] nothing here", "unreadable"),
    (CALL, "call"),
])
def test_every_reply_gets_one_status(text, status):
    assert parse_reply(text, TOOLS).status == status


def test_strict_parse_reads_only_the_formats_own_syntax():
    hermes = format_reply([("pwd", {})], "hermes")
    assert parse_reply(hermes, TOOLS, strict=True, expected="hermes").status == "call"
    for fmt in ("json", "llama3_json", "mistral", "qwen3_xml"):
        result = parse_reply(format_reply([("pwd", {})], fmt), TOOLS, strict=True, expected="hermes")
        assert result.status == "wrong_format" and result.failure, fmt
    prose = parse_reply(f"Sure, reading it now: {CALL}", TOOLS, strict=True)
    assert prose.status == "wrong_format" and prose.failure
    assert parse_reply(f"Sure, reading it now: {CALL}", TOOLS).status == "call"  # the lenient parse reads it
    assert parse_reply(CALL, TOOLS, strict=True, expected="openai").status == "call"  # the prompt's fallback
    native = format_reply([("pwd", {})], "openai")
    assert all(parse_reply(native, TOOLS, strict=True, expected=fmt).status == "call" for fmt in FORMATS)
    with pytest.raises(ValueError, match="unknown format"):
        parse_reply(CALL, TOOLS, strict=True, expected="yaml")


# -- the embedded-JSON search is linear in the reply's length ----------------------------------


def test_a_megabyte_of_adversarial_braces_costs_about_what_well_formed_json_costs():
    """Issue 23: a 63 KB reply cost 0.7 s (a decode from each of 200 braces; 14.8 s at 1 MB). Now one
    pass finds the outermost balanced objects and decodes each once; a 1 MB adversarial reply must cost
    at most 10x a same-length reply of well-formed JSON with as many braces (measured: 0.1-1.6x)."""
    baseline = parse_seconds(well_formed_reply(), repeat=2)
    for kind in ADVERSARIAL_REPLIES:
        text = adversarial_reply(kind)
        assert len(text) == REPLY_BYTES
        assert parse_seconds(text) < 10 * baseline + 0.05, kind
    assert parsers.MAX_REPLY_CHARS == 200_000  # put back after each measurement
