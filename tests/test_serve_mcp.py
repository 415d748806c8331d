"""arena-serve's MCP door: the real server on 127.0.0.1, driven by OpenEnv's own MCP client
(``openenv.core.mcp_client.MCPToolClient``) and by plain MCP JSON-RPC, as RFC 003 has it."""

from __future__ import annotations

import contextlib
import json

import gymnasium as gym
import pytest
import requests
from openenv.core import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from serve_helpers import ScriptedCaller, scripted_foraging_episode
from websockets.sync.client import connect

import arena_envs  # noqa: F401
from arena_envs.scripted import ScriptedForager
from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running
from arena_envs.serve.mcp import as_mcp_tools
from arena_envs.tools import tool_schemas
from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS, OracleAgent

# an MCP client makes an HTTP session (and one POST per call): the guard's HTTP rate is set for play
LIMITS = Limits(http_rate=10_000, http_burst=10_000)


@pytest.fixture(scope="module")
def servers():
    apps = {name: make_app(name, max_sessions=4, limits=LIMITS) for name in ("foraging", "treasure_hunt",
                                                                                "team_capture")}
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(running(app)) for name, app in apps.items()}


def rpc(url: str, method: str, **params) -> dict:
    answer = requests.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                           timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_list_tools_gives_the_schemas_the_session_sends_at_reset(servers):
    for name, schemas in (("foraging", tool_schemas()), ("treasure_hunt", TREASURE_HUNT_TOOL_SCHEMAS)):
        with MCPToolClient(base_url=servers[name]).sync() as env:
            tools = env.list_tools()
            first = env.reset(seed=1).observation
        assert [(t.name, t.description, t.input_schema) for t in tools] == [
            (s["function"]["name"], s["function"]["description"], s["function"]["parameters"]) for s in schemas]
        # OpenEnv's MCP client reads an answer with a "tools" field as a tool list, keeping its metadata:
        # the reset answer's metadata is what it shows
        assert first.metadata["text"].strip() and first.metadata["observation"]
        assert not {t.name for t in tools} & {"reset", "step", "state", "close"}


def test_treasure_hunt_played_to_the_treasure_with_the_oracles_calls(servers):
    env = gym.make("arena_envs/TreasureHunt-v0")
    text, _ = env.reset(seed=5)
    agent, local = OracleAgent(), []
    while True:
        text, reward, terminated, truncated, info = env.step(agent.act(text))
        local.append((text, reward))
        if terminated or truncated:
            break
    agent, remote = OracleAgent(), []
    with MCPToolClient(base_url=servers["treasure_hunt"]).sync() as client:
        text = client.reset(seed=5).observation.metadata["text"]
        done = False
        while not done:
            call = agent.act(text)
            answer = client.call_tool(call.pop("tool"), **call)
            text, done = answer["text"], answer["done"]
            remote.append((text, answer["reward"]))
        assert client.state().step_count == len(local)
    assert remote == local
    assert answer["info"]["success"] and answer["terminated"] and "TREASURE FOUND" in text


def test_foraging_episode_through_mcp_matches_the_in_process_one(servers):
    env, local, info = scripted_foraging_episode(11)
    params = env.unwrapped.scenario.params
    caller, remote = ScriptedCaller(ScriptedForager(params), params, env.observation_space), []
    with MCPToolClient(base_url=servers["foraging"]).sync() as client:
        served = client.reset(seed=11, arrays=True).observation.metadata
        while True:
            call = caller.act(served)
            served = client.call_tool(call["tool"], **call.get("params", {}))
            remote.append((served["reward"], served["terminated"], served["truncated"]))
            if served["done"]:
                break
    assert remote == local
    assert served["info"] == info and info["success"]


