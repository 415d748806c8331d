"""arena-serve: the real server on 127.0.0.1, driven by OpenEnv's own client and validator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import gymnasium as gym
import pytest
import requests
from openenv.core import GenericEnvClient
from process_helpers import free_port, wait_until_answered
from serve_helpers import ScriptedCaller
from typer.testing import CliRunner
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

import arena_envs  # noqa: F401
from arena_envs.scripted import ScriptedCrafter, ScriptedForager
from arena_envs.serve import Limits, make_app
from arena_envs.serve.app import running
from arena_envs.treasure_hunt import OracleAgent

SCENARIO_ENVS = {"foraging": ("arena_envs/Foraging-v0", ScriptedForager),
                 "crafting": ("arena_envs/Crafting-v0", ScriptedCrafter)}


@pytest.fixture(scope="module")
def servers():
    """One server per scenario, all running while the module's tests do."""
    apps = {"foraging": make_app("foraging", max_sessions=260, limits=Limits(sessions_per_client=260)),
            "crafting": make_app("crafting", max_sessions=4),
            "treasure_hunt": make_app("treasure_hunt", max_sessions=4),
            "team_capture": make_app("team_capture", max_sessions=4)}
    with contextlib.ExitStack() as stack:
        yield {name: (stack.enter_context(running(app)), app) for name, app in apps.items()}


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def call(ws, message: dict | str | bytes) -> dict:
    ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(ws.recv(timeout=10))


def stats(url: str, **headers) -> dict:
    return requests.get(url + "/stats", headers=headers, timeout=10).json()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


# -- the OpenEnv contract ------------------------------------------------------------------

def test_openenv_validate_passes_for_every_scenario_served(servers):
    from openenv.cli.__main__ import app as openenv_cli

    for name, (url, _) in servers.items():
        result = CliRunner().invoke(openenv_cli, ["validate", url])
        assert result.exit_code == 0, f"{name}: {result.output}"
        assert "Verdict: PASS" in result.output


@pytest.mark.parametrize("scenario", ["foraging", "crafting"])
def test_scripted_episode_over_the_network_matches_the_in_process_one(servers, scenario):
    env_id, agent_class = SCENARIO_ENVS[scenario]
    url, _ = servers[scenario]
    env = gym.make(env_id)
    params = env.unwrapped.scenario.params
    obs, _ = env.reset(seed=11)
    agent, local = agent_class(params), []
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        local.append((float(reward), terminated, truncated, float(obs["agent"][0]), float(obs["agent"][1])))
        if terminated or truncated:
            break
    caller, remote = ScriptedCaller(agent_class(params), params, env.observation_space), []
    with GenericEnvClient(base_url=url).sync() as client:
        result = client.reset(seed=11, arrays=True)
        while not result.done:
            result = client.step(caller.act(result.observation))
            served = result.observation
            x, _, z = served["observation"]["position"]
            remote.append((result.reward, served["terminated"], served["truncated"], x, z))
        assert client.state()["step_count"] == len(local)
    assert remote == local
    assert served["info"] == info and info["success"]  # the scripted agent wins, the same way


def test_treasure_hunt_oracle_episode_matches_the_in_process_one(servers):
    url, _ = servers["treasure_hunt"]
    env = gym.make("arena_envs/TreasureHunt-v0")
    text, _ = env.reset(seed=5)
    agent, local = OracleAgent(), [text]
    while True:
        text, reward, terminated, truncated, info = env.step(agent.act(text))
        local.append((text, reward, terminated, truncated))
        if terminated or truncated:
            break
    agent = OracleAgent()
    with GenericEnvClient(base_url=url).sync() as client:
        result = client.reset(seed=5)
        remote = [result.observation["text"]]
        assert {tool["function"]["name"] for tool in result.observation["tools"]} >= {"cd", "ls", "cat"}
        while not result.done:
            result = client.step(agent.act(result.observation["text"]))
            served = result.observation
            remote.append((served["text"], result.reward, served["terminated"], served["truncated"]))
    assert remote == local and info["success"] and served["info"] == info


