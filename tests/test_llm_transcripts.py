"""Transcripts that any OpenAI-compatible server accepts: validate_messages rule by rule, every
scenario x every call format from the scripted agent, the edge cases of the construction,
the strict scripted server, and the prompts that match the run."""

import copy
import json
import re

import openai
import pytest
from llm_helpers import validate_transcript, validated_sessions  # noqa: F401 (a fixture)

import arena_envs  # noqa: F401
from arena_envs.llm import FORMATS, ChatEnv, TranscriptError, format_reply, validate_messages
from arena_envs.llm.scripted import policy_for
from arena_envs.llm.server import ScriptedModelServer
from arena_envs.llm.team import TeamChat, scripted_team

pytestmark = pytest.mark.usefixtures("validated_sessions")

HUNT, FORAGING, CRAFTING = "arena_envs/TreasureHunt-v0", "arena_envs/Foraging-v0", "arena_envs/Crafting-v0"
SYSTEM, USER = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}


def call(call_id="a", name="pwd", arguments="{}"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def calling(*calls, content=""):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def answer(call_id="a", content="ok"):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


VALID = [SYSTEM, USER, calling(call("a"), call("b")), answer("a"), answer("b"), USER,
         {"role": "assistant", "content": [{"type": "text", "text": "done"}]}, USER]

BROKEN = {  # rule -> (messages, index of the message that breaks it)
    "list": ([], None),
    "object": ([SYSTEM, "hello"], 1),
    "role": ([SYSTEM, {"role": "function", "content": "x"}], 1),
    "keys": ([SYSTEM, {"role": "user", "content": "x", "tool_call_id": "a"}], 1),
    "content": ([SYSTEM, USER, {"role": "assistant", "content": None}], 2),
    "name": ([SYSTEM, {"role": "user", "content": "x", "name": 7}], 1),
    "tool-calls": ([SYSTEM, USER, calling(call("a"), 42), answer("a")], 2),
    "unique-ids": ([SYSTEM, USER, calling(call("a"), call("a")), answer("a"), answer("a")], 2),
    "tool-answers-call": ([SYSTEM, USER, answer("a")], 2),
    "calls-answered": ([SYSTEM, USER, calling(call("a"), call("b")), answer("a"), USER], 4),
}


def test_a_valid_transcript_passes():
    validate_messages(VALID)
    validate_messages(VALID, tools=[{"type": "function", "function": {"name": "pwd", "parameters": {}}}])


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_rule_broken_once_names_its_index_and_rule(rule):
    messages, index = BROKEN[rule]
    with pytest.raises(TranscriptError) as caught:
        validate_messages(messages)
    assert (caught.value.rule, caught.value.index) == (rule, index)
    assert isinstance(caught.value, ValueError) and f"rule {rule!r}" in str(caught.value)


@pytest.mark.parametrize("messages, rule", [
    ([SYSTEM, USER, calling(call("a")), answer("a"), answer("a")], "tool-answers-call"),  # answered twice
    ([SYSTEM, USER, calling(call("a")), answer("b")], "tool-answers-call"),  # an id nobody declared
    ([SYSTEM, USER, calling(call("a")), answer("a"), USER, answer("a")], "tool-answers-call"),  # a later run
    ([SYSTEM, USER, calling(call("a"))], "calls-answered"),  # the transcript ends first
    ([SYSTEM, USER, calling(call(""))], "tool-calls"),  # an empty id
    ([SYSTEM, USER, calling(call("a", arguments={}))], "tool-calls"),  # arguments not a string
    ([SYSTEM, USER, calling(call("a", arguments='{"file": ')), answer("a")], "tool-calls"),  # not JSON
    ([SYSTEM, USER, calling(call("a", arguments="[1]")), answer("a")], "tool-calls"),  # not an object
    ([SYSTEM, USER, calling(call("a", name=None))], "tool-calls"),
    ([SYSTEM, USER, {"role": "assistant", "content": "x", "tool_calls": []}], "tool-calls"),
    ([SYSTEM, {"role": "user"}], "content"),  # missing
    ([SYSTEM, {"role": "user", "content": [{"type": "text", "text": 3}]}], "content"),
    ([SYSTEM, {"role": "user", "content": 12}], "content"),
    ([SYSTEM, USER, {"role": "tool", "content": "x"}], "tool-answers-call"),  # no tool_call_id
])
def test_more_ways_to_break_the_rules(messages, rule):
    with pytest.raises(TranscriptError) as caught:
        validate_messages(messages)
    assert caught.value.rule == rule


def test_null_content_with_tool_calls_only_when_asked():
    messages = [SYSTEM, USER, calling(call("a"), content=None), answer("a")]
    with pytest.raises(TranscriptError, match="llama.cpp"):
        validate_messages(messages)
    validate_messages(messages, null_content=True)
    with pytest.raises(TranscriptError):  # never without tool_calls
        validate_messages([SYSTEM, USER, {"role": "assistant", "content": None}], null_content=True)


TWICE = [{"type": "function", "function": {"name": "x"}}] * 2


@pytest.mark.parametrize("tools", [{"a": 1}, [{"type": "function"}], TWICE])
def test_bad_tools_are_refused(tools):
    with pytest.raises(TranscriptError) as caught:
        validate_messages(VALID, tools=tools)
    assert caught.value.rule == "tools"


# -- every scenario x every format ------------------------------------------------------


def scripted(messages, fmt):
    """The scripted model's next reply in ``fmt`` (a bare name cannot carry arguments: JSON then)."""
    calls = policy_for(messages)(messages)
    return format_reply(calls, "json" if fmt == "bare_name" and any(a for _, a in calls) else fmt, id_prefix="same")


def play(env, fmt, turns):
    messages, tools = env.reset(seed=3)
    validate_messages(messages, tools)
    for _ in range(turns):
        if env.session.done:
            break
        env.step(scripted(env.messages, fmt))
    return env.messages


@pytest.mark.parametrize("env_id", [HUNT, FORAGING, CRAFTING])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_scenario_and_format_gives_valid_transcripts(env_id, fmt):
    env = ChatEnv(env_id, max_turns=6, call_format=fmt)
    messages = play(env, fmt, 6)
    env.close()
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert assistants and all(m.get("tool_calls") for m in assistants)  # text calls declared too
    tool_ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert tool_ids == [c["id"] for m in assistants for c in m["tool_calls"]]
    if fmt != "openai":  # the model's raw text is kept as the content
        assert all(m["content"] for m in assistants)


@pytest.mark.parametrize("fmt", FORMATS)
def test_team_capture_transcripts_in_every_format(fmt):
    match = TeamChat(["blue_agent_1", "blue_agent_2"], [scripted_team("red")], agents_per_team=2, max_turns=4,
                     call_format=fmt)
    match.reset(seed=1)
    while not match.done:
        match.step({a: scripted(s.messages, fmt) for a, s in match.sessions.items()
                    if not s.done})
    for session in match.sessions.values():
        validate_transcript(session.messages)
    match.close()


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "openai"])
def test_text_calls_answered_in_a_user_message_keep_the_reply_unchanged(fmt):
    env = ChatEnv(HUNT, text_calls="user", call_format=fmt)
    env.reset(seed=0)
    reply = scripted(env.messages, fmt)
    step = env.step(reply)
    assert env.messages[2] == {"role": "assistant", "content": reply["content"]}
    assert [m["role"] for m in step.messages] == ["user"]
    assert step.messages[0]["content"].startswith("Result of call 1 (cat): ")
    assert step.info["parse_status"] == "call"


