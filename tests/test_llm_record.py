"""arena-agent --record: every chat episode with the world at each tick and the transcript turn behind it."""

from __future__ import annotations

import json

from arena_envs.llm.cli import main as arena_agent
from arena_envs.wrappers.record import EPISODES_FILE, read_episodes


def calls_of(message: dict) -> list[dict]:
    return [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
            for c in message.get("tool_calls") or ()]


def test_treasure_hunt_episodes_link_each_tick_to_the_reply_that_caused_it(tmp_path):
    assert arena_agent(["arena_envs/TreasureHunt-v0", "--agent", "scripted", "--episodes", "2", "--seed", "4",
                        "--out", str(tmp_path), "--record", str(tmp_path), "--quiet"]) == 0
    episodes = read_episodes(tmp_path / EPISODES_FILE)
    transcripts = [json.loads(line) for line in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert sorted(e["seed"] for e in episodes) == [4, 5] and all(e["source"] == "arena-agent" for e in episodes)
    for episode in episodes:
        transcript = episode["transcript"]
        assert transcript == next(t["messages"] for t in transcripts if t["seed"] == episode["seed"])
        ticks = episode["ticks"][1:]
        assert ticks and [t["t"] for t in ticks] == list(range(1, len(ticks) + 1))
        for tick in ticks:
            reply = transcript[tick["turn"]]
            assert reply["role"] == "assistant"
            assert {"name": tick["act"]["tool"], "arguments": tick["act"]["params"]} in calls_of(reply)
            answer = next(m for m in transcript[tick["turn"] + 1:] if m["role"] == "tool")
            assert tick["output"] in answer["content"] or answer["content"] in tick["output"]
        assert "<- you are here" in ticks[-1]["view"]
        assert episode["summary"]["success"] and episode["summary"]["error"] is None


def test_a_2d_chat_episode_records_the_world(tmp_path):
    arena_agent(["arena_envs/Foraging-v0", "--agent", "scripted", "--episodes", "1", "--max-turns", "6",
                 "--out", str(tmp_path), "--record", str(tmp_path), "--quiet"])
    (episode,) = read_episodes(tmp_path / EPISODES_FILE)
    assert episode["scenario"] == "foraging" and episode["world"]["kind"] == "world"
    first = episode["ticks"][0]
    assert len(first["pos"]) == 1 and first["entities"]
    assert all(episode["transcript"][t["turn"]]["role"] == "assistant" for t in episode["ticks"][1:])
    assert episode["summary"]["length"] == len(episode["ticks"]) - 1 > 0


def test_team_capture_records_one_episode_per_chat_agent(tmp_path):
    """Each chat agent's episode: the shared world at every tick, its own calls, results and transcript turns."""
    assert arena_agent(["arena_envs/TeamCapture-v0", "--agent", "scripted", "--episodes", "2", "--seed", "3",
                        "--chat-agents", "blue_agent_1,red_agent_2", "--max-turns", "10",
                        "--out", str(tmp_path), "--record", str(tmp_path), "--quiet"]) == 0
    episodes = read_episodes(tmp_path / EPISODES_FILE)
    transcripts = [json.loads(line) for line in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert sorted((e["seed"], e["agent"]) for e in episodes) == [
        (3, "blue_agent_1"), (3, "red_agent_2"), (4, "blue_agent_1"), (4, "red_agent_2")]
    for episode in episodes:
        assert episode["scenario"] == "team_capture" and episode["world"]["kind"] == "world"
        assert len(episode["ticks"][0]["pos"]) == 4  # both teams
        transcript = episode["transcript"]
        assert transcript == next(t["messages"] for t in transcripts
                                  if (t["seed"], t["agent"]) == (episode["seed"], episode["agent"]))
        ticks = episode["ticks"][1:]
        assert len(ticks) == 10 == episode["summary"]["length"]
        for tick in ticks:
            reply = transcript[tick["turn"]]
            assert reply["role"] == "assistant"
            assert {"name": tick["act"]["tool"], "arguments": tick["act"]["params"]} in calls_of(reply)
            answer = next(m for m in transcript[tick["turn"] + 1:] if m["role"] == "tool")
            assert tick["output"] == answer["content"]
    same_match = [e for e in episodes if e["seed"] == 3]
    assert same_match[0]["ticks"][5]["pos"] == same_match[1]["ticks"][5]["pos"]  # one world, two agents