def test_a_team_session_commands_the_blue_team_against_the_scripted_red_team(servers):
    url, _ = servers["team_capture"]
    with GenericEnvClient(base_url=url).sync() as client:
        result = client.reset(seed=3)
        assert set(result.observation["observation"]) == {"blue_agent_1", "blue_agent_2"}
        targets = {"blue_agent_1": [-15, 0, -15], "blue_agent_2": [15, 0, -15]}  # points A and B
        result = client.step({"calls": {name: {"tool": "move_to", "params": {"target": target}}
                                        for name, target in targets.items()}})
        for name in targets:
            assert result.observation["observation"][name]["last_action_result"]["success"]
        for _ in range(150):  # agents left out carry on with their orders
            result = client.step({"calls": {}})
        info = result.observation["info"]
        assert info["blue_points"] >= 1 and info["blue_score"] > 0
        with pytest.raises(RuntimeError, match="not on this team"):  # the other team is not yours
            client.step({"calls": {"red_agent_1": {"tool": "idle"}}})
        assert client.step({"calls": {}}).observation["observation"]["blue_agent_1"]["tick"] == 152


def test_256_concurrent_sessions_step_together_with_no_cross_talk(servers):
    url, app = servers["foraging"]
    pool = app.state.hub.pool
    active_counts, original = [], pool.scenario.step

    def counting(state, actions, active=None):
        active_counts.append(state.batch_size if active is None else int(active.sum()))  # worlds stepped
        return original(state, actions, active)

    async def session(seed: int):
        async with GenericEnvClient(base_url=url, message_timeout_s=120) as env:
            first = await env.reset(seed=seed)
            ticks = []
            for k in range(4):
                result = await env.step({"tool": "move_to", "params": {"target": [seed % 20, 0, k * 3 - 5]}})
                ticks.append(result.observation["observation"]["tick"])
            state = await env.state()
            return first.observation["observation"], ticks, state["step_count"]

    async def main():
        return await asyncio.gather(*(session(seed) for seed in range(256)))

    pool.scenario.step = counting
    try:
        results = asyncio.run(main())
    finally:
        del pool.scenario.step
    solo = {}
    for seed in (0, 1, 137, 255):
        obs, _ = gym.make("arena_envs/Foraging-v0").reset(seed=seed)
        solo[seed] = float(obs["agent"][0]), float(obs["agent"][1])
    for seed, (first, ticks, steps) in enumerate(results):
        assert ticks == [1, 2, 3, 4] and steps == 4  # each session saw only its own steps
        if seed in solo:
            assert (first["position"][0], first["position"][2]) == solo[seed]
    assert len({tuple(first["position"]) for first, _, _ in results}) > 200  # 256 different worlds
    assert max(active_counts) >= 16  # sessions stepping together shared one numpy step
    assert sum(active_counts) == 256 * 4
    wait_for(lambda: stats(url)["sessions"] == 0)  # every closed session gave its world back
    assert stats(url)["free_worlds"] == stats(url)["worlds"]


# -- robustness --------------------------------------------------------------------------