def test_null_content_option_for_servers_that_want_it():
    env = ChatEnv(HUNT, null_content=True)
    env.reset(seed=0)
    env.step(format_reply([("pwd", {})], "openai"))
    assert env.messages[2]["content"] is None
    validate_messages(env.messages, null_content=True)
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    env.step(format_reply([("pwd", {})], "openai"))
    assert env.messages[2]["content"] == ""


# -- the construction's edge cases ------------------------------------------------------


def test_calls_beyond_the_limit_are_answered_with_errors():
    env = ChatEnv(HUNT, max_calls=2)
    env.reset(seed=0)
    step = env.step(format_reply([("pwd", {})] * 5, "hermes"))
    results = [json.loads(m["content"]) if m["content"].startswith("{") else m["content"]
               for m in step.messages if m["role"] == "tool"]
    assert len(results) == 5 and [r["error_code"] for r in results[2:]] == ["NOT_RUN"] * 3
    assert [c["id"] for c in env.messages[2]["tool_calls"]] == [f"call_1_{k}" for k in range(5)]


def test_more_calls_than_can_be_read_are_not_declared_and_said_so():
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    reply = format_reply([("pwd", {})] * 40, "openai")
    step = env.step(reply)
    assert len(env.messages[2]["tool_calls"]) == 32
    assert sum(m["role"] == "tool" for m in step.messages) == 32
    assert "8 more calls were not read" in step.messages[-1]["content"]


