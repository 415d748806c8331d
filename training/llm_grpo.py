"""``arena-train ENV --algo grpo``: GRPO through TRL's ``GRPOTrainer``, episodes played on the chat environments.

    arena-train TreasureHunt-v0 --algo grpo --model runs/sft --group-size 4 --groups 2 --max-turns 4 --out runs/grpo

TRL asks a ``rollout_func`` for one completion per prompt; here a prompt is only a seed (``"seed 17"``),
and TRL's sampler repeats each prompt ``--group-size`` times in a row, so every group plays one seed.
:class:`ChatRollout` plays all of a step's episodes at once, turn by turn:

1. the sessions of one :class:`~arena_envs.llm.chat.ChatBatch` reset (a group's members to the same seed),
   their opening messages rendered by the model's chat template: the prompt ids;
2. the model generates a reply for every live episode in one batched ``generate`` (sampling from the full
   distribution at ``--temperature``), keeping the generated ids and their log-probabilities; it continues
   from the key-value cache of the turns before (:class:`TurnBatch`), so a turn computes only its new tokens;
3. the replies (decoded) step the sessions together; the environment's answer (tool and user messages and
   the next generation prompt) is tokenized on its own (:func:`~arena_envs.training.llm_common.env_segment`)
   and appended behind the generated ids, and the next turn generates from exactly that sequence;
4. the completion is every generated segment and environment segment in order, with ``env_mask`` 1 on
   generated tokens and 0 on the environment's: TRL trains on these ids as they are, the environment's
   tokens carrying no loss. Nothing the model wrote is ever tokenized again.

The reward is the environment's own return, plus ``--success-bonus`` on success, minus ``--no-call-penalty``
for each reply without a readable call. TRL normalises it within each group (``scale_rewards="group"``).

The run directory adds to SFT's: ``rollouts.jsonl``, one line per episode and step (seed, group, the
generated segments, the trained ids and loss mask as TRL holds them, sampling log-probabilities, reward,
advantage, the transcript), and these metrics per step in ``progress.csv`` and ``tb/``:
``arena/zero_spread_groups`` (share of groups whose rewards are all equal: they teach nothing),
``arena/readable_call_rate`` (replies with a readable call), ``arena/success``, ``arena/return``,
``arena/reward``, ``arena/turns``, ``arena/tokens_per_s`` (generated tokens per second of rollout),
``arena/rollout_seconds``; TRL's own ``step_time`` is the wall time of a step and ``frac_reward_zero_std``
its count of zero-spread groups.

With ``--env-url http://127.0.0.1:8000`` the episodes are played on an ``arena-serve treasure_hunt``
server instead, one OpenEnv session each (TRL's OpenEnv path): the rollout code and the messages are the
same (:class:`~arena_envs.llm.backends.RemoteHuntBackend`).

Generation runs the model itself on CPU. TRL can generate with a vLLM server instead (``use_vllm=True``,
``vllm_mode="server"``); a custom rollout then asks that server for completions (``trl.generation``):
not wired here, since no vLLM runs on this machine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from arena_envs.training.llm_common import (
    chat_batch,
    dump_json_line,
    encode,
    env_segment,
    model_for,
    peft_config,
    render,
    run_callbacks,
    save_final,
    trainer_arguments,
)


def seed_prompt(seed: int) -> str:
    return f"seed {seed}"


def prompt_seed(prompt: Any) -> int:
    """The seed of a prompt made by :func:`seed_prompt`."""
    word, _, number = str(prompt).partition(" ")
    if word != "seed" or not number.lstrip("-").isdigit():
        raise ValueError(f"a GRPO prompt here is 'seed <int>', got {prompt!r}")
    return int(number)


class TurnBatch:
    """The token sequences of a batch of episodes and their key-value cache, grown turn by turn.

    Each turn appends every live episode's new tokens (its prompt, then each environment segment) and
    samples the next replies in one batched ``generate`` that continues from the cache, so only the new
    tokens are computed. Re-reading whole transcripts every turn cost 24 s for 8 episodes of 1,200
    tokens on this machine (the prefill grows with the transcript); continuing costs a few seconds
    whatever the transcript's length. Rows are left-padded per segment (a pad is masked out, and
    position ids count real tokens only), so each row reads exactly its episode's token sequence.
    A finished episode's row is dropped, cache included.
    """

    def __init__(self, model, tokenizer, episodes: int):
        self.model, self.tokenizer = model, tokenizer
        self.rows = list(range(episodes))  # row r of the tensors is episode self.rows[r]
        self.ids = torch.empty((episodes, 0), dtype=torch.long)
        self.mask = torch.empty((episodes, 0), dtype=torch.long)
        self.cache = None

    def keep(self, episodes: list[int]) -> None:
        """Drop every row but those of ``episodes`` (in the order of :attr:`rows`)."""
        kept = [r for r, e in enumerate(self.rows) if e in set(episodes)]
        if len(kept) == len(self.rows):
            return
        index = torch.tensor(kept, dtype=torch.long)
        self.ids, self.mask, self.rows = self.ids[index], self.mask[index], [self.rows[r] for r in kept]
        if self.cache is not None:
            self.cache.batch_select_indices(index)

    def extend(self, segments: dict[int, list[int]]) -> None:
        """Append each episode's new tokens, left-padded to the longest (pads carry mask 0)."""
        width = max(len(segments[e]) for e in self.rows)
        pad = self.tokenizer.pad_token_id
        ids = [[pad] * (width - len(segments[e])) + segments[e] for e in self.rows]
        mask = [[0] * (width - len(segments[e])) + [1] * len(segments[e]) for e in self.rows]
        self.ids = torch.cat([self.ids, torch.tensor(ids, dtype=torch.long)], 1)
        self.mask = torch.cat([self.mask, torch.tensor(mask, dtype=torch.long)], 1)

    @torch.no_grad()
    def generate(self, max_new_tokens: int, temperature: float) -> dict[int, tuple[list[int], list[float]]]:
        """One sampled reply per row: its ids (up to and including end of turn) and the log-probability
        of each under the distribution it was sampled from (the full softmax at ``temperature``)."""
        model, tokenizer = self.model, self.tokenizer
        training = model.training
        model.eval()  # no dropout while sampling: the log-probabilities are the policy's own
        try:
            out = model.generate(input_ids=self.ids, attention_mask=self.mask, cache=self.cache, do_sample=True,
                                 temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                 output_logits=True, return_dict_in_generate=True, use_cache=True)
        finally:
            model.train(training)
        self.cache = out.cache
        new = out.sequences[:, self.ids.shape[1]:]
        logps = torch.log_softmax(torch.stack(out.logits, dim=1).float() / temperature, dim=-1)
        logps = logps.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        replies, mask = {}, torch.zeros_like(new)
        for r, (row, row_logps) in enumerate(zip(new.tolist(), logps.tolist(), strict=True)):
            end = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
            replies[self.rows[r]] = (row[:end], row_logps[:end])
            mask[r, :end] = 1  # what follows the end of turn is padding: never read again
        self.ids, self.mask = out.sequences, torch.cat([self.mask, mask], 1)
        return replies


