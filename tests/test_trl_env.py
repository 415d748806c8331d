"""TRL's door (arena_envs.trl): every scenario as a class TRL's ``GRPOTrainer`` takes as ``environment_factory``.

The tools are read the way TRL reads them (its class inspection and transformers' ``get_json_schema``);
the episodes are those of the chat sessions (the same seeds, messages and returns as ``ChatEnv``); bad
calls are answered in text and touch no other instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
from pathlib import Path

import pytest
from llm_helpers import validate_transcript

from arena_envs import trl as arena_trl
from arena_envs.llm import ChatEnv
from arena_envs.llm.scripted import policy_for

SCENARIOS = ("TreasureHunt", "Foraging", "Crafting", "TeamCapture")


def tool_methods(cls) -> dict:
    """The methods TRL exposes as tools: what GRPOTrainer.__init__ collects from the class."""
    return {name: member for name, member in inspect.getmembers(cls, predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")}


def next_call(env) -> tuple[str, dict]:
    """The scripted policy's next call, read from the session's own transcript."""
    messages = env.session.messages
    return policy_for(messages)(messages)[0]


def play(env, seed: int, calls: int) -> tuple[str, list[str], float]:
    """The opening, each call's text and the return of ``calls`` scripted calls made through the methods."""
    opening = env.reset(seed=seed)
    results = []
    for _ in range(calls):
        if env.session.done:
            break
        name, arguments = next_call(env)
        results.append(getattr(env, name)(**arguments))
    return opening, results, env.get_reward()


@contextlib.contextmanager
def chat_env(env_id: str, **kwargs):
    env = ChatEnv(env_id, **kwargs)
    try:
        yield env
    finally:
        env.close()


def reply_of(name: str, arguments: dict, turn: int) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_tool_method_reads_in_transformers_as_the_schema_the_session_validates(scenario):
    from transformers.utils import get_json_schema

    cls = getattr(arena_trl, scenario)
    with cls() as env:
        schemas = {tool["function"]["name"]: tool["function"] for tool in env.session.tools}
        assert set(tool_methods(cls)) == set(schemas)  # every tool, nothing else
        for name, schema in schemas.items():
            read = get_json_schema(getattr(env, name))["function"]
            want, got = schema.get("parameters", {}), read["parameters"]
            assert read["name"] == name and read["description"] == " ".join(schema["description"].split())
            assert set(got["properties"]) == set(want.get("properties", {}))
            assert set(got.get("required", [])) == set(want.get("required", []))
            for argument, spec in want.get("properties", {}).items():
                assert got["properties"][argument].get("enum") == spec.get("enum"), (name, argument)
                assert got["properties"][argument]["type"] == spec["type"], (name, argument)


def test_the_hunt_through_the_methods_is_the_chat_sessions_episode():
    Hunt = arena_trl.environment_class("TreasureHunt-v0", difficulty="easy")
    assert Hunt.kwargs == {"call_format": "hermes", "difficulty": "easy"}  # as TRL's template parses calls
    with Hunt() as env, chat_env("arena_envs/TreasureHunt-v0", **Hunt.kwargs) as chat:
        opening = env.reset(seed=5)
        messages, _tools = chat.reset(seed=5)
        assert opening == messages[-1]["content"]  # TRL appends this to the dataset row's user message
        while not env.session.done:
            name, arguments = next_call(env)
            result = getattr(env, name)(**arguments)
            step = chat.step(reply_of(name, arguments, chat.session.turn + 1))
            assert result == "\n".join(m["content"] for m in step.messages)  # the result, then the observation
        assert env.session.last_info["success"]
        assert env.session.messages == chat.session.messages
        validate_transcript(env.session.messages)
        assert env.get_reward() == chat.session.episode_return > 0.5
        assert env.cat(file="start.txt") == arena_trl.EPISODE_OVER  # nothing plays after the end
        assert env.get_reward() == chat.session.episode_return