def test_duplicate_missing_and_odd_ids_are_made_unique():
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    entries = [call("x"), call("x"), {"type": "function", "function": {"name": "pwd", "arguments": "{}"}},
               {"id": 7, "type": "function", "function": {"name": "pwd", "arguments": {}}}]
    env.step({"role": "assistant", "content": None, "tool_calls": entries})
    ids = [c["id"] for c in env.messages[2]["tool_calls"]]
    assert ids == ["x", "x_1", "call_1_2", "call_1_3"]
    assert env.messages[2]["tool_calls"][3]["function"]["arguments"] == "{}"  # a string, as OpenAI's


def test_entries_that_are_not_calls_are_answered_never_stored():
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    entries = [42, call("a"), {"id": "b"}, "pwd", call("c", arguments='{"path": ')]
    step = env.step({"role": "assistant", "content": "", "tool_calls": entries})
    assert env.messages[2]["tool_calls"] == [call("a")]
    assert [m["role"] for m in step.messages] == ["tool", "user"]
    user = step.messages[-1]["content"]
    assert all(f"Result of call {k}" in user for k in (1, 3, 4, 5)) and "Result of call 2" not in user
    assert step.info["calls_invalid"] == 4


def test_a_reply_whose_entries_are_all_junk_still_gives_a_valid_transcript():
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    env.step({"role": "assistant", "content": None, "tool_calls": [None, [], {"function": "pwd"}]})
    assert env.messages[2] == {"role": "assistant", "content": ""}


def test_nothing_is_stored_by_reference():
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    parts = [{"type": "text", "text": '{"name": "pwd", "arguments": {}}'}]
    reply = {"role": "assistant", "content": parts, "tool_calls": [call("a")]}
    env.step(reply)
    kept = copy.deepcopy(env.messages)
    parts[0]["text"] = "changed"
    reply["tool_calls"][0]["function"]["name"] = "changed"
    env.messages[2]["tool_calls"][0]["id"] = "changed"
    env.messages.append({"role": "user", "content": "injected"})
    assert env.messages == kept
    assert env.session.messages is not env.session.messages


def test_messages_from_an_index_are_copies_of_the_transcripts_tail():
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    env.step(format_reply([("pwd", {})], "hermes"))
    session = env.session
    assert [session.messages_from(k) for k in (0, 2, 4, 9)] == [env.messages, env.messages[2:], env.messages[4:], []]
    session.messages_from(2)[0]["content"] = "changed"
    assert env.messages[2]["content"] != "changed"


@pytest.mark.parametrize("scenario", ["Foraging-v0", "TeamCapture"])
def test_the_runner_shows_an_agent_the_transcript_as_it_stands_whatever_the_agent_does_with_it(scenario):
    """The runner keeps its own copy of each transcript, adding each new message once, and hands the
    agent a list of its own each turn: an agent that rearranges that list changes neither the session
    nor what it is shown next."""
    import asyncio

    from arena_envs.llm import ChatPool
    from arena_envs.llm.agents import ScriptedChatAgent
    from arena_envs.llm.runner import run_episode, run_team_episode

    shown, truth = [], []

    class Scribbler(ScriptedChatAgent):
        sessions: dict = {}

        async def reply(self, messages, tools, episode=None):
            shown.append(copy.deepcopy(messages))
            truth.append(copy.deepcopy(self.sessions[episode].messages) if episode in self.sessions else None)
            answer = await super().reply(messages, tools, episode)
            messages.pop(0)
            messages[-1] = {"role": "user", "content": "scribbled"}
            messages.append({"role": "user", "content": "appended"})
            return answer

    async def play():
        agent = Scribbler("hermes")
        if scenario == "TeamCapture":
            from arena_envs.llm import team

            made = team.TeamChat

            def spy(*args, **kwargs):  # the match's sessions, for reading their true transcripts
                match = made(*args, **kwargs)
                agent.sessions.update({f"3/0/{name}": session for name, session in match.sessions.items()})
                return match

            team.TeamChat = spy
            try:
                records = await run_team_episode(agent, 3, chat_agents=["blue_agent_1", "red_agent_1"],
                                                 max_turns=4)
            finally:
                team.TeamChat = made
        else:
            pool = ChatPool(scenario, 1, max_turns=4)
            session_of = pool.session

            def spy():
                session = session_of()
                agent.sessions["3/0"] = session
                return session

            pool.session = spy
            records = [await run_episode(pool, agent, 3)]
        return records

    records = asyncio.run(play())
    assert len(shown) >= 4 and all(record.error is None for record in records)
    assert shown == truth  # every turn: the session's transcript, untouched by the scribbles before
    for record in records:
        validate_messages(record.messages)
        assert all(m["content"] not in ("scribbled", "appended") for m in record.messages)


