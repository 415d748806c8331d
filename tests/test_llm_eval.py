"""``python -m arena_envs.training.llm_eval``: what a model samples comes from ``--seed``, on a model small
enough to load in a second (the real SmolLM2's evaluation runs in tests/test_llm_training.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arena_envs.training import llm_eval

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def indifferent_model(tmp_path_factory) -> Path:
    """A one-layer Llama over bytes (a ChatML template) with every weight zero: each token is equally
    likely whatever the prompt, so what it samples depends on the sampling generator alone."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={char: i for i, char in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|im_start|>", eos_token="<|im_end|>")
    tokenizer.chat_template = CHATML
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16384,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    folder = tmp_path_factory.mktemp("indifferent")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sampled(model: Path, seed: int) -> str:
    """The digest of what the model sampled in the hunt of ``seed``, evaluated alone (one reply)."""
    summary = llm_eval.main([str(model), "--env", "TreasureHunt-v0", "--env-arg", "difficulty=easy", "--episodes", "1",
                             "--batch", "1", "--max-new-tokens", "6", "--max-turns", "1", "--seed", str(seed)])
    (episode,) = summary["per_episode"]
    assert episode["seed"] == seed and episode["generated_tokens"] > 0
    return episode["generated_digest"]


def test_the_sampling_seed_is_the_evaluations_seed(indifferent_model):
    """The same --seed samples the same tokens, whatever the caller's generator held; another --seed
    samples others, and from a model indifferent to its prompt only the sampling seed can change them
    (an evaluation seeding its sampling with a constant samples the same tokens for every hunt)."""
    first = sampled(indifferent_model, 100_000)
    torch.manual_seed(12345)
    assert sampled(indifferent_model, 100_000) == first
    assert sampled(indifferent_model, 100_001) != first
    assert sampled(indifferent_model, 7) != first