def test_session_cap_refuses_clearly_then_admits_after_a_close():
    with running(make_app("foraging", max_sessions=2, limits=Limits(sessions_per_client=2))) as url:
        with connect(ws_url(url)) as second:
            with connect(ws_url(url)) as first:
                for ws in (first, second):
                    assert call(ws, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
                with GenericEnvClient(base_url=url).sync() as third:
                    with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                        third.reset()
            wait_for(lambda: stats(url)["sessions"] == 1)
            with GenericEnvClient(base_url=url).sync() as third:
                assert third.reset(seed=2).observation["observation"]["tick"] == 0
            assert call(second, {"type": "step", "data": {"tool": "idle"}})["type"] == "observation"


def test_idle_sessions_are_reclaimed_and_their_worlds_freed():
    app = make_app("crafting", max_sessions=3, limits=Limits(idle_timeout=1.0))
    with running(app) as url, connect(ws_url(url)) as idle, connect(ws_url(url)) as busy:
        for ws in (idle, busy):
            call(ws, {"type": "reset", "data": {"seed": 0}})
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # busy keeps talking, idle says nothing
            assert call(busy, {"type": "step", "data": {"tool": "idle"}})["type"] == "observation"
            time.sleep(0.1)
        notice = json.loads(idle.recv(timeout=5))
        assert notice["data"]["code"] == "SESSION_RECLAIMED"
        with pytest.raises(ConnectionClosed) as closed:
            idle.recv(timeout=5)
        assert closed.value.rcvd.code == 4408
        wait_for(lambda: stats(url)["sessions"] == 1)
        assert stats(url)["free_worlds"] == stats(url)["worlds"] - 1 and stats(url)["reclaimed"] == 1
        assert call(busy, {"type": "step", "data": {"tool": "idle"}})["type"] == "observation"


def test_a_client_that_disconnects_mid_episode_frees_its_world():
    with running(make_app("foraging", max_sessions=4)) as url, connect(ws_url(url)) as ws:
        call(ws, {"type": "reset", "data": {"seed": 3}})
        call(ws, {"type": "step", "data": {"tool": "move_to", "params": {"target": [5, 0, 5]}}})
        assert stats(url)["sessions"] == 1
        ws.socket.close()  # gone without a goodbye
        wait_for(lambda: stats(url)["sessions"] == 0)
        assert stats(url)["free_worlds"] == stats(url)["worlds"]


def test_malformed_frames_get_an_error_and_the_session_goes_on():
    limits = Limits(max_message_bytes=4096)
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url:
        with connect(ws_url(url)) as ws:
            assert call(ws, {"type": "reset", "data": {"seed": 4}})["type"] == "observation"
            bad = [b"\x00\x01binary", "not json", "[1, 2]", "{unclosed", '"text"', "x" * 5000,
                   '{"type": "step", "data": ' + "[" * 1500 + "]" * 1500 + "}",
                   {"type": "dance"}, {"type": "step"}, {"type": "step", "data": {"tool": 7}},
                   {"type": "reset", "data": {"seed": -3}}, {"type": "reset", "data": {"color": "red"}}]
            for frame in bad:
                answer = call(ws, frame)
                assert answer["type"] == "error", frame
                assert answer["data"]["message"]
            step = call(ws, {"type": "step", "data": {"tool": "no_such_tool"}})  # a bad call costs a tick
            result = step["data"]["observation"]["observation"]["last_action_result"]
            assert result["error_code"] == "INVALID_PARAMS" and "no_such_tool" in result["error_message"]
            step = call(ws, {"type": "step", "data": {"tool": "query_world"}})
            assert step["data"]["observation"]["observation"]["tick"] == 2
        huge = requests.post(url + "/step", data=b"{" + b" " * 10_000 + b"}", timeout=10)
        assert huge.status_code == 413
        assert requests.post(url + "/step", data=b"{nope", timeout=10).status_code == 422
        stateless = requests.post(url + "/step", json={"action": {"tool": "idle"}}, timeout=10)
        assert stateless.status_code == 409 and "reset" in stateless.json()["detail"]
        assert requests.post(url + "/reset", json={"seed": 9}, timeout=10).json()["observation"]["text"]
        assert requests.get(url + "/health", timeout=10).json()["status"] == "healthy"


def test_frames_over_the_rate_limit_are_refused_and_the_session_goes_on():
    limits = Limits(ws_rate=1, ws_burst=5)  # 5 at once, then one a second
    with running(make_app("foraging", max_sessions=2, limits=limits)) as url, connect(ws_url(url)) as ws:
        answers = [call(ws, {"type": "reset", "data": {"seed": 1}})]
        answers += [call(ws, {"type": "step", "data": {"tool": "idle"}}) for _ in range(9)]
        codes = [a["data"].get("code") if a["type"] == "error" else "ok" for a in answers]
        assert codes.count("ok") == 5 and codes.count("RATE_LIMITED") == 5
        time.sleep(1.1)
        assert call(ws, {"type": "step", "data": {"tool": "idle"}})["type"] == "observation"


def test_every_route_needs_the_api_key_when_one_is_set():
    with running(make_app("treasure_hunt", max_sessions=2, limits=Limits(api_key="s3cret"))) as url:
        for path in ("/health", "/schema", "/metadata", "/stats", "/docs"):
            assert requests.get(url + path, timeout=10).status_code == 401
            assert requests.get(url + path, headers={"X-API-Key": "wrong"}, timeout=10).status_code == 401
        assert requests.post(url + "/reset", json={}, timeout=10).status_code == 401
        assert requests.get(url + "/health", headers={"Authorization": "Bearer s3cret"}, timeout=10).ok
        with pytest.raises(InvalidStatus):
            connect(ws_url(url), additional_headers={"Authorization": "Bearer nope"})
        with GenericEnvClient(base_url=url, headers={"Authorization": "Bearer s3cret"}).sync() as env:
            assert "start.txt" in env.reset(seed=1).observation["text"]


def test_no_session_can_reach_another_by_id():
    with running(make_app("foraging", max_sessions=4)) as url, connect(ws_url(url)) as mine:
        call(mine, {"type": "reset", "data": {"seed": 2}})
        before = call(mine, {"type": "state"})["data"]
        for guess in (str(uuid.uuid4()), before["episode_id"]):
            with pytest.raises(InvalidStatus):  # attaching to a session by id is refused
                connect(ws_url(url) + f"?session_id={guess}")
            closing = requests.post(url + "/mcp", timeout=10, json={
                "jsonrpc": "2.0", "id": 1, "method": "openenv/session/close", "params": {"session_id": guess}})
            assert closing.json()["error"]["message"].startswith("Unknown session_id")
        step = call(mine, {"type": "step", "data": {"tool": "idle"}})
        assert step["data"]["observation"]["observation"]["tick"] == 1  # untouched by the attempts
        assert call(mine, {"type": "state"})["data"]["step_count"] == before["step_count"] + 1


def test_shutdown_answers_the_call_in_flight_before_closing():
    app = make_app("foraging", max_sessions=4)
    hub, original = app.state.hub, app.state.hub._step

    async def slow_step(session, action):  # a step still running when the shutdown starts
        await asyncio.sleep(0.5)
        return await original(session, action)

    hub._step = slow_step
    with running(app, drain_timeout=10) as url, connect(ws_url(url)) as ws:
        call(ws, {"type": "reset", "data": {"seed": 0}})
        ws.send(json.dumps({"type": "step", "data": {"tool": "idle"}}))
        time.sleep(0.1)
        app.state.server.should_exit = True
        answer = json.loads(ws.recv(timeout=15))
        assert answer["type"] == "observation" and answer["data"]["observation"]["observation"]["tick"] == 1
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=15)
    assert app.state.guard.draining


