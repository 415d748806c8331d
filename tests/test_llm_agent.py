"""arena-agent against a real OpenAI-compatible server on 127.0.0.1 (the real ``openai`` client),
whose model is a scripted policy answering in each tool-call format; faults of every kind."""

import asyncio
import json
import math

import gymnasium as gym
import numpy as np
import pytest
from llm_helpers import validate_transcript, validated_sessions  # noqa: F401 (a fixture)

import arena_envs  # noqa: F401
from arena_envs.llm import FORMATS
from arena_envs.llm.agents import OpenAIChatAgent
from arena_envs.llm.cli import main
from arena_envs.llm.runner import pass_at_k
from arena_envs.llm.server import ScriptedModelServer
from arena_envs.scripted import ScriptedForager

pytestmark = pytest.mark.usefixtures("validated_sessions")

pytest.importorskip("openai")
HUNT = "arena_envs/TreasureHunt-v0"


@pytest.fixture(scope="module")
def server():
    with ScriptedModelServer(hang_seconds=20) as running:
        yield running


def run_agent(tmp_path, *args):
    out = tmp_path / "run"
    assert main([*args, "--out", str(out), "--quiet"]) == 0
    records = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    results = json.loads((out / "results.json").read_text())
    return records, results


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "bare_name"])
def test_treasure_hunt_easy_solved_in_every_episode_in_each_format(server, tmp_path, fmt):
    records, results = run_agent(tmp_path, HUNT, "--base-url", server.base_url, "--model", f"scripted-{fmt}",
                                 "--episodes", "8", "--concurrency", "4", "--env-arg", "difficulty=easy")
    assert results["success"] == 1.0 and results["errors"] == 0 and results["parse_failures"] == 0
    assert results["turns_by_format"] == {fmt: sum(r["turns"] for r in records)}
    assert results["tokens"]["total_tokens"] > 0
    assert sorted(r["seed"] for r in records) == list(range(8))
    for record in records:
        assert record["success"] and record["scenario"] == "TreasureHunt" and record["reward"] > 0.9
        validate_transcript(record["messages"])
        assert record["usage"]["prompt_tokens"] > 0


def test_scripted_agent_through_the_chat_path_without_a_server(tmp_path):
    records, results = run_agent(tmp_path, HUNT, "--agent", "scripted", "--format", "mistral", "--episodes", "4")
    assert results["success"] == 1.0 and results["turns_by_format"].keys() == {"mistral"}
    assert all(r["usage"] == {} for r in records)


@pytest.mark.parametrize("layout", ["classic", "random"])
def test_crafting_scripted_through_the_chat_path_crafts_the_goal(tmp_path, layout):
    records, results = run_agent(tmp_path, "arena_envs/Crafting-v0", "--agent", "scripted", "--format", "qwen3_xml",
                                 "--episodes", "4", "--wait-ticks", "50", "--env-arg", f"layout={layout}")
    assert results["success"] == 1.0 and results["errors"] == 0
    for record in records:
        validate_transcript(record["messages"])
        assert "iron_sword" in record["messages"][0]["content"]  # the recipes are in the system message


def array_forager_scores(seeds):
    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=len(seeds))
    forager = ScriptedForager(envs.unwrapped.scenario.params)
    obs, _ = envs.reset(seed=[int(s) for s in seeds])
    scores = np.full(len(seeds), np.nan)
    while np.isnan(scores).any():
        obs, _, terminated, truncated, info = envs.step(forager.act(obs))
        ended = (terminated | truncated) & np.isnan(scores)
        scores[ended] = info["score"][ended]
    return scores


def test_foraging_scripted_through_chat_scores_within_noise_of_the_scripted_forager(server, tmp_path):
    seeds = list(range(100, 112))
    records, results = run_agent(tmp_path, "arena_envs/Foraging-v0", "--base-url", server.base_url, "--model",
                                 "scripted-hermes", "--episodes", str(len(seeds)), "--seed", str(seeds[0]),
                                 "--concurrency", "12", "--wait-ticks", "50")
    assert results["errors"] == 0
    chat = np.array([r["score"] for r in sorted(records, key=lambda r: r["seed"])])
    arrays = array_forager_scores(seeds)
    noise = 2 * math.sqrt(chat.var() / len(chat) + arrays.var() / len(arrays)) + 5.0
    assert abs(chat.mean() - arrays.mean()) <= noise, (chat, arrays)
    assert chat.mean() > 50  # it really forages


def test_groups_share_their_seed_with_advantages_and_pass_at_k(server, tmp_path):
    records, results = run_agent(tmp_path, HUNT, "--base-url", server.base_url, "--model", "scripted-llama3_json",
                                 "--episodes", "12", "--group-size", "4", "--seed", "30")
    groups = {}
    for record in records:
        groups.setdefault(record["group"], []).append(record)
    assert len(groups) == 3
    for members in groups.values():
        assert len({m["seed"] for m in members}) == 1 and len(members) == 4
        assert len({json.dumps(m["messages"]) for m in members}) == 1  # same hunt, same scripted play
        assert all(m["advantage"] == 0.0 for m in members)  # equal returns: no advantage
    assert results["pass@1"] == 1.0 and results["pass@4"] == 1.0