@pytest.mark.parametrize("scenario", ("Foraging", "Crafting", "TeamCapture"))
def test_the_2d_scenarios_play_through_the_methods_deterministically_and_alone(scenario):
    cls = getattr(arena_trl, scenario)
    with cls() as a, cls() as b, cls() as c:
        alone = play(a, seed=3, calls=6)
        # two instances played call by call in turns: neither changes the other's episode
        b.reset(seed=3)
        c.reset(seed=4)
        interleaved = []
        for _ in range(6):
            for env in (c, b):
                if not env.session.done:
                    name, arguments = next_call(env)
                    text = getattr(env, name)(**arguments)
                    if env is b:
                        interleaved.append(text)
        assert interleaved == alone[1] and b.get_reward() == alone[2]
        assert play(a, seed=3, calls=6) == alone  # the same seed, the same episode
        assert len(alone[1]) == 6 and all("tick" in text for text in alone[1])  # each shows the observation
        if scenario != "Crafting":  # Crafting's default world is one fixed layout
            assert c.session.messages[1] != b.session.messages[1]  # another seed, another world


def test_the_team_capture_class_plays_blue_agent_1_beside_the_scripted_teams():
    """The model's seat is blue_agent_1, as the module says: the opening, each call's answer and the
    return are those of a team capture chat match with blue_agent_1 as its chat agent."""
    from arena_envs.llm.team import TeamChatBatch

    with arena_trl.TeamCapture() as env:
        opening = env.reset(seed=6)
        assert opening.startswith("tick 0 | blue_agent_1 at"), opening[:80]
        assert "blue_agent_1" in env.session.messages[0]["content"]
        calls, results = [], []
        for _ in range(4):
            name, arguments = next_call(env)
            calls.append((name, arguments))
            results.append(getattr(env, name)(**arguments))
        match = TeamChatBatch(1, chat_agent="blue_agent_1", **arena_trl.TeamCapture.kwargs)
        try:
            messages, _tools = match.reset([6])[0]
            assert messages[-1]["content"] == opening
            for turn, ((name, arguments), result) in enumerate(zip(calls, results, strict=True), 1):
                step = match.step([reply_of(name, arguments, turn)])[0]
                assert result == "\n".join(m["content"] for m in step.messages if m["content"])
            assert env.session.messages == match.sessions[0].messages
            assert env.get_reward() == match.sessions[0].episode_return
        finally:
            match.close()


def test_bad_calls_are_answered_in_text_and_leave_other_instances_alone():
    Hunt = arena_trl.TreasureHunt
    with Hunt() as env, Hunt() as other:
        other.reset(seed=1)
        other_before = other.session.messages
        env.reset(seed=1)
        wrong_type = env.cat(file=7)
        assert "INVALID_PARAMS" in wrong_type and "file" in wrong_type
        assert "INVALID_PARAMS" in env.cat()  # the required file is missing
        assert other.session.messages == other_before and other.get_reward() == 0.0
        validate_transcript(env.session.messages)
        for seed in (True, "3", 1.5):
            with pytest.raises(ValueError, match="seed"):
                env.reset(seed=seed)
    with arena_trl.Foraging() as forager:
        forager.reset(seed=1)
        answer = forager.move_to(target=[1, 0, 1], colour="red")  # TRL passes whatever arguments the model wrote
        assert "INVALID_PARAMS" in answer and "unknown parameter 'colour'" in answer and "tick 1" in answer
        assert "must be one of" in forager.query_world(filter_type="dragons")
    with pytest.raises(ValueError, match="unknown environment"):
        arena_trl.environment_class("NoSuchGame-v0")
    with pytest.raises(AttributeError):
        arena_trl.NoSuchScenario  # noqa: B018


def test_the_dataset_gives_each_row_its_seed_and_the_sessions_system_message():
    Hunt = arena_trl.environment_class("TreasureHunt-v0", difficulty="easy", max_turns=6)
    dataset = Hunt.dataset(range(10, 14))
    assert dataset["seed"] == [10, 11, 12, 13]
    with Hunt() as env:
        for row in dataset:
            opening = env.reset(**row)  # TRL passes the whole row
            assert env.seed == row["seed"]
            system, user = row["prompt"]
            assert system == env.session.messages[0] and "You have 6 turns" in system["content"]
            assert user == {"role": "user", "content": ""} and opening == env.session.messages[1]["content"]
    with pytest.raises(ValueError, match="at least one seed"):
        Hunt.dataset([])