def test_a_failing_world_leaves_the_transcript_valid():
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    before = env.messages

    async def broken(call):
        raise RuntimeError("the world broke")

    env.session.backend.tick = broken
    with pytest.raises(RuntimeError):
        env.step(format_reply([("pwd", {})], "hermes"))
    assert env.messages == before


# -- the strict scripted server -----------------------------------------------------------

BAD_REQUESTS = {
    "null content without tool_calls": [SYSTEM, USER, {"role": "assistant", "content": None}, USER],
    "null content with tool_calls": [SYSTEM, USER, calling(call("a"), content=None), answer("a")],
    "orphan tool message": [SYSTEM, USER, answer("a")],
    "unknown role": [SYSTEM, {"role": "robot", "content": "x"}],
    "tool_calls entry not an object": [SYSTEM, USER, calling("pwd"), USER],
    "tool call without id": [SYSTEM, USER, calling({"type": "function", "function": {"name": "pwd",
                                                                                     "arguments": "{}"}}), USER],
    "unanswered call": [SYSTEM, USER, calling(call("a")), USER],
}


@pytest.fixture(scope="module")
def servers():
    with ScriptedModelServer() as strict, ScriptedModelServer(validation_status=500) as like_llama_cpp_python, \
            ScriptedModelServer(null_content=True) as like_openai:
        yield strict, like_llama_cpp_python, like_openai


def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


@pytest.mark.parametrize("shape", sorted(BAD_REQUESTS))
def test_the_scripted_server_refuses_each_bad_shape(servers, shape):
    strict, like_llama_cpp_python, _ = servers
    with pytest.raises(openai.BadRequestError) as caught:
        client(strict).chat.completions.create(model="scripted", messages=BAD_REQUESTS[shape])
    error = caught.value.body
    assert caught.value.status_code == 400 and error["type"] == "invalid_request_error"
    assert error["param"].startswith("messages") and "rule" in error["message"]
    with pytest.raises(openai.InternalServerError) as caught:
        client(like_llama_cpp_python).chat.completions.create(model="scripted", messages=BAD_REQUESTS[shape])
    assert caught.value.status_code == 500


def test_null_content_beside_tool_calls_is_accepted_where_openai_accepts_it(servers):
    _, _, like_openai = servers
    messages = [{"role": "system", "content": "# Treasure Hunt"}, USER, calling(call("a"), content=None), answer("a")]
    reply = client(like_openai).chat.completions.create(model="scripted", messages=messages)
    assert reply.choices[0].message is not None


def test_the_server_accepts_every_transcript_the_chat_envs_write(servers):
    strict = servers[0]
    env = ChatEnv(FORAGING, max_turns=3)
    messages = play(env, "hermes", 3)
    env.close()
    reply = client(strict).chat.completions.create(model="scripted-hermes", messages=messages, tools=env.tools)
    assert "<tool_call>" in reply.choices[0].message.content


