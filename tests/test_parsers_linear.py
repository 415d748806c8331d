"""Every tool-call parser reads in time linear in its text, however hostile (issue 43, item 1),
and a chat pool reads a long reply off its event loop, so that its other sessions go on.

The time bound is the CPU time of the reading thread (``time.thread_time``), which a loaded
machine stretches far less than the wall clock: :data:`SECONDS_PER_KB` per KB of text. The
scanner of JSON strings these parsers share was quadratic on text made of ``"\\`` pairs (each
quote opened a string that failed at the end and was tried again from the next quote): 1.5 s
for 20 KB, 12 s for 60 KB, 46 s for 100 KB.
"""

import asyncio
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arena_envs.llm.chat import ChatPool
from arena_envs.llm.parsers import MAX_REPLY_CHARS, parse_reply
from arena_envs.serve.reading import read_calls
from arena_envs.tools import ToolCallError
from arena_envs.tools.decision import MAX_JSON_DEPTH, MAX_OUTPUT_CHARS, outer_json_objects, parse_call, parse_decision

SECONDS_PER_KB = 0.03
"""CPU seconds a parser may take per KB of text: about ten times the costliest text known now
(3 ms per KB: 200 KB of ``{}``, each pair an object the search decodes, read strictly, so twice),
and under half of what the quadratic scanner took at 40 KB (over 0.1 s per KB)."""
SECONDS_FIXED = 0.05

MOTIFS = {  # text made by repeating one of these
    "quote-backslash pairs": '"\\',
    "backslash-quote pairs": '\\"',
    "unbalanced open braces": "{",
    "unbalanced close braces": "}",
    "deep objects": '{"a":',
    "deep arrays": "[",
    "brace and quote": '{"',
    "quote and brace": '"{',
    "empty objects": "{}",
    "small objects": '{"a":1} ',
    "quoted examples": 'e.g. {"name":"idle"} ',
    "calls never closed": '{"name": "x", "arguments": ',
    "single-quoted calls": "{'name': 'x', ",
    "unquoted keys": "{name: x, ",
    "hermes tags": "<tool_call>",
    "xml functions": "<function=",
    "xml parameters": "<parameter=",
    "mistral tags": "[TOOL_CALLS]",
    "mistral arguments": "[TOOL_CALLS]x[ARGS]{",
    "fences": "```json\n{",
    "think tags": "<think>",
    "python tags": "<|python_tag|>{",
    "commas": ", ",
}
ISSUE_23_STALL = '{"a":[' * 199  # then "1," to the end: deep unclosed arrays