def test_a_websocket_step_takes_mcp_actions_and_carries_the_reward(servers):
    with GenericEnvClient(base_url=servers["foraging"]).sync() as env:
        listed = env.step({"type": "list_tools"})
        assert [t["name"] for t in listed.observation["tools"]][:2] == ["move_to", "collect"]
        env.reset(seed=3)
        moved = env.step({"type": "call_tool", "tool_name": "move_to", "arguments": {"target": [4, 0, 4]}})
        result = moved.observation["result"]
        assert moved.observation["tool_name"] == "move_to" and not result["is_error"]
        assert result["data"]["observation"]["tick"] == 1 and moved.reward == result["data"]["reward"]
        assert result["content"][0]["text"] == result["data"]["text"]
        assert env.state()["step_count"] == 1
        with pytest.raises(RuntimeError, match="needs 'tool_name'"):
            env.step({"type": "call_tool", "tool_name": 5})
        assert env.state()["step_count"] == 1  # refused without a tick


def test_openenv_mcp_frames_over_the_websocket_reach_the_sessions_tools(servers):
    with connect(servers["treasure_hunt"].replace("http://", "ws://") + "/ws") as ws:
        def send(message: dict) -> dict:
            ws.send(json.dumps(message))
            return json.loads(ws.recv(timeout=10))

        listed = send({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}})
        assert "cat" in {t["name"] for t in listed["data"]["result"]["tools"]}
        send({"type": "reset", "data": {"seed": 5}})
        called = send({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                               "params": {"name": "cat", "arguments": {"file": "start.txt"}}}})
    local = gym.make("arena_envs/TreasureHunt-v0")
    local.reset(seed=5)
    assert called["data"]["result"]["data"]["text"] == local.step({"tool": "cat", "file": "start.txt"})[0]


def test_a_team_session_calls_command_its_first_agent(servers):
    with MCPToolClient(base_url=servers["team_capture"]).sync() as env:
        env.reset(seed=3)
        answer = env.call_tool("move_to", target=[-15, 0, -15])
        assert answer["observation"]["blue_agent_1"]["last_action_result"]["success"]
        assert answer["observation"]["blue_agent_2"]["last_action_result"] is None


# -- bad input: a clear error, no tick, no effect on the session ------------------------------

def test_unknown_tools_reserved_names_and_calls_before_reset_are_refused_clearly(servers):
    url = servers["foraging"]
    with MCPToolClient(base_url=url).sync() as env:
        with pytest.raises(RuntimeError, match="no episode in this session yet"):
            env.call_tool("idle")
        env.reset(seed=2)
        for name in ("reset", "step", "teleport"):  # the harness's names are no tools
            with pytest.raises(RuntimeError, match=f"tool_not_found: no tool '{name}'"):
                env.call_tool(name)
        assert env.state().step_count == 0  # none of them cost a tick
        bad = env.call_tool("collect", target_name="Nothing7")  # the game's own error: a tick, like any bad call
        assert bad["observation"]["last_action_result"]["error_code"] == "NOT_FOUND" and bad["observation"]["tick"] == 1
        session = env._production_session_id
        for params in ({"name": 7}, {"name": "idle", "arguments": [1]}):
            answer = rpc(url, "tools/call", session_id=session, **params)
            assert "invalid_args" in answer["error"]["message"], answer
        assert env.call_tool("idle")["observation"]["tick"] == 2  # the session goes on
    with pytest.raises(ValueError, match="reserves"):
        as_mcp_tools([{"type": "function", "function": {"name": "reset", "parameters": {}}}])


def test_a_session_reached_by_id_only_over_http_mcp(servers):
    url = servers["treasure_hunt"]
    created = rpc(url, "openenv/session/create")["result"]["session_id"]
    try:
        listed = rpc(url, "tools/list", session_id=created)["result"]["tools"]
        assert {t["name"] for t in listed} >= {"cd", "ls", "cat", "check_treasure"}
        assert "unknown session_id" in rpc(url, "tools/call", session_id="nope", name="ls")["error"]["message"].lower()
    finally:
        rpc(url, "openenv/session/close", session_id=created)