def test_arena_agent_sends_tool_choice_extra_body_and_lists_tools_when_not_sent(tmp_path):
    from arena_envs.llm.cli import main

    with ScriptedModelServer() as server:
        code = main([HUNT, "--base-url", server.base_url, "--model", "scripted", "--episodes", "1", "--quiet",
                     "--tool-choice", "required", "--extra-body", '{"chat_template_kwargs": {"x": 1}}',
                     "--max-turns", "4", "--out", str(tmp_path / "a")])
        assert code == 0
        sent = server.requests_seen[0]
        assert sent["tool_choice"] == "required" and sent["chat_template_kwargs"] == {"x": 1}
        assert "tools" in sent
        server.requests_seen.clear()
        assert main([HUNT, "--base-url", server.base_url, "--model", "scripted-hermes", "--format", "hermes",
                     "--no-tools", "--tool-choice", "required", "--episodes", "1", "--quiet",
                     "--out", str(tmp_path / "b")]) == 0
        assert all("tools" not in sent and "tool_choice" not in sent for sent in server.requests_seen)
    record = json.loads((tmp_path / "b" / "transcripts.jsonl").read_text().splitlines()[0])
    system = record["messages"][0]["content"]
    assert '{"name":"check_treasure"' in system and "<tool_call>" in system
    assert record["success"]
    validate_transcript(record["messages"])


def test_arena_agent_refuses_an_unknown_tool_choice_before_the_run_and_takes_the_openai_object_form(tmp_path,
                                                                                                      capsys):
    """An unknown name went to the server and came back as HTTP 500 on every retry (issue 34, item 11)."""
    from arena_envs.llm.cli import main

    with ScriptedModelServer() as server:
        base = [HUNT, "--base-url", server.base_url, "--model", "scripted", "--episodes", "1", "--quiet",
                "--max-turns", "2"]
        for choice, why in (("look_around", "'look_around' is not one of this scenario's tools: pwd, cd, ls, cat"),
                            ('{"type": "function", "function": {"name": "fly"}}', "'fly' is not one of"),
                            ('{"type": "function", "name": "cat"}', '--tool-choice as JSON must be'),
                            ('{"type": "function"', "--tool-choice is not valid JSON")):
            assert main([*base, "--tool-choice", choice, "--out", str(tmp_path / "refused")]) == 2
            assert why in capsys.readouterr().err
        assert not server.requests_seen and not (tmp_path / "refused").exists()  # refused before the run
        assert main([FORAGING, "--agent", "scripted", "--episodes", "1", "--quiet", "--tool-choice", "cat",
                     "--out", str(tmp_path / "scripted")]) == 2  # checked against the scenario's own tools
        assert "move_to" in capsys.readouterr().err
        for k, choice in enumerate(("cat", '{"type": "function", "function": {"name": "cat"}}')):
            assert main([*base, "--tool-choice", choice, "--out", str(tmp_path / f"run{k}")]) == 0
            assert server.requests_seen[-1]["tool_choice"] == {"type": "function", "function": {"name": "cat"}}


# -- prompts that match the run -------------------------------------------------------------


def test_the_turn_budget_comes_from_max_turns():
    env = ChatEnv(HUNT, max_turns=8)
    messages, _ = env.reset(seed=0)
    assert "You have 8 turns" in messages[0]["content"] and "50" not in messages[0]["content"].split("\n")[-1]
    assert "[turn 0/8 |" in messages[1]["content"]
    step = env.step(format_reply([("pwd", {})], "openai"))
    assert "[turn 1/8 |" in step.messages[-1]["content"]
    env = ChatEnv(HUNT, max_calls=1)
    messages, _ = env.reset(seed=0)
    assert "You have 50 turns" in messages[0]["content"]
    assert messages[1]["content"].endswith("[turn 0/50 | cwd / | in progress]")
    env = ChatEnv(FORAGING, max_turns=3)
    messages, _ = env.reset(seed=0)
    assert "You have 3 turns" in messages[0]["content"] and messages[1]["content"].endswith("[turn 0/3]")
    assert "You have" not in ChatEnv(FORAGING).reset(seed=0)[0][0]["content"]  # ticks are the only limit


