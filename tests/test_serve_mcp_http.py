"""arena-serve's plain MCP endpoint (/mcp/http, MCP's streamable HTTP transport), driven by fastmcp's Client
against the real server on 127.0.0.1: the MCP lifecycle, the tools, whole episodes, and bad input."""

from __future__ import annotations

import asyncio
import contextlib
import json

import gymnasium as gym
import httpx
import pytest
import requests
from fastmcp import Client
from fastmcp.exceptions import ToolError
from mcp.shared.exceptions import McpError
from serve_helpers import ScriptedCaller, scripted_foraging_episode

import arena_envs  # noqa: F401
from arena_envs.scripted import ScriptedForager
from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import hub_of, running
from arena_envs.serve.mcp_http import PATH
from arena_envs.tools import tool_schemas
from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS, OracleAgent

LIMITS = Limits(http_rate=10_000, http_burst=10_000, max_http_sessions=4, http_sessions_per_client=4)


@pytest.fixture(scope="module")
def servers():
    apps = {name: make_app(name, max_sessions=4, limits=LIMITS) for name in ("foraging", "treasure_hunt")}
    with contextlib.ExitStack() as stack:
        yield {name: (stack.enter_context(running(app)) + PATH, app) for name, app in apps.items()}


def client(url: str, **query) -> Client:
    return Client(url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""))


def test_a_plain_mcp_client_initializes_and_lists_the_tools_a_reset_sends(servers):
    async def listed(name: str):
        async with client(servers[name][0]) as mcp:
            assert mcp.initialize_result.serverInfo.name == f"arena-{name}"
            return await mcp.list_tools(), await mcp.list_resources()

    for name, schemas in (("foraging", tool_schemas()), ("treasure_hunt", TREASURE_HUNT_TOOL_SCHEMAS)):
        tools, resources = asyncio.run(listed(name))
        assert [(t.name, t.description, t.inputSchema) for t in tools] == [
            (s["function"]["name"], s["function"]["description"], s["function"]["parameters"]) for s in schemas]
        assert {str(r.uri) for r in resources} == {"arena://observation", "arena://answer"}
    assert hub_of(servers["foraging"][1]).sessions == {}  # listing starts no episode: no world taken


def test_treasure_hunt_played_to_the_treasure_with_the_oracles_calls(servers):
    env = gym.make("arena_envs/TreasureHunt-v0")
    opening, _ = env.reset(seed=5)
    agent, local = OracleAgent(), []
    text = opening
    while True:
        text, reward, terminated, truncated, info = env.step(agent.act(text))
        local.append((text, reward))
        if terminated or truncated:
            break

    async def remote():
        agent, played = OracleAgent(), []
        async with client(servers["treasure_hunt"][0], seed=5) as mcp:
            first = (await mcp.read_resource("arena://observation"))[0].text
            text, done = first, False
            while not done:
                call = agent.act(text)
                result = await mcp.call_tool(call.pop("tool"), call)
                text, done = result.content[0].text, result.data["done"]
                played.append((text, result.data["reward"]))
            with pytest.raises(ToolError, match="the episode is over"):  # nothing plays after the end
                await mcp.call_tool("ls", {})
            return first, played, result.data

    first, played, last = asyncio.run(remote())
    assert first == opening and played == local
    assert last["info"]["success"] and last["terminated"] and "TREASURE FOUND" in played[-1][0]


def test_a_foraging_episode_matches_the_in_process_one(servers):
    env, local, info = scripted_foraging_episode(11)
    params = env.unwrapped.scenario.params

    async def remote():
        caller, played = ScriptedCaller(ScriptedForager(params), params, env.observation_space), []
        async with client(servers["foraging"][0], seed=11, arrays="true") as mcp:
            served = json.loads((await mcp.read_resource("arena://answer"))[0].text)
            while not served["done"]:
                call = caller.act(served)
                served = (await mcp.call_tool(call["tool"], call.get("params", {}), raise_on_error=False)).data
                played.append((served["reward"], served["terminated"], served["truncated"]))
        return played, served

    played, served = asyncio.run(remote())
    assert played == local and served["info"] == info and info["success"]


