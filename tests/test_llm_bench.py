"""The chat rows of arena-bench run end to end (speed itself is measured by arena-bench, not here)."""

from arena_envs.llm.bench import chat_rows


def test_chat_rows_measure_both_paths_and_the_share():
    rows = chat_rows(0.0, sessions=4)
    names = [name for name, _, _ in rows]
    assert names[0].startswith("Chat: 4 sessions via local OpenAI server") and "environment only" in names[1]
    served, local, share, parser = (rate for _, rate, _ in rows)
    assert served > 0 and local > 0 and share == 100.0 * served / local
    assert names[3].startswith("Parser: 1 MB adversarial reply") and parser > 0