def test_pass_at_k_and_advantages_follow_their_formulas():
    from arena_envs.llm.runner import EpisodeRecord, add_advantages

    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    records = [EpisodeRecord("x", 1, 0, i, reward=r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0])]
    add_advantages(records)
    assert [r.advantage for r in records] == pytest.approx([1.0, -1.0, -1.0, 1.0])


def test_faults_are_recorded_per_episode_and_the_others_finish(server, tmp_path):
    faults = {"40/0": "500", "41/0": "429", "42/0": "429-once", "43/0": "garbage", "44/0": "huge",
              "45/0": "hang", "46/0": "invalid"}
    server.faults.update(faults)
    records, results = run_agent(tmp_path, HUNT, "--base-url", server.base_url, "--model", "scripted-hermes",
                                 "--episodes", "10", "--seed", "40", "--concurrency", "10", "--timeout", "8",
                                 "--max-retries", "2")
    by_seed = {r["seed"]: r for r in records}
    assert "500" in by_seed[40]["error"] and by_seed[40]["retries"] == 2
    assert by_seed[40]["error_class"] == "server_error"
    assert "RateLimitError" in by_seed[41]["error"] and by_seed[41]["retries"] == 2
    assert by_seed[41]["error_class"] == "rate_limited" and len(by_seed[41]["latencies"]) == 3
    assert by_seed[42]["error"] is None and by_seed[42]["success"] and by_seed[42]["retries"] == 1
    assert by_seed[43]["error"] and not by_seed[43]["success"] and by_seed[43]["error_class"] == "bad_response"
    assert "too long" in by_seed[44]["error"] and by_seed[44]["error_class"] == "bad_response"
    assert by_seed[45]["error_class"] == "timeout" and by_seed[45]["retries"] == 0  # a timeout is not retried
    assert "within 8 s" in by_seed[45]["error"]
    invalid = by_seed[46]
    assert invalid["error"] is None and invalid["success"] and invalid["invalid_calls"] == {"INVALID_PARAMS": 2}
    errors = [json.loads(m["content"]) if m["content"].startswith("{") else m["content"]
              for m in invalid["messages"][3:5]]
    assert all("INVALID_PARAMS" in json.dumps(e) for e in errors)
    for seed in (47, 48, 49):
        assert by_seed[seed]["success"] and by_seed[seed]["error"] is None
    assert results["errors"] == 5
    assert results["error_classes"] == {"server_error": 1, "rate_limited": 1, "bad_response": 2, "timeout": 1}
    for record in records:
        validate_transcript(record["messages"])


def test_the_openai_agent_reads_the_key_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
    agent = OpenAIChatAgent(server.base_url, "scripted")
    assert agent.client.api_key == "sk-local-test"
    explicit = OpenAIChatAgent(server.base_url, "scripted", api_key="sk-given")
    assert explicit.client.api_key == "sk-given"

    async def ask():
        reply = await agent.reply([{"role": "system", "content": "# Nothing known"},
                                   {"role": "user", "content": "hi"}], [])
        await agent.close()
        await explicit.close()
        return reply

    reply = asyncio.run(ask())
    assert reply.message is None and "400" in reply.error  # a 4xx is not retried
    assert reply.error_class == "bad_request" and reply.retries == 0 and len(reply.requests) == 1


def test_cli_refuses_bad_arguments(tmp_path, capsys):
    for args, fix in (([HUNT], "--model is required"),
                      ([HUNT, "--agent", "scripted", "--episodes", "5", "--group-size", "2"], "multiple"),
                      (["arena_envs/Nope-v0", "--agent", "scripted"], "unknown environment")):
        assert main([*args, "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert fix in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_team_capture_with_two_chat_agents_through_the_server(server, tmp_path):
    records, results = run_agent(tmp_path, "arena_envs/TeamCapture-v0", "--base-url", server.base_url, "--model",
                                 "scripted-mistral", "--chat-agents", "blue_agent_1,red_agent_2", "--episodes", "2",
                                 "--wait-ticks", "40", "--env-arg", "max_cycles=300")
    assert results["errors"] == 0 and results["episodes"] == 4
    assert sorted((r["seed"], r["agent"]) for r in records) == [(0, "blue_agent_1"), (0, "red_agent_2"),
                                                                 (1, "blue_agent_1"), (1, "red_agent_2")]
    for seed in (0, 1):
        blue, red = sorted((r for r in records if r["seed"] == seed), key=lambda r: r["agent"])
        assert blue["reward"] == pytest.approx(-red["reward"], abs=1e-4)  # zero-sum between the teams
        assert blue["steps"] > 0 and red["steps"] > 0
    for record in records:
        validate_transcript(record["messages"])
    assert main(["arena_envs/TeamCapture-v0", "--agent", "scripted", "--chat-agents", "green_agent_1",
                 "--out", str(tmp_path)]) == 2