def test_sessions_play_their_own_worlds_at_once(servers):
    url = servers["treasure_hunt"][0]

    async def opening_and_first_call(seed: int):
        async with client(url, seed=seed) as mcp:
            first = (await mcp.read_resource("arena://observation"))[0].text
            return first, (await mcp.call_tool("cat", {"file": "start.txt"})).content[0].text

    async def both():
        return await asyncio.gather(*(opening_and_first_call(seed) for seed in (1, 2, 1)))

    one, two, again = asyncio.run(both())
    assert one == again and one != two  # the same seed, the same world; another seed, another
    local = gym.make("arena_envs/TreasureHunt-v0")
    local.reset(seed=2)
    assert two[1] == local.step({"tool": "cat", "file": "start.txt"})[0]


def test_bad_input_is_a_json_rpc_error_and_costs_nothing(servers):
    url, app = servers["foraging"]

    async def probe():
        async with client(url, seed=3) as mcp:
            for name, arguments in (("teleport", {}), ("reset", {})):  # no such tool: the harness's names neither
                with pytest.raises(McpError, match=f"no tool '{name}'"):
                    await mcp.call_tool_mcp(name, arguments)
            with pytest.raises(McpError, match="no resource"):
                await mcp.read_resource("arena://nothing")
            answer = json.loads((await mcp.read_resource("arena://answer"))[0].text)
            assert answer["observation"]["tick"] == 0  # none of it cost a tick
            bad = await mcp.call_tool("collect", {"target_name": "Nothing7"}, raise_on_error=False)
            failed = bad.structured_content["observation"]["last_action_result"]  # the game's own error: a tick
            assert bad.is_error and failed["error_code"] == "NOT_FOUND"
            assert (await mcp.call_tool("idle", {})).data["observation"]["tick"] == 2  # the session goes on
        for query in ({"seed": "x"}, {"seed": "-1"}, {"arrays": "maybe"}):
            async with client(url, **query) as mcp:
                with pytest.raises(McpError, match="seed|arrays"):
                    await mcp.call_tool_mcp("idle", {})

    asyncio.run(probe())
    # arguments that are not an object: refused by the protocol's own validation, the server carries on
    session = requests.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        headers={"Accept": "application/json, text/event-stream"}, timeout=10)
    headers = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": session.headers["mcp-session-id"],
               "Mcp-Protocol-Version": "2025-06-18", "Content-Type": "application/json"}
    requests.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers, timeout=10)
    answer = requests.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                      "params": {"name": "idle", "arguments": [1]}}, headers=headers, timeout=10)
    assert answer.json()["error"]["code"] == -32602, answer.text
    assert requests.post(url, data=b"{not json", headers=headers, timeout=10).json()["error"]["code"] == -32700
    requests.delete(url, headers=headers, timeout=10)
    assert requests.get(url.removesuffix(PATH) + "/health", timeout=10).ok


def test_the_world_is_freed_when_the_mcp_session_ends(servers):
    url, app = servers["treasure_hunt"]
    hub = hub_of(app)

    async def play():
        async with client(url, seed=4) as mcp:
            await mcp.call_tool("ls", {})
            assert len(hub.sessions) == 1

    asyncio.run(play())
    for _ in range(100):
        if not hub.sessions:
            break
        asyncio.run(asyncio.sleep(0.05))
    assert hub.sessions == {} and hub.envs == {}


def test_openenvs_own_mcp_route_still_answers(servers):
    base = servers["treasure_hunt"][0].removesuffix(PATH)
    created = requests.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"},
                            timeout=10).json()["result"]["session_id"]
    listed = requests.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                                                "params": {"session_id": created}}, timeout=10).json()
    assert "cat" in {t["name"] for t in listed["result"]["tools"]}
    requests.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "openenv/session/close",
                                       "params": {"session_id": created}}, timeout=10)