class ChatRollout:
    """TRL's ``rollout_func``: plays the step's episodes on a :class:`ChatBatch`; see the module docstring."""

    def __init__(self, config: dict[str, Any], tokenizer, out: Path):
        self.config, self.tokenizer, self.out = config, tokenizer, out
        self.batches: dict[int, Any] = {}
        self.episodes: list[dict[str, Any]] = []  # the last rollout's, for the reward and the log

    def chat_batch(self, size: int):
        if size not in self.batches:
            self.batches[size] = chat_batch(self.config, size)
        return self.batches[size]

    def __call__(self, prompts: list[Any], trainer) -> dict[str, list]:
        """TRL's contract: one completion per prompt, with its prompt ids, logprobs and (extra) env_mask."""
        episodes = self.play(trainer.accelerator.unwrap_model(trainer.model), [prompt_seed(p) for p in prompts])
        return {"prompt_ids": [e["prompt_ids"] for e in episodes],
                "completion_ids": [e["completion_ids"] for e in episodes],
                "logprobs": [e["logprobs"] for e in episodes], "env_mask": [e["env_mask"] for e in episodes],
                "arena_reward": [e["reward"] for e in episodes]}

    def play(self, model, seeds: list[int]) -> list[dict[str, Any]]:
        """One episode per seed, all stepped together; each a dict of its ids, masks, reward and transcript."""
        started = time.perf_counter()
        config, tokenizer = self.config, self.tokenizer
        batch = self.chat_batch(len(seeds))
        openings = batch.reset(seeds)
        episodes = [{"seed": seed, "prompt_ids": encode(tokenizer, render(tokenizer, messages, True)),
                     "completion_ids": [], "env_mask": [], "logprobs": [], "generated": [], "readable": [],
                     "cut": False} for seed, (messages, _tools) in zip(seeds, openings, strict=True)]
        sessions = batch.sessions
        turns = TurnBatch(model, tokenizer, len(seeds))
        segments = {i: episode["prompt_ids"] for i, episode in enumerate(episodes)}
        while True:
            live = [i for i, s in enumerate(sessions) if not s.done and not episodes[i]["cut"]]
            if not live:
                break
            turns.keep(live)
            turns.extend(segments)
            replies = turns.generate(config["max_new_tokens"], config["temperature"])
            texts: list[str | None] = [None] * len(sessions)
            for i in live:
                ids, logps = replies[i]
                episode = episodes[i]
                episode["generated"].append(ids)
                episode["completion_ids"] += ids
                episode["env_mask"] += [1] * len(ids)
                episode["logprobs"] += logps
                texts[i] = tokenizer.decode(ids, skip_special_tokens=True)
            steps = batch.step(texts)
            for i in live:
                ids = replies[i][0]
                step, episode = steps[i], episodes[i]
                episode["readable"].append(step.info["calls_parsed"] > step.info["calls_unreadable"])
                if sessions[i].done:
                    continue
                # the environment's answer, behind the reply just as the model will read it next turn
                history = sessions[i].messages[:len(sessions[i].messages) - len(step.messages)]
                segment = env_segment(tokenizer, history, step.messages,
                                      ended_with_eos=bool(ids) and ids[-1] == tokenizer.eos_token_id)
                if len(episode["completion_ids"]) + len(segment) + config["max_new_tokens"] > \
                        config["max_completion_tokens"]:
                    episode["cut"] = True  # no room for another reply: the episode ends here, as it stands
                    continue
                segments[i] = segment
                episode["completion_ids"] += segment
                episode["env_mask"] += [0] * len(segment)
                episode["logprobs"] += [0.0] * len(segment)
        seconds = time.perf_counter() - started
        for i, (episode, session) in enumerate(zip(episodes, sessions, strict=True)):
            episode.update(index=i, group=i // config["group_size"], messages=list(session.messages),
                           env_return=session.episode_return, success=bool(session.last_info.get("success", False)),
                           turns=session.turn)
            episode["reward"] = reward_of(episode, config)
        generated = sum(sum(e["env_mask"]) for e in episodes)
        self.stats = {"rollout_seconds": seconds, "tokens_per_s": generated / max(seconds, 1e-9)}
        self.episodes = episodes
        return episodes

    def close(self) -> None:
        for batch in self.batches.values():
            batch.close()


