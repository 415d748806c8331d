"""Each rule of :func:`validate_messages` broken, with the exact line the error reads (the index, the
rule and what is wrong), and every shape each rule lets through: tests/test_llm_transcripts.py checks
the rule and index; a reader of the error needs the words too."""

import pytest

from arena_envs.llm import TranscriptError, validate_messages

S, U = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}


def c(i="a", name="pwd", arguments="{}", **extra):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}, **extra}


def asks(*calls, content=""):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def ans(i="a"):
    return {"role": "tool", "tool_call_id": i, "content": "ok"}


TOOL = {"type": "function", "function": {"name": "pwd", "parameters": {}}}


REFUSED = [  # (messages, tools, null_content), the error's message
    ([ans("a")], None, False,
     "messages[0]: rule 'tool-answers-call': tool_call_id 'a' answers no call of the assistant message before "
     "this run of tool messages"),
    ([S, U, asks({**c(), "type": "tool"})], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0]: type must be 'function', got 'tool'"),
    ("hello", None, False,
     "messages: rule 'list': expected a non-empty list of messages, got str"),
    ([], None, False,
     "messages: rule 'list': expected a non-empty list of messages, got list"),
    ([S, ["user"]], None, False,
     "messages[1]: rule 'object': a message must be an object, got list"),
    ([S, {"role": "bot", "content": "x"}], None, False,
     "messages[1]: rule 'role': unknown role 'bot'; roles: system, developer, user, assistant, tool"),
    ([S, {"role": "user", "content": "x", "tool_call_id": "a", "b": 1}], None, False,
     "messages[1]: rule 'keys': a user message has no 'b', 'tool_call_id'"),
    ([S, {"role": "user", "content": "x", "name": 7}], None, False,
     "messages[1]: rule 'name': 'name' must be a string, got int"),
    ([S, U, {"role": "assistant", "content": "x", "reasoning_content": None}], None, False,
     "messages[2]: rule 'name': 'reasoning_content' must be a string, got null"),
    ([S, U, {"role": "assistant", "content": "x", "refusal": 1.5}], None, False,
     "messages[2]: rule 'name': 'refusal' must be a string, got float"),
    ([S, {"role": "user"}], None, False,
     "messages[1]: rule 'content': content is missing; it must be a string"),
    ([S, U, {"role": "assistant", "content": None}], None, False,
     "messages[2]: rule 'content': content is null; it must be a string"),
    ([S, U, asks(c(), content=None), ans()], None, False,
     "messages[2]: rule 'content': content is null; it must be a string ('' with tool_calls: llama.cpp's "
     'server refuses null)'),
    ([S, U, {"role": "assistant", "content": None}], None, True,
     "messages[2]: rule 'content': content is null; it must be a string"),
    ([S, {"role": "user", "content": []}], None, False,
     "messages[1]: rule 'content': content must be a string or a non-empty list of parts, got list"),
    ([S, {"role": "user", "content": {"type": "text"}}], None, False,
     "messages[1]: rule 'content': content must be a string or a non-empty list of parts, got dict"),
    ([S, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "video"}]}], None, False,
     "messages[1]: rule 'content': content part 1 is not a content part (dict)"),
    ([S, {"role": "user", "content": [{"type": "image_url"}]}], None, False,
     "messages[1]: rule 'content': content part 0 is not a content part (dict)"),
    ([S, {"role": "user", "content": ["text"]}], None, False,
     "messages[1]: rule 'content': content part 0 is not a content part (str)"),
    ([S, {"role": "user", "content": [{"type": "text", "text": 3}]}], None, False,
     "messages[1]: rule 'content': content part 0: 'text' must be a string"),
    ([S, U, {"role": "tool", "content": "x"}], None, False,
     "messages[2]: rule 'tool-answers-call': a tool message needs a non-empty string tool_call_id"),
    ([S, U, {"role": "tool", "content": "x", "tool_call_id": ""}], None, False,
     "messages[2]: rule 'tool-answers-call': a tool message needs a non-empty string tool_call_id"),
    ([S, U, {"role": "assistant", "content": "", "tool_calls": {}}], None, False,
     "messages[2]: rule 'tool-calls': tool_calls must be a non-empty list, got dict"),
    ([S, U, {"role": "assistant", "content": "", "tool_calls": []}], None, False,
     "messages[2]: rule 'tool-calls': tool_calls must be a non-empty list, got list"),
    ([S, U, asks(c(), "call")], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[1] must be an object, got str"),
    ([S, U, asks(c(x=1, y=2))], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0] has unknown keys ['x', 'y']"),
    ([S, U, asks(c(i=5))], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0] needs a non-empty string id"),
    ([S, U, asks({"id": "a", "function": {"name": "pwd", "arguments": "{}"}})], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0]: type must be 'function', got None"),
    ([S, U, asks(c(name=""))], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0]: function needs a non-empty string name"),
    ([S, U, asks({"id": "a", "type": "function", "function": "pwd"})], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0]: function needs a non-empty string name"),
    ([S, U, asks(c(arguments={"a": 1}))], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0]: function.arguments must be a JSON string, got dict"),
    ([S, U, asks(c(), c("b", arguments="[1, 2]"))], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[1]: function.arguments must hold a JSON object (servers "
     'decode it to render the call)'),
    ([S, U, asks(c(arguments='{"a": '))], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0]: function.arguments must hold a JSON object (servers "
     'decode it to render the call)'),
    ([S, U, asks(c(arguments='[' * 5000 + ']' * 5000))], None, False,
     "messages[2]: rule 'tool-calls': tool_calls[0]: function.arguments must hold a JSON object (servers "
     'decode it to render the call)'),
    ([S, U, asks(c(), c("b"), c("a"))], None, False,
     "messages[2]: rule 'unique-ids': tool_calls[2]: id 'a' is used twice"),
    ([S, U, ans("z")], None, False,
     "messages[2]: rule 'tool-answers-call': tool_call_id 'z' answers no call of the assistant message "
     'before this run of tool messages'),
    ([S, U, asks(c()), ans("b")], None, False,
     "messages[3]: rule 'tool-answers-call': tool_call_id 'b' answers no call of the assistant message "
     'before this run of tool messages'),
    ([S, U, asks(c()), ans(), ans()], None, False,
     "messages[4]: rule 'tool-answers-call': tool_call_id 'a' is answered twice"),
    ([S, U, asks(c()), ans(), U, ans()], None, False,
     "messages[5]: rule 'tool-answers-call': tool_call_id 'a' answers no call of the assistant message "
     'before this run of tool messages'),
    ([S, U, asks(c(), c("b")), ans(), U], None, False,
     "messages[4]: rule 'calls-answered': a user message comes before the calls ['b'] were answered"),
    ([S, U, asks(c(), c("b")), ans("b")], None, False,
     "messages[3]: rule 'calls-answered': the transcript ends before the calls ['a'] were answered"),
    ([S, U], {"type": "function"}, False,
     "messages: rule 'tools': tools must be a list, got dict"),
    ([S, U], [TOOL, "pwd"], False,
     "messages: rule 'tools': tools[1] must be {'type': 'function', 'function': {...}}"),
    ([S, U], [TOOL, {"type": "func", "function": {"name": "x"}}], False,
     "messages: rule 'tools': tools[1] must be {'type': 'function', 'function': {...}}"),
    ([S, U], [{"type": "function", "function": None}], False,
     "messages: rule 'tools': tools[0] must be {'type': 'function', 'function': {...}}"),
    ([S, U], [TOOL, {"type": "function", "function": {"name": ""}}], False,
     "messages: rule 'tools': tools[1]: the name '' is missing or used twice"),
    ([S, U], [TOOL, TOOL], False,
     "messages: rule 'tools': tools[1]: the name 'pwd' is missing or used twice"),
    ([S, U], [TOOL, {"type": "function", "function": {"name": "ls", "parameters": []}}], False,
     "messages: rule 'tools': tools[1]: parameters must be a JSON schema object"),
]


@pytest.mark.parametrize("messages, tools, null_content, message", REFUSED)
def test_each_broken_rule_reads_exactly(messages, tools, null_content, message):
    with pytest.raises(TranscriptError) as caught:
        validate_messages(messages, tools, null_content=null_content)
    assert str(caught.value) == message
    where, rule, detail = message.split(": ", 2)
    assert (caught.value.rule, caught.value.detail) == (rule.removeprefix("rule ").strip("'"), detail)
    assert caught.value.index == (None if where == "messages" else int(where[len("messages["):-1]))


def test_every_shape_the_rules_allow_passes():
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:,"}},
             {"type": "input_audio", "input_audio": {}}, {"type": "file", "file": {}}]
    validate_messages([
        {"role": "developer", "content": "d", "name": "dev"}, {"role": "user", "content": parts, "name": "u"},
        {"role": "assistant", "content": "", "name": "a", "reasoning_content": "r", "refusal": "",
         "tool_calls": [c(), c("b", arguments='{"path": "/"}')]},
        ans("b"), ans("a"),  # in any order
        asks(c("a"), content=None), ans("a"),  # an id may come back in a later message
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ], tools=[TOOL, {"type": "function", "function": {"name": "ls"}}], null_content=True)
    validate_messages([S])
    validate_messages((S, U), [])