def test_both_http_doors_hold_their_own_share_and_leave_the_websockets_theirs():
    """OpenEnv's /mcp (JSON-RPC sessions) and /mcp/http (MCP sessions) each hold max_http_sessions at once,
    from worlds of their own: both full together, each refuses one more, saying why, and the WebSocket
    clients still get their max_sessions worlds; every session plays its own world meanwhile."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    limits = Limits(http_rate=10_000, http_burst=10_000, max_http_sessions=2, http_sessions_per_client=3,
                    sessions_per_client=2)
    app = make_app("treasure_hunt", max_sessions=2, limits=limits)

    def rpc(url: str, method: str, **params) -> dict:
        return requests.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                             timeout=10).json()

    def reset(ws, seed: int) -> dict:
        ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
        return json.loads(ws.recv(timeout=30))

    async def fill(url: str) -> None:
        async with contextlib.AsyncExitStack() as stack:
            mcps = [await stack.enter_async_context(client(url + PATH, seed=seed)) for seed in range(2)]
            await asyncio.gather(*(mcp.call_tool("ls", {}) for mcp in mcps))
            made = [rpc(url, "openenv/session/create") for _ in range(2)]
            assert all("result" in answer for answer in made), made
            refused = rpc(url, "openenv/session/create")
            assert "the server holds its 2 sessions made over HTTP" in json.dumps(refused), refused
            with pytest.raises(httpx.HTTPStatusError, match="503"):
                async with client(url + PATH):
                    pass
            ws_url = url.replace("http://", "ws://") + "/ws"
            with connect(ws_url) as first, connect(ws_url) as second:
                assert reset(first, 1)["type"] == reset(second, 2)["type"] == "observation"
                stats = requests.get(url + "/stats", timeout=10).json()
                assert (stats["handles"], stats["http_sessions"]) == (6, 2), stats  # 2 /mcp, 2 /mcp/http, 2 sockets
                with connect(ws_url) as third:
                    try:
                        assert reset(third, 3)["data"]["code"] == "CAPACITY_REACHED"
                    except ConnectionClosed as closed:  # the close beat the send: refused all the same
                        assert closed.rcvd.code == 1013 and "CAPACITY_REACHED" in closed.rcvd.reason
                answers = [await mcp.call_tool("pwd", {}) for mcp in mcps]  # a refused call raises ToolError
                assert all(answer.content[0].text.strip() for answer in answers)
            for answer in made:
                closed = rpc(url, "openenv/session/close", session_id=answer["result"]["session_id"])
                assert "error" not in closed, closed
            assert "result" in rpc(url, "openenv/session/create")  # a freed /mcp slot is taken again

    with running(app) as url:
        asyncio.run(fill(url))


@pytest.mark.timeout(1800)  # a minute or two alone; far longer on a machine other jobs share
def test_the_real_smollm2_plays_a_hunt_through_a_plain_mcp_client():
    """SmolLM2-135M behind llama.cpp's server (native tool calls), its tools listed and called by fastmcp's Client."""
    import openai

    from arena_envs.llm import validate_messages
    from arena_envs.llm.llama_server import INSTALL_HINT, LlamaServer, server_available

    if not server_available():
        pytest.fail(f"the real-model tier needs llama.cpp's server: {INSTALL_HINT}")
    # a 3-step hunt, so that the episode ends by the env's rule whatever the model writes
    app = make_app("treasure_hunt", max_sessions=2, limits=LIMITS, max_steps=3)

    async def play(base_url: str, url: str):
        chat = openai.AsyncOpenAI(base_url=base_url, api_key="unused", timeout=600)
        async with client(url, seed=3) as mcp:
            tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                       "parameters": t.inputSchema}} for t in await mcp.list_tools()]
            messages = [{"role": "user", "content": (await mcp.read_resource("arena://observation"))[0].text}]
            answer, ticks = {"done": False}, 0
            for _ in range(8):  # replies: a reply without a call is asked again
                reply = await chat.chat.completions.create(model="smollm2-tools", messages=messages, tools=tools,
                                                           tool_choice="auto", max_tokens=48, temperature=0.0, seed=0)
                message = reply.choices[0].message
                calls = [call.model_dump() for call in message.tool_calls or []]
                messages.append({"role": "assistant", "content": message.content or "",
                                 **({"tool_calls": calls} if calls else {})})
                if not calls:
                    messages.append({"role": "user", "content": "Call one of the tools."})
                for call in calls:
                    try:
                        arguments = json.loads(call["function"]["arguments"] or "{}")
                        result = await mcp.call_tool(call["function"]["name"], arguments, raise_on_error=False)
                        answer, ticks = result.structured_content, ticks + 1
                        content = result.content[0].text
                    except (McpError, ValueError) as error:  # the model's mistake, told back to it
                        content = f"Error: {error}"
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
                if answer["done"]:
                    break
        return messages, tools, answer, ticks

    with LlamaServer(threads=2) as llama, running(app) as url:
        messages, tools, answer, ticks = asyncio.run(play(llama.base_url, url + PATH))
    assert answer["done"] and (answer["terminated"] or answer["truncated"]), messages
    assert ticks >= 1
    validate_messages(messages, tools)