def openai_arguments(text: str):
    return parse_reply({"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "idle", "arguments": text}}]})


PARSERS = {  # every way in, and the longest text each reads (longer text is refused unread)
    "parse_decision": (parse_decision, MAX_OUTPUT_CHARS),
    "parse_call": (parse_call, MAX_OUTPUT_CHARS),
    "arguments as a JSON string": (lambda text: parse_decision({"tool": "idle", "params": text}), MAX_REPLY_CHARS),
    "outer_json_objects": (outer_json_objects, MAX_REPLY_CHARS),
    "parse_reply, text": (lambda text: parse_reply(text, ["idle"]), MAX_REPLY_CHARS),
    "parse_reply, message": (lambda text: parse_reply({"role": "assistant", "content": text}), MAX_REPLY_CHARS),
    "parse_reply, OpenAI arguments": (openai_arguments, MAX_REPLY_CHARS),
    "parse_reply, strict": (lambda text: parse_reply(text, ["idle"], strict=True), MAX_REPLY_CHARS),
    "parse_reply, strict json": (lambda text: parse_reply(text, strict=True, expected="json"), MAX_REPLY_CHARS),
    "the server's read_calls": (lambda text: read_calls(text, None, [], True), MAX_REPLY_CHARS),
}


def repeated(motif: str, length: int) -> str:
    return (motif * (length // len(motif) + 1))[:length]


def cpu_seconds(read, text: str) -> float:
    start = time.thread_time()
    try:
        read(text)
    except ToolCallError:  # a refusal is an answer too (anything else fails the test)
        pass
    return time.thread_time() - start


def bound(text: str) -> float:
    return SECONDS_FIXED + SECONDS_PER_KB * len(text) / 1000


@pytest.mark.parametrize("parser", PARSERS)
def test_every_parser_reads_each_kind_of_hostile_text_in_time_linear_in_its_length(parser):
    read, longest = PARSERS[parser]
    for length in (40_000, longest):  # 40 KB first: the quadratic scanner fails there in seconds
        texts = {name: repeated(motif, length) for name, motif in MOTIFS.items()}
        texts["issue 23's stall"] = (ISSUE_23_STALL + "1," * length)[:length]
        texts["deep arrays, then quote-backslash pairs"] = ("[" * (MAX_JSON_DEPTH + 8) + '"\\' * length)[:length]
        for name, text in texts.items():
            took = cpu_seconds(read, text)
            assert took <= bound(text), f"{parser} took {took:.2f} s on {len(text)} characters of {name}"


PIECES = [*MOTIFS.values(), "a", " ", "\n", ":", ",", "'", "`", "\\", '"', "{", "}", "[", "]", "</tool_call>",
          "</function>", "</parameter>", "</think>", "```", "[ARGS]", "idle", "()", '"name"', '"tool"', "e.g."]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(parser=st.sampled_from(sorted(PARSERS)),
       prefix=st.sampled_from(["", "[" * 40, '{"a":' * 40, ISSUE_23_STALL, "<tool_call>", "[TOOL_CALLS]",
                               "```json\n", "<think>", "Sure! "]),
       motif=st.sampled_from(list(MOTIFS.values())),
       noise=st.lists(st.sampled_from(PIECES), max_size=4).map("".join),
       every=st.integers(1, 5000),
       length=st.integers(20_000, MAX_REPLY_CHARS))
def test_hostile_text_mixed_with_noise_is_read_in_time_linear_in_its_length(parser, prefix, motif, noise, every,
                                                                             length):
    """A motif repeated, with a little noise after every ``every`` repeats, after a prefix."""
    read, longest = PARSERS[parser]
    text = (prefix + repeated(motif * every + noise, length))[:min(length, longest)]
    for cut in (text, text[:-1]):  # both parities: a string may end on a lone backslash, or not
        took = cpu_seconds(read, cut)
        assert took <= bound(cut), f"{parser} took {took:.2f} s on {len(cut)} characters: {cut[:200]!r}..."


# -- what the scanner finds: the same as a reading one character at a time ---------------------


def reference_objects(text: str) -> tuple[list[tuple[int, int]], list[int]]:
    """:func:`outer_json_objects` done the slow, plain way: one character at a time, a string
    running to its closing quote (or to the end), then the outermost of the balanced pairs."""
    pairs, opened, in_string, escaped = [], [], False, False
    for at, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            opened.append(at)
        elif char == "}" and opened:
            pairs.append((opened.pop(), at + 1))
    outermost = [pair for pair in pairs
                 if not any(start < pair[0] and pair[1] < end for start, end in pairs)]
    return sorted(outermost), opened


@settings(max_examples=3000, deadline=None, derandomize=True, database=None)
@given(text=st.text(alphabet='{}[]"\\ a:', max_size=30), cut=st.tuples(st.integers(0, 30), st.integers(0, 30)))
def test_outer_objects_are_what_a_reading_one_character_at_a_time_finds(text, cut):
    assert outer_json_objects(text) == reference_objects(text)
    pos, endpos = min(cut), max(cut)
    spans, unclosed = reference_objects(text[pos:endpos])
    assert outer_json_objects(text, pos, endpos) == ([(start + pos, end + pos) for start, end in spans],
                                                     [start + pos for start in unclosed])


def test_a_string_left_open_runs_to_the_end_a_trailing_backslash_too():
    assert outer_json_objects('{"a": "x} {\\') == ([], [0])  # the old scanner saw "}" close the object here
    assert outer_json_objects('"\\' * 1000 + '{"tool": "idle"}') == ([], [])
    assert outer_json_objects('{"a": "\\\\"} {"b": "\\""}') == ([(0, 11), (12, 23)], [])


def reference_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings, one character at a time."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


@settings(max_examples=1500, deadline=None, derandomize=True, database=None)
@given(opening=st.integers(0, MAX_JSON_DEPTH + 4), text=st.text(alphabet='[]{}"\\ 1,', max_size=24))
def test_json_deeper_than_the_limit_is_refused_before_it_is_decoded_and_only_that(opening, text):
    arguments = "[" * opening + text
    try:
        parse_decision({"tool": "idle", "params": arguments})
    except ToolCallError as error:
        too_deep = "nested too deeply" in error.message
    else:
        too_deep = False
    assert too_deep == (reference_depth(arguments) > MAX_JSON_DEPTH), arguments


def test_a_call_nested_three_hundred_deep_is_refused_with_a_clear_error_everywhere():
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    with pytest.raises(ToolCallError, match=f"nested too deeply: more than {MAX_JSON_DEPTH} levels"):
        parse_decision({"tool": "idle", "x": deep})  # the flat form (the plain one is read unsearched)
    with pytest.raises(ToolCallError, match="nested too deeply"):
        parse_decision('{"tool": "idle", "params": {"x": ' + json.dumps(deep) + "}}")
    [call] = parse_reply({"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "idle", "arguments": {"x": deep}}}]}).calls
    assert call.name == "idle" and not call.ok and "nested too deeply" in call.error
    # the server's reader hands the tool layer the parser's reason, not an unrelated JSON error
    [unreadable], _telemetry = read_calls({"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "idle", "arguments": {"x": deep}}}]}, None, [], True)
    with pytest.raises(ToolCallError, match=r"^the call of 'idle' could not be read: tool call is nested too deeply"):
        unreadable.to_dict()
    for depth in (300, 5000):  # 5000: deeper than Python's own recursion limit
        deep_list: object = {"id": "c"}
        for _ in range(depth):
            deep_list = [deep_list]
        message = {"role": "assistant", "tool_calls": deep_list}
        result = parse_reply(message)
        assert not any(call.ok for call in result.calls) and (result.error or result.calls[0].error), depth
        [unreadable], _telemetry = read_calls(message, None, [], True)
        with pytest.raises(ToolCallError, match="nested too deeply"):
            unreadable.to_dict()


# -- a chat pool: one session's long reply does not hold up the others -------------------------


def test_a_hostile_reply_in_a_chat_pool_is_read_while_another_session_plays_on():
    """The costliest known reply within the parser's limit (200 KB of ``{}``: about 0.5 s to
    read) is read off the pool's event loop: while it is read, another session plays whole
    turns. Read on the loop, the hostile session's turn runs to its end before any other."""
    hostile_reply = "{}" * (MAX_REPLY_CHARS // 2)

    async def play() -> tuple[int, dict]:
        pool = ChatPool("arena_envs/TreasureHunt-v0", size=2)
        hostile, bystander = pool.session(), pool.session()
        await hostile.reset(seed=0)
        await bystander.reset(seed=1)
        hostile_turn = asyncio.ensure_future(hostile.step(hostile_reply))
        await asyncio.sleep(0)  # the hostile turn begins
        turns_played = 0
        while not hostile_turn.done() and turns_played < 3:
            step = await bystander.step('{"name": "pwd", "arguments": {}}')
            assert step.info["parse_status"] == "call" and step.info["calls_invalid"] == 0, step.info
            turns_played += 1
            await asyncio.sleep(0)  # the other sessions' turns go on too
        info = (await hostile_turn).info
        await hostile.close()
        await bystander.close()
        return turns_played, info

    turns_played, hostile_info = asyncio.run(play())
    assert turns_played == 3, f"another session played {turns_played} turns while a hostile reply was read"
    assert hostile_info["parse_status"] == "none" and hostile_info["parse_failure"]
