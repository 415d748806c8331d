"""``arena-train ENV --algo sft``: supervised fine-tuning on the scripted agent's transcripts.

    arena-train TreasureHunt-v0 --algo sft --model HuggingFaceTB/SmolLM2-135M-Instruct --out runs/sft

1. The scripted agent (``arena-agent --agent scripted``) plays ``--episodes`` seeded episodes through
   the chat environment, writing its calls in ``--format``: the way the model will be asked to write them.
2. Each transcript becomes token ids message by message through the model's chat template; only the
   assistant replies (their end-of-turn token included) keep labels, every system, user and tool token
   is -100 (:func:`~arena_envs.training.llm_common.sft_example`).
3. TRL's ``SFTTrainer`` trains on those ids and labels as given.

The run directory: ``config.yaml``, ``transcripts.jsonl`` (what was learned from), ``progress.csv`` and
``tb/`` (loss, learning rate, token accuracy per step), ``checkpoints/checkpoint-<step>`` and ``model/``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from arena_envs.training.llm_common import (
    IGNORE,
    TEAM_CAPTURE,
    episode_printer,
    model_for,
    peft_config,
    run_callbacks,
    save_final,
    sft_example,
    trainer_arguments,
)


def scripted_transcripts(config: dict[str, Any], out: Path) -> list[list[dict[str, Any]]]:
    """The scripted agent's successful episodes (OpenAI messages), also written to ``transcripts.jsonl``."""
    from arena_envs.llm.agents import ScriptedChatAgent
    from arena_envs.llm.chat import ChatPool
    from arena_envs.llm.runner import run_episodes, write_transcripts

    async def play():
        seeds = range(config["seed"], config["seed"] + config["episodes"])
        options = {"max_turns": config.get("max_turns"), **config["env_kwargs"]}
        pool, team = None, None
        if config["env_id"] == TEAM_CAPTURE:  # the model's agent in a match of scripted teams
            team = {"chat_agents": [config.get("chat_agent", "blue_agent_1")], "others": "scripted", **options}
        else:
            pool = ChatPool(config["env_id"], size=min(config["episodes"], 32), **options)
        return await run_episodes(pool, ScriptedChatAgent(config["format"]), seeds, team=team,
                                  concurrency=min(config["episodes"], 32), progress=episode_printer(len(seeds)))

    records = asyncio.run(play())
    write_transcripts(records, out / "transcripts.jsonl")
    # imitate what works: an episode the script lost (a hazard, the turn cap) teaches nothing wanted; in
    # Team Capture a match's outcome is the teams', and a match cut by --max-turns has none yet: every
    # match the script played through is its demonstration
    team = config["env_id"] == TEAM_CAPTURE
    kept = [record.messages for record in records if (record.success or team) and record.error is None]
    if not kept:
        raise SystemExit(f"arena-train: the scripted agent won none of {len(records)} episodes of "
                         f"{config['env_id']} (see {out / 'transcripts.jsonl'}): nothing to imitate")
    return kept


def train(config: dict[str, Any], out: Path, checkpoint: str | None) -> Path:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    # 1. the transcripts, as token ids and assistant-only labels
    model, tokenizer = model_for(config)
    rows = []
    for messages in scripted_transcripts(config, out):
        ids, labels = sft_example(tokenizer, messages, config["max_length"])
        if any(label != IGNORE for label in labels):
            rows.append({"input_ids": ids, "labels": labels})
    if not rows:
        raise SystemExit(f"arena-train: no transcript has a reply within its first --max-length "
                         f"{config['max_length']} tokens: raise --max-length")
    print(f"SFT on {len(rows)} transcripts, {sum(len(r['input_ids']) for r in rows):,} tokens, "
          f"{sum(sum(label != IGNORE for label in r['labels']) for r in rows):,} of them trained", flush=True)

    # 2. TRL's SFTTrainer on exactly those ids and labels
    arguments = SFTConfig(**trainer_arguments(config, out), per_device_train_batch_size=config["batch_size"],
                          max_length=config["max_length"], packing=False, assistant_only_loss=False,
                          completion_only_loss=False)
    trainer = SFTTrainer(model=model, args=arguments, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer, peft_config=peft_config(config), callbacks=run_callbacks(out))
    trainer.train(resume_from_checkpoint=checkpoint)

    # 3. the model, where --model can find it
    return save_final(trainer, tokenizer, out)