_SYNTAXES = {"hermes": "<tool_call>", "qwen3_xml": "<function=", "mistral": "[TOOL_CALLS]", "json": "```json",
             "llama3_json": '"parameters"', "tool_key": '"tool":'}


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_call_syntax_per_format_throughout(fmt):
    env = ChatEnv(HUNT, call_format=fmt)
    messages, _ = env.reset(seed=0)
    shown = {name for name, mark in _SYNTAXES.items() if mark in messages[0]["content"] + messages[1]["content"]}
    expected = {"hermes": {"hermes"}, "qwen3_xml": {"hermes", "qwen3_xml"}, "mistral": {"mistral"},
                "json": {"json", "tool_key"}, "bare_name": {"json", "tool_key"}, "llama3_json": {"llama3_json"},
                "openai": set()}[fmt]
    assert shown == expected
    assert '"tool": "cat"' not in messages[1]["content"]  # the hunt's own welcome syntax is gone


def test_the_no_call_wording_matches_what_the_env_does():
    hunt = ChatEnv(HUNT)
    system = hunt.reset(seed=0)[0][0]["content"]
    step = hunt.step("hmm")
    assert "still costs a turn" in system and "that cost a turn" in step.messages[-1]["content"]
    assert "tool calls 1/50" in step.messages[-1]["content"]
    foraging = ChatEnv(FORAGING)
    system = foraging.reset(seed=0)[0][0]["content"]
    step = foraging.step("hmm")
    assert "one tick with your current action carrying on" in system and step.info["ticks"] == 1
    assert "the world ran one tick" in step.messages[-1]["content"]
    ending = ChatEnv(FORAGING, on_no_call="end")
    assert "ends the episode" in ending.reset(seed=0)[0][0]["content"]
    assert "the episode ends" in ending.step("hmm").messages[-1]["content"]


def test_tools_in_prompt():
    env = ChatEnv(CRAFTING, tools_in_prompt=True)
    system = env.reset(seed=0)[0][0]["content"]
    listed = [json.loads(line) for line in system.split("\n") if line.startswith('{"name":"')]
    assert [t["name"] for t in listed] == [t["function"]["name"] for t in env.tools]
    assert '{"name":"' not in ChatEnv(CRAFTING).reset(seed=0)[0][0]["content"]


# -- the no-call penalty --------------------------------------------------------------------


def test_no_call_penalty_only_when_asked_and_only_without_a_readable_call():
    plain, penalised = ChatEnv(HUNT), ChatEnv(HUNT, no_call_penalty=0.25)
    for env in (plain, penalised):
        env.reset(seed=0)
    assert plain.step("hmm").reward == pytest.approx(-0.01)
    step = penalised.step("hmm")
    assert step.reward == pytest.approx(-0.26) and step.info["no_call_penalty"] == 0.25
    step = penalised.step("<tool_call>{'name': 'pwd'}</tool_call>")  # a near miss: no readable call
    assert step.info["parse_status"] == "near_miss" and step.reward == pytest.approx(-0.26)
    step = penalised.step(format_reply([("pwd", {})], "hermes"))
    assert step.reward == pytest.approx(-0.01) and step.info["no_call_penalty"] == 0.0
    assert "costs 0.25 reward" in penalised.messages[0]["content"]
    assert penalised.session.episode_return == pytest.approx(-0.26 * 2 - 0.01)
    with pytest.raises(ValueError, match="no_call_penalty"):
        ChatEnv(HUNT, no_call_penalty=-1)


def test_strict_parse_reads_only_the_runs_format():
    env = ChatEnv(HUNT, call_format="hermes", strict_parse=True)
    env.reset(seed=0)
    step = env.step('{"name": "pwd", "arguments": {}}')
    assert step.info["parse_status"] == "wrong_format" and step.info["ticks"] == 1
    assert "strict parse" in step.messages[-1]["content"]
    assert env.step(format_reply([("pwd", {})], "hermes")).info["parse_status"] == "call"
    assert re.search(r"\[turn 2/50", env.messages[-1]["content"])


def test_arena_agent_reports_turns_by_parse_status(tmp_path, capsys):
    from arena_envs.llm.cli import main

    with ScriptedModelServer() as server:
        server.faults["0/0"] = "invalid"  # the first reply: calls that do not run
        assert main([HUNT, "--base-url", server.base_url, "--model", "scripted-hermes", "--format", "hermes",
                     "--episodes", "1", "--quiet", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "transcripts.jsonl").read_text())
    assert record["parse_statuses"]["call"] == record["turns"]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["turns_by_parse_status"] == {"call": record["turns"]}
    assert f"turns by parse status  call {record['turns']}" in capsys.readouterr().out
