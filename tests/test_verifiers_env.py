"""verifiers' door (arena_envs.verifiers), driven by verifiers' own ``vf-eval`` in its venv (``make verifiers``:
verifiers pins versions the project venv cannot take) against llama.cpp's server with the real SmolLM2-135M.

Every rollout's score is checked against our own chat session replaying the rollout's replies at its seed:
the same opening, the same answers, the same return. Two rollouts of each seed run concurrently in vf-eval,
so a world shared between rollouts would show as a replay that differs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from arena_envs.llm import ChatEnv
from arena_envs.trl import DEFAULT_OPTIONS

ROOT = Path(__file__).resolve().parents[1]
VF_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
DOC = ROOT / "docs" / "guide" / "llm-frameworks.md"


def verifiers_venv() -> dict[str, str]:
    """The environment of a process in verifiers' venv, importing this checkout."""
    if not VF_PYTHON.exists():
        pytest.fail("verifiers' venv is missing: run `make verifiers` (make test builds it)")
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def in_verifiers(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VF_PYTHON), "-c", code, *args], env=verifiers_venv(), capture_output=True, text=True,
                          timeout=300)



def documented_vf_eval() -> list[str]:
    """The page's vf-eval command, as a shell would split it."""
    (command,) = re.findall(r"^(\.venv-verifiers/bin/vf-eval .*?)$", DOC.read_text().replace("\\\n", " "), re.M)
    return shlex.split(command)


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def assistant_reply(message: dict) -> dict:
    """A rollout's assistant message (verifiers' saved form) as the OpenAI message the session plays."""
    reply = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        calls = [json.loads(call) if isinstance(call, str) else call for call in message["tool_calls"]]
        reply["tool_calls"] = [{"id": call["id"], "type": "function",
                                "function": {"name": call["name"], "arguments": call["arguments"]}} for call in calls]
    return reply


@pytest.mark.timeout(1200)  # about a minute alone; far longer on a machine other jobs share
def test_vf_eval_scores_every_rollout_as_our_session_replays_it(llama, tmp_path):
    argv = documented_vf_eval()
    argv[argv.index("-b") + 1] = llama.base_url
    argv[argv.index("-o") + 1] = str(tmp_path / "vf")
    done = subprocess.run([str(ROOT / argv[0]), *argv[1:]], cwd=ROOT, env=verifiers_venv(), capture_output=True,
                          text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + llama.log_tail()
    (results,) = (tmp_path / "vf").rglob("results.jsonl")
    rollouts = [json.loads(line) for line in results.read_text().splitlines()]
    env_args = json.loads(option(argv, "-a"))
    assert len(rollouts) == int(option(argv, "-n")) * int(option(argv, "-r")) == 4
    assert sorted(r["info"]["seed"] for r in rollouts) == [0, 0, 1, 1]  # a row per seed, each played twice

    options = {**DEFAULT_OPTIONS["TreasureHunt"], "text_calls": "user", "difficulty": env_args["difficulty"],
               "max_turns": env_args["max_turns"]}
    calls = 0
    for rollout in rollouts:
        assert rollout["error"] is None, rollout["error"]
        assert rollout["stop_condition"] == "has_final_env_response"  # the episode ended it, not an error
        statuses = replay_scores(rollout, options)
        calls += statuses.count("call")
    assert calls > 0  # llama.cpp's native tool calls were read and played


def replay_scores(rollout: dict, options: dict) -> list[str]:
    """Our own chat session replaying the rollout's replies at its seed: the same opening and answers,
    and the rollout's scores those of the session. Returns each reply's parse status."""
    env = ChatEnv("arena_envs/TreasureHunt-v0", **options)
    try:
        opening, _tools = env.reset(seed=rollout["info"]["seed"])
        assert [m["content"] for m in opening] == [m["content"] for m in rollout["prompt"]]
        statuses = []
        for message in rollout["completion"]:
            if message["role"] == "assistant":
                step = env.step(assistant_reply(message))
                statuses.append(step.info["parse_status"])
                answers = iter(step.messages)
            else:  # the environment's answers in the rollout are the session's, one for one
                assert message["content"] == next(answers)["content"]
        assert env.session.done and statuses
        assert rollout["reward"] == rollout["episode_return"] == pytest.approx(env.session.episode_return)
        assert rollout["readable_call_rate"] == pytest.approx(statuses.count("call") / len(statuses))
        assert rollout["turns"] == len(statuses) and rollout["success"] == float(env.session.last_info["success"])
        return statuses
    finally:
        env.close()


# verifiers' own evaluation against the scripted model, which hesitates: in the rollout of example k its
# first k replies are prose (no call), then it plays the oracle's calls
HESITANT_EVALUATION = """
import asyncio, contextvars, json, os, sys
import verifiers as vf
from arena_envs.llm.server import EPISODE_HEADER, ScriptedModelServer
from arena_envs.verifiers import load_environment

hesitations = contextvars.ContextVar("hesitations", default=0)


class Hesitant(ScriptedModelServer):
    async def _serve(self, request):
        hesitations.set(int(request.headers[EPISODE_HEADER]))  # the rollout's example, sent by verifiers' client
        return await super()._serve(request)

    def _reply(self, messages, fmt):
        if sum(m.get("role") == "assistant" for m in messages) < hesitations.get():
            return {"role": "assistant", "content": "Let me think about where the treasure could be."}
        return super()._reply(messages, fmt)


def plain(messages):
    return [m if isinstance(m, dict) else m.model_dump() for m in messages]


examples, max_turns = int(sys.argv[1]), int(sys.argv[2])
os.environ["OPENAI_API_KEY"] = "unused"
with Hesitant(strict=False) as server:  # verifiers' client sends reasoning_content: null, which llama.cpp takes
    env = load_environment("TreasureHunt", difficulty="easy", num_examples=examples, max_turns=max_turns)
    client = vf.ClientConfig(api_base_url=server.base_url, api_key_var="OPENAI_API_KEY", max_retries=0,
                             extra_headers_from_state={EPISODE_HEADER: "example_id"})
    out = asyncio.run(env.evaluate(client=client, model="scripted", num_examples=examples, max_concurrent=examples,
                                   on_progress=[]))
print(json.dumps([{**{key: o[key] for key in ("example_id", "info", "error", "stop_condition", "reward",
                                              "episode_return", "readable_call_rate", "success", "turns")},
                   "prompt": plain(o["prompt"]), "completion": plain(o["completion"])} for o in out["outputs"]]))
"""


def test_won_and_lost_hunts_are_scored_exactly_through_verifiers_evaluation():
    """Hunts won in 7, 8 and 9 turns and one cut at 9 (the oracle needs 7 calls; example k's first k
    replies hold none): each rollout's success, turns and readable-call rate are exactly what was
    played, and what our own session says of the same replies."""
    examples, max_turns = 4, 9
    done = in_verifiers(HESITANT_EVALUATION, str(examples), str(max_turns))
    assert done.returncode == 0, done.stderr[-3000:]
    rollouts = sorted(json.loads(done.stdout.splitlines()[-1]), key=lambda rollout: rollout["example_id"])
    assert [rollout["info"]["seed"] for rollout in rollouts] == list(range(examples))
    options = {**DEFAULT_OPTIONS["TreasureHunt"], "text_calls": "user", "difficulty": "easy", "max_turns": max_turns}
    for hesitations, rollout in enumerate(rollouts):
        assert rollout["error"] is None and rollout["stop_condition"] == "has_final_env_response", rollout["error"]
        turns = min(7 + hesitations, max_turns)
        assert rollout["success"] == float(7 + hesitations <= max_turns)
        assert rollout["turns"] == float(turns)
        assert rollout["readable_call_rate"] == (turns - hesitations) / turns
        statuses = replay_scores(rollout, options)
        assert statuses == ["none"] * hesitations + ["call"] * (turns - hesitations)


def test_load_environment_refuses_what_it_cannot_serve():
    done = in_verifiers("""
from arena_envs.verifiers import load_environment
for kwargs in ({"scenario": "NoSuchGame"}, {"scenario": "TeamCapture"}, {"num_examples": 0},
               {"scenario": "Foraging", "max_turns": 0}):
    try:
        load_environment(**kwargs)
    except ValueError as error:
        print("refused:", error)
""")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("refused:") for line in lines), done.stdout
    assert "unknown environment" in lines[0] and "several agents" in lines[1]
    assert "num_examples" in lines[2] and "max_turns" in lines[3]


