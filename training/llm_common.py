"""What the LLM trainers (``arena-train --algo sft|grpo``) share: names, the model, token ids, the run log.

    env_id = chat_env_id("TreasureHunt-v0")                       # every form the other CLIs take
    model, tokenizer = load_model("path/or/hub-id", gguf_file=None)
    ids, labels = sft_example(tokenizer, messages)                # loss on assistant tokens only
    segment = env_segment(tokenizer, messages, new_messages, ended_with_eos=True)

Token ids are built message by message from the model's own chat template: a message's ids are
the tokens of the text the template adds for it. So a conversation's ids are the same whether it
was rendered for SFT or grown turn by turn in a GRPO rollout, where the model's generated ids are
kept as they are and only the environment's messages are tokenized (never the model's text again).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml

from arena_envs.cli import env_argument

CHAT_ENVS = {"foraging": "arena_envs/Foraging-v0", "crafting": "arena_envs/Crafting-v0",
             "treasurehunt": "arena_envs/TreasureHunt-v0", "teamcapture": "arena_envs/TeamCapture-v0"}
TEAM_CAPTURE = CHAT_ENVS["teamcapture"]
IGNORE = -100  # the label of a token that carries no loss (PyTorch's cross-entropy ignore index)


class ModelLoadError(RuntimeError):
    """The model (or its tokenizer) could not be loaded: one line that says what and why."""


def chat_env_id(name: str) -> str:
    """``TreasureHunt-v0``, ``arena_envs/TreasureHunt-v0``, ``treasure_hunt`` -> ``arena_envs/TreasureHunt-v0``."""
    key = name.rpartition("/")[2].lower().replace("_", "").replace("-", "")
    key = key[:-2] if key.endswith("v0") else key
    if key in CHAT_ENVS:
        return CHAT_ENVS[key]
    raise SystemExit(f"arena-train: unknown chat environment {name!r}; choose one of "
                     f"{', '.join(v.split('/')[1] for v in CHAT_ENVS.values())}")


def chat_batch(config: dict[str, Any], size: int):
    """``size`` chat episodes of the config's environment stepped together: a
    :class:`~arena_envs.llm.chat.ChatBatch`, or for Team Capture a
    :class:`~arena_envs.llm.team.TeamChatBatch` of matches with the model playing ``chat_agent``."""
    if config["env_id"] == TEAM_CAPTURE:
        from arena_envs.llm.team import TeamChatBatch

        return TeamChatBatch(size, chat_agent=config.get("chat_agent", "blue_agent_1"),
                             max_turns=config.get("max_turns"), **config["env_kwargs"])
    from arena_envs.llm.chat import ChatBatch

    url = config.get("env_url")  # a server's environment arguments are its own
    where = {"remote": url} if url else config["env_kwargs"]
    return ChatBatch(config["env_id"], size, max_turns=config.get("max_turns"), **where)


# -- the model ---------------------------------------------------------------------------


def model_cache_dir() -> Path:
    return Path(os.environ.get("ARENA_MODEL_CACHE", Path.home() / ".cache" / "arena-envs" / "models"))


def resolve_model(model: str) -> str:
    """A finished ``arena-train`` run directory means its saved model (``<run>/model``)."""
    path = Path(model)
    if (path / "model" / "config.json").is_file():
        return str(path / "model")
    return model


def load_model(model: str, gguf_file: str | None = None, *, dtype: str = "float32"):
    """The causal LM and its tokenizer from a hub id or a directory (a GGUF in it with ``gguf_file``).

    A GGUF is dequantised by transformers (16-50 s for SmolLM2-135M); the dequantised model is kept
    under :func:`model_cache_dir` (``ARENA_MODEL_CACHE``), keyed by the file's path, size and time, so
    the next load takes a second. Any failure is a :class:`ModelLoadError` naming the model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(model)
    kwargs: dict[str, Any] = {}
    cached = None
    if gguf_file is not None:
        gguf = Path(source) / gguf_file
        if not gguf.is_file():
            raise ModelLoadError(f"cannot load {model!r}: no GGUF file {gguf}")
        stat = gguf.stat()
        key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        cached = model_cache_dir() / f"{gguf.stem}-{key}"
        if (cached / "config.json").is_file():
            source, gguf_file, cached = str(cached), None, None
        else:
            kwargs["gguf_file"] = gguf_file
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        network = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype), **kwargs)
    except Exception as error:  # a missing directory, a hub id without network, a broken file...
        raise ModelLoadError(f"cannot load {model!r}: {first_line(error)}") from None
    if gguf_file is not None:
        # the weights are plain tensors now: forget the GGUF "quantizer", so the model trains and saves
        network.hf_quantizer.remove_quantization_config(network)
        if cached is not None:
            save_model(network, tokenizer, cached)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template is None:
        raise ModelLoadError(f"cannot train {model!r} on chat environments: its tokenizer has no chat template")
    return network, tokenizer


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation that failed (Python's, or torch's CPU or GPU allocator's)."""
    return isinstance(error, MemoryError) or "can't allocate memory" in str(error) or \
        type(error).__name__ == "OutOfMemoryError"


def save_model(model, tokenizer, folder: Path) -> None:
    """Save through a temporary folder, so a half-written model is never taken for a whole one."""
    partial = folder.with_name(folder.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    partial.rename(folder)


# -- token ids, message by message -------------------------------------------------------


def render(tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool = False) -> str:
    """The chat template's text for ``messages`` (OpenAI dicts; a ``None`` content is rendered empty)."""
    plain = [{**message, "content": message.get("content") or ""} for message in messages]
    return tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=add_generation_prompt)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def continuation(tokenizer, before: list[dict[str, Any]], after: list[dict[str, Any]],
                 add_generation_prompt: bool = False) -> str:
    """The text the template adds for ``after`` behind ``before`` (whose own text must not change)."""
    head = render(tokenizer, before) if before else ""
    whole = render(tokenizer, before + after, add_generation_prompt)
    if not whole.startswith(head):
        raise ValueError("the chat template renders earlier messages differently once later ones follow "
                         "(e.g. it drops past reasoning): multi-turn token ids need a prefix-stable template")
    return whole[len(head):]


def assistant_parts(tokenizer, before: list[dict[str, Any]], message: dict[str, Any]) -> tuple[str, str, str]:
    """An assistant message's text split as (header, body up to and including end of turn, after it):
    the model writes the body (and so is trained on it); the header and what follows are the template's."""
    header = continuation(tokenizer, before, [], add_generation_prompt=True)
    text = continuation(tokenizer, before, [message])
    if not text.startswith(header):
        raise ValueError("the chat template's generation prompt does not open its assistant messages")
    body = text[len(header):]
    end = tokenizer.eos_token or ""
    cut = body.rfind(end) + len(end) if end and end in body else len(body)
    return header, body[:cut], body[cut:]


def sft_example(tokenizer, messages: list[dict[str, Any]],
                max_length: int | None = None) -> tuple[list[int], list[int]]:
    """Token ids of a transcript and their labels: assistant bodies (end of turn included) keep their
    ids, every other token (system, user, tool, the template's headers) is ``IGNORE``. With
    ``max_length``, the first ``max_length`` of them (the messages past it are never rendered)."""
    ids: list[int] = []
    labels: list[int] = []
    for k, message in enumerate(messages):
        if max_length is not None and len(ids) >= max_length:
            # each message renders every one before it: a whole Foraging transcript (500 messages,
            # 50k tokens) took 20 s, for the 2,048 tokens kept
            break
        if message.get("role") == "assistant":
            header, body, after = assistant_parts(tokenizer, messages[:k], message)
            parts = [(header, False), (body, True), (after, False)]
        else:
            parts = [(continuation(tokenizer, messages[:k], [message]), False)]
        for text, trained in parts:
            tokens = encode(tokenizer, text) if text else []
            ids += tokens
            labels += tokens if trained else [IGNORE] * len(tokens)
    return ids[:max_length], labels[:max_length]


def turn_trailer(tokenizer) -> str:
    """What the template writes after an assistant message's content (``<|im_end|>\\n`` in ChatML)."""
    mark = "\x00MARK\x00"
    text = render(tokenizer, [{"role": "user", "content": "u"}, {"role": "assistant", "content": mark}])
    return text[text.index(mark) + len(mark):]


def env_segment(tokenizer, messages: list[dict[str, Any]], new_messages: list[dict[str, Any]],
                ended_with_eos: bool) -> list[int]:
    """The ids between one generated reply and the next: the rest of the reply's end of turn (all of
    it when the model was cut off before writing it), the environment's ``new_messages`` and the next
    generation prompt. ``messages`` ends with the assistant reply."""
    trailer = turn_trailer(tokenizer)
    eos = tokenizer.eos_token or ""
    if ended_with_eos and eos and trailer.startswith(eos):
        trailer = trailer[len(eos):]
    return encode(tokenizer, trailer + continuation(tokenizer, messages, new_messages, add_generation_prompt=True))


# -- the run directory -------------------------------------------------------------------


def write_config(out: Path, config: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def metrics_callback(out: Path, name: str = "progress.csv"):
    """A transformers ``TrainerCallback`` appending every logged row to ``<out>/<name>`` (the CSV beside
    the TensorBoard events that ``report_to="tensorboard"`` writes)."""
    from transformers import TrainerCallback

    class CsvMetrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs:
                return
            row = {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
            path = out / name
            fields = list(row)
            if path.exists():
                with path.open() as handle:
                    old = next(csv.reader(handle), [])
                fields = old + [k for k in row if k not in old]
                if fields != old:  # a new metric: rewrite the header, keep the rows
                    rows = list(csv.DictReader(path.open()))
                    with path.open("w", newline="") as handle:
                        writer = csv.DictWriter(handle, fields)
                        writer.writeheader()
                        writer.writerows(rows)
            with path.open("a", newline="") as handle:
                writer = csv.DictWriter(handle, fields)
                if handle.tell() == 0:
                    writer.writeheader()
                writer.writerow(row)

    return CsvMetrics()


def last_checkpoint(folder: Path) -> str | None:
    """The newest ``checkpoint-<step>`` a transformers Trainer wrote in ``folder``."""
    found = [(int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*")
             if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").is_file()]
    return str(max(found)[1]) if found else None


def dump_json_line(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


# -- the command line --------------------------------------------------------------------

LLM_ALGOS = ("sft", "grpo")
TEXT_FORMATS = ("hermes", "json", "llama3_json", "qwen3_xml", "mistral")


LLM_DEFAULTS = Path(__file__).with_name("configs") / "llm.yaml"
"""Each chat scenario's defaults for the flags below (``configs/llm.yaml``), sized for a 2-core, 24 GB machine."""


def scenario_defaults(env_id: str, algo: str) -> dict[str, Any]:
    """``configs/llm.yaml``'s values for ``env_id`` (e.g. ``arena_envs/Foraging-v0``) and ``algo``."""
    table = yaml.safe_load(LLM_DEFAULTS.read_text())
    return dict(table[env_id.removeprefix("arena_envs/")][algo])


def parse_args(argv: list[str] | None):
    """``arena-train ENV --algo sft|grpo --model MODEL --out DIR [...]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="arena-train", description="Train a language model on a chat "
                                     "environment: SFT on scripted transcripts, or GRPO (TRL) on the environment")
    parser.add_argument("env", help="chat environment: TreasureHunt-v0, Foraging-v0, Crafting-v0 or TeamCapture-v0")
    parser.add_argument("--algo", choices=LLM_ALGOS, required=True)
    parser.add_argument("--model", help="a Hugging Face hub id or a local directory (a finished arena-train "
                                         "run's directory included); default: the --resume'd run's")
    parser.add_argument("--gguf-file", help="load this GGUF file inside --model's directory (dequantised)")
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    parser.add_argument("--max-steps", type=int, default=None, help="optimizer steps (default: sft 100, grpo 50)")
    parser.add_argument("--learning-rate", type=float, default=None, help="default: sft 1e-4, grpo 1e-5 "
                                                                          "(x10 with --lora)")
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter (peft), merged into the saved model")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--format", choices=TEXT_FORMATS, default="hermes",
                        help="how the model writes calls (the scripted transcripts are written this way)")
    parser.add_argument("--seed", type=int, default=0, help="first seed of the training episodes")
    parser.add_argument("--chat-agent", default="blue_agent_1", help="TeamCapture-v0: the agent the model plays "
                        "(the other agents of both teams play the scripted team)")
    parser.add_argument("--max-turns", type=int, default=None, help="replies per episode before truncation")
    parser.add_argument("--env-arg", type=env_argument, action="append", default=[], metavar="KEY=VALUE",
                        help="environment argument, e.g. difficulty=easy (JSON values allowed)")
    parser.add_argument("--save-steps", type=int, default=10, help="checkpoint every this many steps")
    parser.add_argument("--keep-checkpoints", type=int, default=2, help="checkpoints kept, the newest "
                        "(each holds the model and its optimizer state: 1.6 GB for SmolLM2-135M)")
    # the defaults of these are each scenario's (configs/llm.yaml): see scenario_defaults
    parser.add_argument("--batch-size", type=int, default=None, help="sft: transcripts per step")
    parser.add_argument("--episodes", type=int, default=None, help="sft: scripted episodes to learn from")
    parser.add_argument("--max-length", type=int, default=None, help="sft: tokens per transcript (longer: cut)")
    parser.add_argument("--group-size", type=int, default=None, help="grpo: episodes per seed (a group)")
    parser.add_argument("--groups", type=int, default=None, help="grpo: groups per step")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="grpo: tokens per reply")
    parser.add_argument("--max-completion-tokens", type=int, default=None,
                        help="grpo: an episode's replies and environment messages, in tokens, before it is cut")
    parser.add_argument("--temperature", type=float, default=1.0, help="grpo: sampling temperature")
    parser.add_argument("--no-call-penalty", type=float, default=0.0,
                        help="grpo: subtracted from the reward for each reply with no readable call")
    parser.add_argument("--success-bonus", type=float, default=0.0, help="grpo: added to the reward on success")
    parser.add_argument("--loss-type", choices=("dapo", "grpo", "dr_grpo", "bnpo"), default="dapo",
                        help="grpo: how TRL weighs tokens: dapo (its default) averages over all the step's "
                             "tokens, grpo over each episode's, then episodes")
    parser.add_argument("--env-url", metavar="URL", help="grpo: play the episodes on this arena-serve server "
                        "(arena-serve treasure_hunt, through OpenEnv's client) instead of in this process")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.env_url is not None and (args.algo != "grpo" or chat_env_id(args.env) != CHAT_ENVS["treasurehunt"]):
        parser.error("--env-url plays GRPO episodes of TreasureHunt-v0 on an arena-serve treasure_hunt server")
    for name in ("max_steps", "episodes", "batch_size", "group_size", "groups", "max_new_tokens", "save_steps",
                 "keep_checkpoints"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.algo == "grpo" and args.group_size is not None and args.group_size < 2:
        parser.error("--group-size must be at least 2: a group of one has no spread to learn from")
    return args


def prepare_run(args) -> tuple[dict[str, Any], Path, str | None]:
    """The run's config (a resumed run keeps its own, flags aside), its directory and the checkpoint to
    resume from. A run directory is never silently overwritten."""
    out = Path(args.out)
    checkpoint = last_checkpoint(out / "checkpoints")
    if (checkpoint or (out / "model").exists()) and not args.resume:
        raise SystemExit(f"arena-train: {out} holds a run already: pass --resume to continue it, "
                         "or choose another --out")
    config_path = out / "config.yaml"
    if args.resume and config_path.is_file():
        config = yaml.safe_load(config_path.read_text())
        if config.get("algo") != args.algo:
            raise SystemExit(f"arena-train: {out} was trained with --algo {config.get('algo')}: resume it with that")
        if args.max_steps is not None:
            config["max_steps"] = args.max_steps
        if checkpoint is None:
            print(f"no checkpoint in {out / 'checkpoints'}: starting the run again")
        return config, out, checkpoint
    if args.model is None:
        raise SystemExit("arena-train: --model is required (a hub id or a local directory)")
    sft = args.algo == "sft"
    env_id = chat_env_id(args.env)
    for name, value in scenario_defaults(env_id, args.algo).items():  # the flags not given
        if getattr(args, name) is None:
            setattr(args, name, value)
    config = {
        "algo": args.algo, "env_id": env_id, "model": args.model, "gguf_file": args.gguf_file,
        "format": args.format, "seed": args.seed, "max_turns": args.max_turns,
        **({"chat_agent": args.chat_agent} if chat_env_id(args.env) == TEAM_CAPTURE else {}),
        "env_kwargs": dict(args.env_arg),
        "max_steps": args.max_steps or (100 if sft else 50),
        "learning_rate": args.learning_rate or (1e-4 if sft else 1e-5) * (10 if args.lora else 1),
        "lora": args.lora, "lora_rank": args.lora_rank, "save_steps": args.save_steps,
        "keep_checkpoints": args.keep_checkpoints, "threads": args.threads,
    }
    if sft:
        config.update(batch_size=args.batch_size, episodes=args.episodes, max_length=args.max_length)
    else:
        config.update(group_size=args.group_size, groups=args.groups, max_new_tokens=args.max_new_tokens,
                      max_completion_tokens=args.max_completion_tokens, temperature=args.temperature,
                      no_call_penalty=args.no_call_penalty, success_bonus=args.success_bonus, env_url=args.env_url,
                      loss_type=args.loss_type)
    write_config(out, config)
    return config, out, None


def trainer_arguments(config: dict[str, Any], out: Path) -> dict[str, Any]:
    """The transformers ``TrainingArguments`` both trainers share: CPU, checkpoints under ``<out>/checkpoints``,
    a log row every step (CSV and TensorBoard through :func:`run_callbacks`)."""
    return {"output_dir": str(out / "checkpoints"), "max_steps": config["max_steps"],
            "learning_rate": config["learning_rate"], "logging_steps": 1, "save_steps": config["save_steps"],
            "save_total_limit": config.get("keep_checkpoints", 2), "save_strategy": "steps", "report_to": "none",
            "use_cpu": True, "seed": config["seed"],
            "disable_tqdm": True, "dataloader_num_workers": 0, "save_only_model": False,
            # float32 throughout: TRL turns bf16 autocast on by default, and then the policy trained
            # is not the one whose log-probabilities the rollout recorded
            "bf16": False, "fp16": False,
            # TRL checkpoints activations by default: recomputing the forward pass in the backward one
            # cost 15% more per episode here (1,200 tokens: 9.0 s against 7.8 s) to save memory a
            # 135M model does not need
            "activation_checkpointing": False}


def run_callbacks(out: Path) -> list:
    """CSV (``progress.csv``) and TensorBoard (``tb/``) logging of every row the trainer logs, and a
    line on stdout per optimizer step."""
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    return [metrics_callback(out), TensorBoardCallback(tb_writer=SummaryWriter(str(out / "tb"))),
            step_printer()]


def step_printer():
    """A ``TrainerCallback`` printing each optimizer step as it ends: ``step 3/100: loss 1.92, reward 0.41,
    12 s (36 s in all, 4.1 GB)`` (the memory is the process's peak resident size)."""
    import resource
    import time

    from transformers import TrainerCallback

    class StepPrinter(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = self.last = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            now = time.monotonic()
            shown = ", ".join(f"{key} {logs[key]:.4g}" for key in ("loss", "reward") if key in logs)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # KB on Linux
            print(f"step {state.global_step}/{state.max_steps}: {shown}, {now - self.last:.0f} s "
                  f"({now - self.start:.0f} s in all, {peak:.1f} GB)", flush=True)
            self.last = now

    return StepPrinter()


def episode_printer(total: int):
    """A ``progress`` callback for :func:`~arena_envs.llm.runner.run_episodes`: a line per episode played."""
    done = [0, 0]

    def show(record) -> None:
        done[0] += 1
        done[1] += bool(record.success)
        print(f"episode {done[0]}/{total} played (seed {record.seed}, {len(record.messages)} messages): "
              f"{done[1]} won so far", flush=True)

    return show


def peft_config(config: dict[str, Any]):
    """A LoRA adapter on every linear layer of the attention and MLP blocks, or None."""
    if not config.get("lora"):
        return None
    from peft import LoraConfig

    rank = config.get("lora_rank", 16)
    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")


def model_for(config: dict[str, Any]):
    """The config's model and tokenizer, or one line on stderr and exit status 2."""
    import torch

    if config.get("threads"):
        torch.set_num_threads(config["threads"])
    try:
        return load_model(config["model"], config.get("gguf_file"))
    except ModelLoadError as error:
        raise SystemExit(f"arena-train: {error}") from None


def save_final(trainer, tokenizer, out: Path) -> Path:
    """The trained model in ``<out>/model`` (a LoRA adapter merged in): ``--model <out>`` loads it."""
    model = trainer.model
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    save_model(model, tokenizer, out / "model")
    return out / "model"