def test_a_chatml_template_without_tools_gets_trls_tool_template_and_others_are_refused():
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    from arena_envs.llm.llama_server import smollm2_gguf

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    assert not supports_tool_calling(tokenizer)  # SmolLM2's own template drops tool calls
    assert arena_trl.chatml_tool_template(tokenizer) is tokenizer
    assert tokenizer.chat_template == qwen2_5_chat_template and supports_tool_calling(tokenizer)
    assert arena_trl.chatml_tool_template(tokenizer).chat_template == qwen2_5_chat_template  # kept as it is
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tokenizer.eos_token = "</s>"
    with pytest.raises(ValueError, match="not ChatML"):
        arena_trl.chatml_tool_template(tokenizer)


def test_an_instance_plays_inside_a_running_event_loop():
    async def notebook_cell() -> str:  # a notebook runs its cells inside an event loop; TRL calls in sync
        with arena_trl.TreasureHunt() as env:
            env.reset(seed=2)
            return env.cat(file="start.txt")

    assert "[turn 1/" in asyncio.run(notebook_cell())


DOC = Path(__file__).resolve().parents[1] / "docs" / "guide" / "llm-frameworks.md"


def test_trls_own_trainer_trains_smollm2_through_the_documented_lines(tmp_path, monkeypatch):
    """The page's lines as written: TRL's GRPOTrainer, environment_factory and no rollout_func, 2 steps of
    the real SmolLM2-135M on Treasure Hunt easy."""
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert "environment_factory=Hunt" in block and "rollout_func" not in block
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    rollouts: list[tuple[int, str]] = []  # (seed, the system message TRL rendered) of every rollout's reset
    reset = arena_trl.ArenaEnvironment.reset

    def recorded(self, seed=None, **row):
        if "prompt" in row:  # TRL passes the whole dataset row; the dataset's own resets pass none
            rollouts.append((seed, row["prompt"][0]["content"]))
        return reset(self, seed, **row)

    rewards: list[float] = []  # every reward TRL asked the environment for
    get_reward = arena_trl.ArenaEnvironment.get_reward

    def scored(self):
        rewards.append(get_reward(self))
        return rewards[-1]

    monkeypatch.setattr(arena_trl.ArenaEnvironment, "reset", recorded)
    monkeypatch.setattr(arena_trl.ArenaEnvironment, "get_reward", scored)
    names: dict = {}
    exec(compile(block, str(DOC), "exec"), names)
    trainer = names["trainer"]
    assert trainer.state.global_step == 2 and trainer.rollout_func is None
    assert len(rewards) == 4  # get_reward scored each rollout of both steps, logged under the class's name
    assert any("rewards/TreasureHunt/mean" in row for row in trainer.state.log_history)
    # a step is one group of 2 rollouts: both play the row's seed, and the next step another one
    (a, first), (b, _), (c, _), (d, _) = rollouts
    assert a == b and c == d and a != c and first.startswith("# Treasure Hunt")
    for env in trainer.environments:
        assert env.seed == c and env.session.messages[0]["content"] == first


def test_arena_bench_measures_both_doors_on_the_same_episodes(capsys):
    from arena_envs import bench

    rates = {name: (rate, unit) for name, rate, unit in bench.run(["--only", "doors", "--seconds", "0"])}
    table = capsys.readouterr().out
    for label in ("Treasure Hunt easy", "Foraging, 20 replies"):
        ours = rates[f"Doors: {label}, 32 scripted episodes: chat sessions (arena-agent, arena-train)"]
        trl = rates[f"Doors: {label}, 32 scripted episodes: TRL environment_factory"]
        assert ours[1] == trl[1] == "episodes/s" and ours[0] > 0 and trl[0] > 0
        assert f"Doors: {label}, 32 scripted episodes: TRL environment_factory / " in table  # the ratio line