def reward_of(episode: dict[str, Any], config: dict[str, Any]) -> float:
    """The environment's return, + the success bonus, - the penalty for each reply without a readable call."""
    unreadable = sum(not readable for readable in episode["readable"])
    return (episode["env_return"] + config["success_bonus"] * episode["success"]
            - config["no_call_penalty"] * unreadable)


def group_metrics(episodes: list[dict[str, Any]], group_size: int) -> dict[str, float]:
    """What a step's episodes did, the share of zero-spread groups among them."""
    rewards = [e["reward"] for e in episodes]
    groups = [rewards[k:k + group_size] for k in range(0, len(rewards), group_size)]
    replies = [r for e in episodes for r in e["readable"]]
    n = len(episodes)
    return {"zero_spread_groups": sum(max(g) - min(g) < 1e-9 for g in groups) / len(groups),
            "readable_call_rate": sum(replies) / max(len(replies), 1),
            "success": sum(e["success"] for e in episodes) / n, "return": sum(e["env_return"] for e in episodes) / n,
            "reward": sum(rewards) / n, "turns": sum(e["turns"] for e in episodes) / n}


def make_trainer_class():
    from trl import GRPOTrainer

    class ArenaGRPOTrainer(GRPOTrainer):
        """TRL's trainer, plus a line per episode in ``rollouts.jsonl`` holding what TRL will train on
        (its own padded completion ids, loss mask and advantages) beside what was generated."""

        rollout: ChatRollout

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            mask = output["completion_mask"] * output.get("tool_mask", torch.ones_like(output["completion_mask"]))
            for k, episode in enumerate(self.rollout.episodes):
                length = int(output["completion_mask"][k].sum())
                record = {key: episode[key] for key in ("seed", "group", "index", "prompt_ids", "generated",
                                                        "logprobs", "reward", "env_return", "success", "turns",
                                                        "readable", "cut", "messages")}
                record.update(step=self.state.global_step, advantage=float(output["advantages"][k]),
                              trained_ids=output["completion_ids"][k][:length].tolist(),
                              loss_mask=mask[k][:length].tolist())
                dump_json_line(self.rollout.out / "rollouts.jsonl", record)
            return output

        def _compute_loss(self, model, inputs):
            return super()._compute_loss(model, without_padding_columns(inputs))

    return ArenaGRPOTrainer