def test_arena_serve_cli_binds_loopback_and_stops_cleanly_on_sigterm(tmp_path):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "arena_envs.serve", "treasure_hunt", "--port", str(port),
                                "--max-sessions", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_answered(process, url + "/health", timeout=60)
        with GenericEnvClient(base_url=url).sync() as env:
            assert env.reset(seed=1).observation["text"]
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    # uvicorn re-raises the signal once it has shut down, as a process stopped by it should
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Uvicorn running on http://127.0.0.1:" in output
    assert "drained: every call in flight was answered" in output and "Finished server process" in output


def test_the_serving_guide_rollout_runs_against_the_server():
    """The serving guide's TRL-style rollout, with a scripted "model" writing OpenAI tool calls."""
    readme = open(os.path.join(os.path.dirname(__file__), "..", "docs", "guide", "serving.md")).read()
    start = readme.index("import asyncio, json\nfrom openenv.core import GenericEnvClient")
    code = readme[start:readme.index("```", start)]
    namespace: dict = {}

    async def generate(messages, tools):
        turns = len(messages) // 3 + 1  # this rollout's turn
        assert {tool["function"]["name"] for tool in tools} >= {"move_to", "collect"}
        name, arguments = ("query_world", {"radius": 50}) if turns % 2 else ("idle", {})
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{turns}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}}]}

    with running(make_app("foraging", max_sessions=4, max_ticks=20)) as url:
        exec(compile(code.replace("http://127.0.0.1:8000", url), "serving.md", "exec"), namespace)
        groups = asyncio.run(namespace["group"](generate, seed=4, size=2))
    for messages, total in groups:
        assert len(messages) == 1 + 3 * 20  # the opening observation, then per tick a reply, its call's result
        assert messages[2]["role"] == "tool" and messages[2]["tool_call_id"] == "call_1"  # and what it sees
        assert json.loads(messages[2]["content"])["tool"] == "query_world"
        assert messages[3]["role"] == "user" and "query result" in messages[3]["content"]
        assert total == 0.0
