"""Chat sessions whose Treasure Hunt runs on a remote ``arena-serve`` (OpenEnv's client, the real server).

The rollout a GRPO trainer plays (``ChatBatch``) takes ``remote=URL`` and is otherwise unchanged: the
transcripts, returns and outcomes must be the ones the same replies make in process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from process_helpers import free_port, serving

from arena_envs.llm import ChatBatch, ChatPool, format_reply
from arena_envs.llm.scripted import policy_for

ARENA_SERVE = str(Path(sys.executable).with_name("arena-serve"))
SEEDS = [5, 6, 7, 8]
FIRST_REPLIES = ["", "I will look around first.", '{"tool": "cd", "params": {"path": "/nowhere"}}', None]


def play(**where) -> list[tuple]:
    """Four hunts: the first replies are empty, prose, a failing call and the scripted one; then scripted."""
    batch = ChatBatch("TreasureHunt-v0", len(SEEDS), max_turns=10, **where)
    try:
        batch.reset(SEEDS)
        for turn in range(12):
            replies = [None if s.done else FIRST_REPLIES[i] if turn == 0 and FIRST_REPLIES[i] is not None
                       else format_reply(policy_for(s.messages)(s.messages), "hermes")["content"]
                       for i, s in enumerate(batch.sessions)]
            if all(r is None for r in replies):
                break
            batch.step(replies)
        return [(s.messages, round(s.episode_return, 6), s.turn, s.done, s.last_info) for s in batch.sessions]
    finally:
        batch.close()


@pytest.fixture(scope="module")
def server_url():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving([ARENA_SERVE, "treasure_hunt", "--port", str(port), "--env-kwarg", "difficulty=easy"],
                 f"{url}/health"):
        yield url


def test_a_remote_hunt_reads_exactly_as_the_local_one(server_url):
    local, remote = play(difficulty="easy"), play(remote=server_url)
    assert remote == local
    assert [info["success"] for *_, info in remote] == [True] * 4  # the scripted replies win every hunt
    assert "Error" in remote[2][0][3]["content"]  # the failing call's tool message came from the server


def test_remote_play_is_refused_where_it_does_not_apply(server_url):
    with pytest.raises(ValueError, match="covers Treasure Hunt"):
        ChatPool("Foraging-v0", 1, remote=server_url)
    with pytest.raises(ValueError, match="are the server's"):
        ChatPool("TreasureHunt-v0", 1, remote=server_url, difficulty="hard")


def test_a_server_of_another_scenario_is_named(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving([ARENA_SERVE, "foraging", "--port", str(port)], f"{url}/health"):
        batch = ChatBatch("TreasureHunt-v0", 1, remote=url)
        try:
            with pytest.raises(ConnectionError, match="does not serve Treasure Hunt"):
                batch.reset(0)
        finally:
            batch.close()


def test_a_remote_session_outlives_a_long_pause_between_steps(server_url):
    """A model generating between steps leaves the batch idle for minutes on a CPU: the WebSockets'
    keep-alive pings (uvicorn's: every 20 s, 20 s to answer) must still be answered, else the server
    drops the socket and the next step lands in a new session with no episode."""
    import time

    batch = ChatBatch("TreasureHunt-v0", 2, remote=server_url)
    try:
        batch.reset([1, 2])
        time.sleep(45)
        steps = batch.step(['<tool_call>{"name": "ls", "arguments": {}}</tool_call>'] * 2)
        assert all(step.messages[-1]["content"].startswith("[turn 1/50 |") for step in steps)
    finally:
        batch.close()