def without_padding_columns(inputs: dict[str, Any]) -> dict[str, Any]:
    """A training micro-batch without the columns that are padding in every row: the prompt's left ones
    and the completion's right ones. The loss is unchanged: padding carries none, attention is causal,
    and rotary positions are relative (a shift of every position changes no attention score, up to float
    rounding)."""
    prompt = inputs["prompt_mask"].any(0).nonzero()
    completion = inputs["completion_mask"].any(0).nonzero()
    start = int(prompt[0]) if len(prompt) else 0
    end = int(completion[-1]) + 1 if len(completion) else 1
    width = inputs["completion_ids"].size(1)
    trimmed = dict(inputs)
    for key, value in inputs.items():
        if key in ("prompt_ids", "prompt_mask"):
            trimmed[key] = value[:, start:]
        elif isinstance(value, torch.Tensor) and value.dim() == 2 and value.size(1) == width:
            trimmed[key] = value[:, :end]  # the completion's ids, masks and per-token values
    return trimmed


def grpo_arguments(config: dict[str, Any], out: Path):
    """TRL's ``GRPOConfig`` for a run: one optimizer step per step's episodes, trained one episode at a time
    (gradients accumulated). TRL pads a step's episodes to the longest, and an episode alone is trained
    without that padding (see :func:`without_padding_columns`), about half the tokens of a Treasure Hunt step."""
    from trl import GRPOConfig

    return GRPOConfig(**trainer_arguments(config, out), per_device_train_batch_size=1,
                      gradient_accumulation_steps=config["group_size"] * config["groups"],
                      num_generations=config["group_size"], num_iterations=1, beta=0.0,
                      loss_type=config.get("loss_type", "dapo"),  # runs made before the flag: TRL's default
                      temperature=config["temperature"], top_k=0, scale_rewards="group",
                      max_completion_length=config["max_completion_tokens"], log_completions=False)


def train(config: dict[str, Any], out: Path, checkpoint: str | None) -> Path:
    from datasets import Dataset

    model, tokenizer = model_for(config)
    rollout = ChatRollout(config, tokenizer, out)
    group_size = config["group_size"]

    def arena_reward(prompts, completions, arena_reward, log_metric=None, **kwargs) -> list[float]:
        """The rewards the rollout computed from the environment, and the step's metrics."""
        if log_metric is not None:
            for name, value in {**group_metrics(rollout.episodes, group_size), **rollout.stats}.items():
                log_metric(f"arena/{name}", value)
        return list(arena_reward)

    # every step takes `groups` fresh seeds; TRL repeats each `group_size` times, in a row
    seeds = range(config["seed"], config["seed"] + config["max_steps"] * config["groups"])
    dataset = Dataset.from_list([{"prompt": seed_prompt(seed)} for seed in seeds])
    arguments = grpo_arguments(config, out)
    trainer = make_trainer_class()(model=model, reward_funcs=[arena_reward], args=arguments, train_dataset=dataset,
                                   processing_class=tokenizer, peft_config=peft_config(config),
                                   callbacks=run_callbacks(out), rollout_func=rollout)
    trainer.rollout = rollout
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        rollout.close()
    return save_final(trainer, tokenizer, out)
