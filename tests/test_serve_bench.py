"""The serve load benchmark runs its three real servers and reads real answers from each
(its numbers are arena-bench's business; here only that every row is measured)."""

from __future__ import annotations

import json
import os

from arena_envs.serve import bench


def test_every_server_of_the_benchmark_answers_and_is_measured():
    results = bench.measure("foraging", sessions=(2,), seconds=0.3)
    assert set(results) == {"arena", "floor", "stock", "inline"}
    for kind, by_sessions in results.items():
        row = by_sessions[2]
        assert row["steps_per_s"] > 0, kind
        assert 0 < row["p50_us"] <= row["p99_us"], kind
        if os.path.exists(f"/proc/{os.getpid()}/stat"):  # Linux: the server's CPU time is read
            assert 0 < row["cpu_us"] < 1e6, kind


def test_the_floor_server_answers_with_a_real_observation_of_the_scenario():
    """The floor's payload must be what a real server sends, or its ceiling means nothing."""
    from fastapi.testclient import TestClient

    with TestClient(bench.floor_app("foraging", max_sessions=2)) as client, client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"type": "reset", "data": {"seed": 0}}))
        first = json.loads(ws.receive_text())["data"]
        ws.send_text(bench.CALLS[0])
        step = json.loads(ws.receive_text())["data"]
    assert {tool["function"]["name"] for tool in first["observation"]["tools"]} >= {"move_to", "collect"}
    assert step["observation"]["tools"] == []
    assert step["observation"]["observation"]["agent_id"] == "agent_1"
    assert step["observation"]["text"].startswith("tick ")


def test_the_stall_benchmark_measures_a_bystander_alone_and_beside_attackers():
    """``arena-bench --only serve_stall`` as docs/guide/serving-limits.md shows it (shorter)."""
    import subprocess
    import sys
    from pathlib import Path

    guide = (Path(__file__).parent.parent / "docs" / "guide" / "serving-limits.md").read_text()
    command = next(block.split("\n```", 1)[0].split() for block in guide.split("```console\n")[1:]
                   if block.startswith("arena-bench"))
    assert command[:3] == ["arena-bench", "--only", "serve_stall"]
    script = str(Path(sys.executable).parent / "arena-bench")
    run = subprocess.run([script, *command[1:3], "--seconds", "0.3"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    slowloris = "beside 200 slowloris sockets from another address"
    for label in ("alone", "beside 4 stall attackers", slowloris):
        for quantile in ("p50", "p99"):
            assert f"Serve foraging bystander {label} {quantile}" in run.stdout
    assert "beside 4 stall attackers p99 / Serve foraging bystander alone p99" in run.stdout
    assert f"{slowloris} p99 / Serve foraging bystander alone p99" in run.stdout
    refused = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in run.stdout.splitlines()
               if "new sessions refused" in line}
    # under either attack, every new session of the bystander's (on its own address) was let in
    assert refused == {f"Serve foraging bystander {label}: new sessions refused": "0"
                       for label in ("beside 4 stall attackers", slowloris)}, run.stdout