def test_the_2d_scenarios_give_a_row_per_seed_with_the_sessions_opening():
    done = in_verifiers("""
import json
from arena_envs.verifiers import load_environment
for scenario in ("Foraging", "Crafting"):
    env = load_environment(scenario, num_examples=2, seed=7)
    rows = env.dataset.to_list()
    print(json.dumps({"scenario": scenario, "seeds": [row["info"]["seed"] for row in rows],
                      "prompts": [row["prompt"] for row in rows], "tools": [tool.name for tool in env.tool_defs]}))
""")
    assert done.returncode == 0, done.stderr
    for line, scenario in zip(done.stdout.splitlines(), ("Foraging", "Crafting"), strict=True):
        row = json.loads(line)
        assert row["seeds"] == [7, 8]
        env = ChatEnv(f"arena_envs/{scenario}-v0", **DEFAULT_OPTIONS[scenario], text_calls="user")
        try:
            for seed, prompt in zip(row["seeds"], row["prompts"], strict=True):
                opening, tools = env.reset(seed=seed)
                assert [m["content"] for m in opening] == [m["content"] for m in prompt]
            assert row["tools"] == [tool["function"]["name"] for tool in tools]
        finally:
            env.close()


def test_arena_bench_measures_the_verifiers_door_beside_our_runner_on_the_same_episodes():
    """arena-bench --only doors' HTTP rows (docs/guide/llm-frameworks.md), at 8 hunts."""
    from arena_envs import bench

    rows = bench.verifiers_door_rows("Doors: hunt", "arena_envs/TreasureHunt-v0", {"difficulty": "easy"}, 8)
    assert [(name, unit) for name, _, unit in rows] == [("Doors: hunt: our runner (arena-agent)", "episodes/s"),
                                                        ("Doors: hunt: verifiers evaluate (vf-eval)", "episodes/s")]
    assert all(rate > 0 for _, rate, _ in rows)
    for numerator, denominator in bench.RATIOS:  # the table gives verifiers' rate over ours
        if "verifiers" in numerator:
            assert denominator == numerator.replace("verifiers evaluate (vf-eval)", "our runner (arena-agent)")
