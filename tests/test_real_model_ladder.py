"""The real-model tier of ``arena-eval --ladder``: a SmolLM2-135M seat (llama.cpp's OpenAI server,
started on 127.0.0.1 as in tests/test_real_model.py) on the ladder beside a policy seat, through
the chat path. Its server validates every request itself; a reply it refused would be a failed one."""

from __future__ import annotations

import json

from arena_envs.cli import arena_eval


def test_a_smollm2_team_plays_on_the_ladder(llama, tmp_path):
    """arena-eval --ladder with a mixed team: SmolLM2 (hermes calls in text, the tools in the prompt) in
    seat 1, the scripted team's second agent in seat 2, against the scripted team; one game, one reply
    (a reply takes ~100 s of this machine under load), the game shortened to 300 ticks."""
    team = f"smollm2+scripted=llm:smollm2@{llama.base_url}+scripted"
    status = arena_eval(["--ladder", "scripted", team, "--games", "1", "--llm-games", "1", "--llm-turns", "1",
                         "--llm-format", "hermes", "--llm-no-tools", "--llm-max-tokens", "32",
                         "--llm-temperature", "0.7", "--env-arg", "max_ticks=300", "--out", str(tmp_path)])
    assert status == 0, llama.log_tail()
    document = json.loads((tmp_path / "ladder.json").read_text())
    assert document["entrants"]["smollm2+scripted"] == [f"llm:smollm2@{llama.base_url}", "scripted"]
    assert document["llm"]["requests"] == 1 and document["llm"]["failed_requests"] == 0, llama.log_tail()
    assert sum(document["matrix"]["scripted"]["smollm2+scripted"]) == 1
    assert {row["entrant"] for row in document["ratings"]} == {"scripted", "smollm2+scripted"}
