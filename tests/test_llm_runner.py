"""arena-agent as a runner one can leave running: records appended as episodes end, SIGINT/SIGTERM
keep them, --resume completes a run to the same totals, errors classified and retried only when a
retry can cure them, bad input (no server, wrong model, context overflow, a hung server) loses
nothing. Real HTTP servers on 127.0.0.1: the project's scripted server, and a small aiohttp app
that answers exactly what llama-cpp-python's server answers."""

import asyncio
import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from llm_helpers import validate_transcript
from process_helpers import free_port

from arena_envs.llm.agents import OpenAIChatAgent, classify_error, describe_error
from arena_envs.llm.cli import main
from arena_envs.llm.runner import (
    TIMING_FIELDS,
    EpisodeRecord,
    RunDirectory,
    one_at_a_time_warning,
    server_parallelism,
    summary,
)
from arena_envs.llm.server import ScriptedModelServer

HUNT = "arena_envs/TreasureHunt-v0"
ARENA_AGENT = str(Path(sys.executable).with_name("arena-agent"))
SUMMARY_TIMING = ("latency_median", "latency_p95", "tokens_per_second", "wall_seconds_per_episode", "complete")


def read_jsonl(path: Path) -> list[dict]:
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "a partial last line"
    return [json.loads(line) for line in text.splitlines()]


def read_run(out: Path) -> tuple[list[dict], list[dict], dict]:
    return read_jsonl(out / "transcripts.jsonl"), read_jsonl(out / "results.jsonl"), \
        json.loads((out / "results.json").read_text())


def untimed(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in TIMING_FIELDS}



@contextmanager
def serve(app: web.Application):
    """``app`` on 127.0.0.1 from a background thread; yields its base URL (``.../v1``)."""
    started, state = threading.Event(), {}

    def run() -> None:
        loop = state["loop"] = asyncio.new_event_loop()
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        state["port"] = site._server.sockets[0].getsockname()[1]
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield f"http://127.0.0.1:{state['port']}/v1"
    finally:
        state["loop"].call_soon_threadsafe(state["loop"].stop)
        thread.join(30)


# -- what llama-cpp-python's server answers (llama_cpp/server/errors.py and app.py) -------------

def llama_error(status: int, message: str, kind: str, code: str | None = None, param: str | None = None):
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}},
                             status=status)


CONTEXT_EXCEEDED = ("This model's maximum context length is 2048 tokens. However, you requested 2113 tokens "
                    "(1857 in the messages, 256 in the completion). Please reduce the length of the messages "
                    "or completion.")
# What llama-cpp-python 0.3.36's server answers (HTTP 500) to an assistant message with "content": null:
# FastAPI's validation errors, one per member of the message union, the cause in the middle.
_UNION = [("SystemMessage", "system"), ("UserMessage", "user"), (None, None), ("ToolMessage", "tool"),
          ("ToolMessage", None), ("FunctionMessage", "function"), ("FunctionMessage", None)]
_INPUT = ("{'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'c1', 'type': 'function', "
          "'function': {'name': 'look', 'arguments': '{}'}}]}")
VALIDATION_CAUSE = ("{'type': 'string_type', 'loc': ('body', 'messages', 2, 'ChatCompletionRequestAssistantMessage', "
                    "'content'), 'msg': 'Input should be a valid string', 'input': None}")
VALIDATION = "7 validation errors:\n" + "".join(
    f"  {VALIDATION_CAUSE}\n" if kind is None else
    f"  {{'type': 'literal_error', 'loc': ('body', 'messages', 2, 'ChatCompletionRequest{kind}', 'role'), "
    f"'msg': \"Input should be '{role}'\", 'input': 'assistant', 'ctx': {{'expected': \"'{role}'\"}}}}\n" if role else
    f"  {{'type': 'missing', 'loc': ('body', 'messages', 2, 'ChatCompletionRequest{kind}', "
    f"'{'tool_call_id' if kind == 'ToolMessage' else 'name'}'), 'msg': 'Field required', 'input': {_INPUT}}}\n"
    for kind, role in _UNION) + ('\n  File "/usr/lib/python3/site-packages/llama_cpp/server/app.py", line 376, '
                                 'in create_chat_completion\n    POST /v1/chat/completions')


def llama_like_app(behaviour: dict[str, str], seen: dict[str, int]) -> web.Application:
    """A chat server answering as llama-cpp-python's does, per episode (``X-Arena-Episode``):
    ``context`` overflows on the third request, ``validation`` fails validation, ``busy-once``
    answers 503 once, ``hang`` never answers; otherwise a plain-text reply (no tool call)."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": "smollm2", "object": "model", "owned_by": "me", "permissions": []}]})

    async def complete(request: web.Request) -> web.Response:
        body = await request.json()
        episode = request.headers.get("X-Arena-Episode", "")
        seen[episode] = seen.get(episode, 0) + 1
        kind = behaviour.get(episode)
        if kind == "context" and len(body["messages"]) > 4:
            return llama_error(400, CONTEXT_EXCEEDED, "invalid_request_error", "context_length_exceeded", "messages")
        if kind == "validation":
            return llama_error(500, VALIDATION, "internal_server_error")
        if kind == "busy-once" and seen[episode] == 1:
            return llama_error(503, "Service Unavailable", "server_error")
        if kind == "hang":
            await asyncio.sleep(30)
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "I look around the room."},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100 * len(body["messages"]), "completion_tokens": 7, "total_tokens": 0}})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", complete)
    return app


@pytest.fixture(scope="module")
def server():
    with ScriptedModelServer(delay=0.02) as running:
        yield running


# -- interrupted runs keep what finished; --resume completes them ----------------------------------

@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_keeps_every_finished_episode_and_resume_completes_to_the_unbroken_totals(
        server, tmp_path, signum, status):
    args = [HUNT, "--base-url", server.base_url, "--model", "scripted-hermes", "--episodes", "24",
            "--group-size", "2", "--concurrency", "2", "--env-arg", "difficulty=easy", "--temperature", "0.7",
            "--quiet"]
    out = tmp_path / "interrupted"
    process = subprocess.Popen([ARENA_AGENT, *args, "--out", str(out)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    seen_during_run: list[dict] = []
    deadline = time.monotonic() + 120
    while len(seen_during_run) < 4 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        results = out / "results.jsonl"
        if results.exists():  # appended and flushed as each episode ends: whole lines only
            seen_during_run = [json.loads(line) for line in results.read_text().splitlines(keepends=True)
                               if line.endswith("\n")]
    assert process.poll() is None, "the run ended before it could be interrupted"
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == status, stderr
    assert f"stopped by {signum.name}" in stderr and "--resume" in stderr

    transcripts, results, totals = read_run(out)
    finished = {(r["seed"], r["index"]) for r in results}
    assert 4 <= len(finished) < 24 and len(results) == len(finished)
    assert {(r["seed"], r["index"]) for r in seen_during_run} <= finished  # nothing written was lost
    assert [untimed(r) for r in results] == [untimed({k: v for k, v in t.items() if k not in ("messages", "tools")})
                                             for t in transcripts]
    assert totals["episodes"] == len(finished) and totals["complete"] is False
    assert "episodes" in stdout and (out / "results.txt").read_text().startswith("episodes")
    for record in transcripts:
        assert record["error"] is None and record["success"]
        validate_transcript(record["messages"])
    incomplete = {r["group"] for r in results if sum(o["group"] == r["group"] for o in results) < 2}
    assert all(r["advantage"] is None for r in results if r["group"] in incomplete)

    assert main([*args, "--out", str(out), "--resume"]) == 0
    resumed, resumed_results, resumed_totals = read_run(out)
    assert main([*args, "--out", str(tmp_path / "unbroken")]) == 0
    unbroken, _, unbroken_totals = read_run(tmp_path / "unbroken")
    assert len(resumed) == len(unbroken) == 24
    assert [untimed(r) for r in resumed] == [untimed(r) for r in unbroken]
    assert {k: v for k, v in resumed_totals.items() if k not in SUMMARY_TIMING} == \
        {k: v for k, v in unbroken_totals.items() if k not in SUMMARY_TIMING}
    assert resumed_totals["complete"] and resumed_totals["episodes"] == 24
    # the episodes kept from before the signal are those the resumed run reports, not played again
    assert [untimed(r) for r in resumed_results if (r["seed"], r["index"]) in finished] == [untimed(r) for r in results]


def test_ctrl_c_while_starting_is_one_line_and_exit_130(tmp_path):
    with socket.socket() as silent:  # accepts connections, never answers: the start waits on it
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        process = subprocess.Popen([ARENA_AGENT, HUNT, "--base-url", url, "--model", "m", "--concurrency", "2",
                                    "--quiet", "--out", str(tmp_path)], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (tmp_path / "run.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the output directory is made before the server is asked about its slots
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert stderr.strip() == "arena-agent: interrupted before the first episode started"


def test_resume_refuses_other_settings_and_a_run_is_never_silently_replaced(tmp_path, capsys):
    args = [HUNT, "--agent", "scripted", "--episodes", "2", "--quiet", "--out", str(tmp_path)]
    assert main(args) == 0
    assert main(args) == 2
    assert "already holds a run; --resume completes it, --overwrite replaces it" in capsys.readouterr().err
    assert main([*args, "--resume", "--format", "mistral"]) == 2
    assert "other settings (format)" in capsys.readouterr().err
    assert main([*args, "--resume", "--episodes", "4"]) == 0  # more episodes of the same run
    assert sorted(r["seed"] for r in read_jsonl(tmp_path / "results.jsonl")) == [0, 1, 2, 3]
    assert main([*args, "--overwrite"]) == 0
    assert len(read_jsonl(tmp_path / "results.jsonl")) == 2


def test_resume_plays_again_what_a_retry_may_cure_and_drops_a_torn_line(tmp_path):
    config = {"env_id": HUNT}
    kept = EpisodeRecord("TreasureHunt", 0, 0, 0, success=True)
    cured = EpisodeRecord("TreasureHunt", 1, 1, 0, error="APIConnectionError: refused", error_class="connection")
    final = EpisodeRecord("TreasureHunt", 2, 2, 0, error="no room", error_class="context_exceeded")
    # a Team Capture match: one record per chat agent, one of them ended by the connection
    match = [EpisodeRecord("TeamCapture", 4, 4, 0, agent="blue_agent_1"),
             EpisodeRecord("TeamCapture", 4, 4, 0, agent="red_agent_1", error="reset", error_class="connection")]
    run = RunDirectory(tmp_path, config)
    for record in (kept, cured, final, *match):
        run.append(record)
    with (tmp_path / "transcripts.jsonl").open("a") as file:
        file.write('{"scenario": "TreasureHunt", "seed": 3, "gro')  # a process killed mid-line
    resumed = RunDirectory(tmp_path, config, resume=True)
    assert resumed.finished == {(0, 0), (2, 0)}
    assert [r["seed"] for r in read_jsonl(tmp_path / "transcripts.jsonl")] == [0, 2]
    assert [r["seed"] for r in read_jsonl(tmp_path / "results.jsonl")] == [0, 2]
    (tmp_path / "run.json").unlink()
    with pytest.raises(ValueError, match="no run.json: not a run that can be resumed"):
        RunDirectory(tmp_path, config, resume=True)
    assert RunDirectory(tmp_path / "new", config, resume=True).finished == set()  # nothing to resume: a new run


# -- bad input: a clear error, nothing lost, the exit status says so --------------------------------

def test_no_server_listening_fails_every_episode_with_one_clear_line_and_exit_1(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    status = main([HUNT, "--base-url", url, "--model", "smollm2", "--episodes", "3", "--max-retries", "1",
                   "--quiet", "--out", str(tmp_path)])
    assert status == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("arena-agent:")]
    assert len(lines) == 1 and "every episode failed (3 of 3)" in lines[0]
    assert "(connection)" in lines[0] and url in lines[0] and "is the server running?" in lines[0]
    _, results, totals = read_run(tmp_path)
    assert [(r["error_class"], r["retries"], len(r["latencies"])) for r in results] == [("connection", 1, 2)] * 3
    assert totals["error_classes"] == {"connection": 3}


def test_a_wrong_model_name_is_refused_before_the_run_or_not_found_without_retries(server, tmp_path, capsys):
    # a server that lists its models: refused at once, one line, nothing written
    status = main([HUNT, "--base-url", server.base_url, "--model", "gpt-17", "--episodes", "2", "--quiet",
                   "--out", str(tmp_path / "listed")])
    assert status == 2 and not (tmp_path / "listed").exists()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "does not serve 'gpt-17'" in line and "scripted-hermes" in line

    # a server that lists none answers 404 per request: classified, never retried
    async def not_found(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "The model `gpt-17` does not exist", "code": "model_not_found",
                                            "type": "invalid_request_error"}}, status=404)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", not_found)
    with serve(app) as url:
        status = main([HUNT, "--base-url", url, "--model", "gpt-17", "--episodes", "2", "--quiet",
                       "--out", str(tmp_path / "unlisted")])
    assert status == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "(not_found)" in line and "404" in line and "'gpt-17' a model the server serves" in line
    _, results, _ = read_run(tmp_path / "unlisted")
    assert all(r["error_class"] == "not_found" and r["retries"] == 0 for r in results)


def test_llama_cpp_errors_are_classified_and_the_run_goes_on(tmp_path, capsys):
    behaviour = {"0/0": "context", "1/0": "validation", "2/0": "busy-once", "3/0": "hang"}
    seen: dict[str, int] = {}
    with serve(llama_like_app(behaviour, seen)) as url:
        status = main([HUNT, "--base-url", url, "--model", "smollm2", "--episodes", "6", "--max-turns", "4",
                       "--timeout", "1.5", "--max-retries", "3", "--concurrency", "6", "--max-tokens", "256",
                       "--quiet", "--out", str(tmp_path)])
    assert status == 0  # some episodes played on
    transcripts, results, totals = read_run(tmp_path)
    by_seed = {r["seed"]: r for r in results}
    context = by_seed[0]
    assert context["error_class"] == "context_exceeded" and context["retries"] == 0 and context["turns"] == 2
    assert "maximum context length is 2048 tokens" in context["error"]
    validation = by_seed[1]
    assert validation["error_class"] == "bad_request" and validation["retries"] == 0 and seen["1/0"] == 1
    assert len(VALIDATION) > 1500 and VALIDATION_CAUSE in validation["error"]  # the cause, not cut at 500
    busy = by_seed[2]
    assert busy["error"] is None and busy["retries"] == 1 and busy["turns"] == 4
    assert busy["finish_reasons"] == [None, "stop", "stop", "stop", "stop"] and len(busy["latencies"]) == 5
    hung = by_seed[3]
    assert hung["error_class"] == "timeout" and seen["3/0"] == 1 and "1.5 s" in hung["error"]
    for seed in (4, 5):
        record = by_seed[seed]
        assert record["error"] is None and record["turns"] == 4 and record["formats"] == {"none": 4}
        assert record["model"] == "smollm2" and record["sampling"] == {"max_tokens": 256}
        assert record["usage"]["completion_tokens"] == 28 and record["usage"]["prompt_tokens"] > 0
        assert record["tokens_per_second"] > 0 and record["wall_seconds"] > 0
    assert totals["error_classes"] == {"context_exceeded": 1, "bad_request": 1, "timeout": 1}
    assert totals["finish_reasons"]["stop"] > 0 and totals["requests"] == sum(len(r["latencies"]) for r in results)
    for record in transcripts:
        validate_transcript(record["messages"])
    # llama-cpp-python's server is known to answer one request at a time: said before the run
    assert "one request at a time (the server is known to have a single slot)" in capsys.readouterr().err


# -- concurrency ------------------------------------------------------------------------------------

def test_a_request_timeout_starts_when_it_is_sent_not_while_it_waits_its_turn():
    async def ask_three(url: str) -> list:
        agent = OpenAIChatAgent(url, "scripted-hermes", timeout=1.0, max_in_flight=1)
        messages = [{"role": "system", "content": "# Treasure Hunt"}, {"role": "user", "content": "hi"}]
        replies = await asyncio.gather(*(agent.reply(messages, []) for _ in range(3)))
        await agent.close()
        return replies

    with ScriptedModelServer(delay=0.6) as slow:  # 3 x 0.6 s in turn: the third is sent after 1.2 s
        replies = asyncio.run(ask_three(slow.base_url))
    assert all(r.error_class != "timeout" for r in replies), [r.error for r in replies]


@pytest.mark.parametrize("slots", [1, None])
def test_a_server_answering_one_request_at_a_time_is_detected_and_advice_printed(tmp_path, capsys, slots):
    with ScriptedModelServer(slots=slots, delay=0.6) as slow:
        assert main([HUNT, "--base-url", slow.base_url, "--model", "scripted-hermes", "--episodes", "3",
                     "--concurrency", "3", "--max-turns", "2", "--quiet", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    warned = "answers one request at a time (measured: the first 3 requests came back one by one" in err
    assert warned == (slots == 1), err
    if warned:
        assert "Use --concurrency 1, or start the server with more parallel slots" in err


def test_a_long_error_text_keeps_its_head_and_its_end():
    import openai

    cause = "messages.40.content: Input should be a valid string"
    error = openai.InternalServerError("failed", response=httpx.Response(500, request=httpx.Request("POST", "http://x")),
                                       body={"message": "validation errors:" + "x" * 9000 + cause})
    text = describe_error(error)
    assert text.startswith("InternalServerError (HTTP 500): validation errors:") and text.endswith(cause)
    assert "[...]" in text and len(text) < 4100
    assert classify_error(error) == "bad_request"


def test_server_parallelism_reads_the_first_burst():
    one_at_a_time = [(0.0, 0.5), (0.0, 1.0), (0.01, 1.5), (0.01, 2.0), (1.0, 2.5)]
    together = [(0.0, 0.5), (0.0, 0.52), (0.01, 0.51), (0.01, 0.53), (0.6, 1.1)]
    two_slots = [(0.0, 0.5), (0.0, 0.5), (0.0, 1.0), (0.0, 1.0)]
    assert server_parallelism(one_at_a_time) == pytest.approx(1.0, abs=0.05)
    assert server_parallelism(together) > 10 and server_parallelism(two_slots) > 1.5
    assert server_parallelism(one_at_a_time[:2]) is None  # no burst of 3
    assert server_parallelism([(0, 0.05), (0, 0.1), (0, 0.15)]) is None  # too fast to judge
    assert one_at_a_time_warning(1, 1.0, 1) is None  # --concurrency 1 is the advice itself


# -- GRPO groups ------------------------------------------------------------------------------------

def test_groups_without_reward_spread_are_counted_and_warned_about(tmp_path, capsys):
    assert main([HUNT, "--agent", "scripted", "--episodes", "6", "--group-size", "3", "--quiet",
                 "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    _, _, totals = read_run(tmp_path)
    assert totals["groups"] == 2 and totals["zero_spread_groups"] == 1.0
    assert re.search(r"zero-spread groups +100.0% of 2", out)
    assert [line for line in err.splitlines() if "zero reward spread" in line] == [
        "arena-agent: warning: all 2 groups have zero reward spread: every advantage is 0, so a GRPO step on "
        "them learns nothing (more episodes per group, a higher temperature, or a reward that separates the tries)"]
    mixed = [EpisodeRecord("x", 0, 0, 0, reward=1.0), EpisodeRecord("x", 0, 0, 1, reward=0.0),
             EpisodeRecord("x", 1, 1, 0, reward=0.5), EpisodeRecord("x", 1, 1, 1, reward=0.5)]
    assert summary(mixed, 2)["zero_spread_groups"] == 0.5



# -- the guide: every command in docs/guide/llm-runner.md runs -------------------------------------

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "llm-runner.md"


def guide_commands() -> list[str]:
    commands, in_console = [], False
    for line in GUIDE.read_text().splitlines():
        if line.startswith("```"):
            in_console = line == "```console"
        elif in_console and line.startswith("$ "):
            commands.append(line[2:])
    return commands


def test_every_command_of_the_runner_guide_runs(tmp_path, monkeypatch, capsys):
    """The guide's servers start (on a free port each, in place of the guide's), its arena-agent
    commands run through main() in a fresh directory and exit 0, in the guide's order."""
    monkeypatch.chdir(tmp_path)
    commands = guide_commands()
    assert len(commands) == 7 and sum(c.startswith("arena-agent ") for c in commands) == 5
    servers, urls = [], {}
    try:
        for command in commands:
            words = shlex.split(command)
            if words[:3] == ["python", "-m", "arena_envs.llm.server"]:
                port = words[words.index("--port") + 1]
                words[words.index("--port") + 1] = "0"
                server = subprocess.Popen([sys.executable, *words[1:]], stdout=subprocess.PIPE, text=True)
                servers.append(server)
                urls[f"http://127.0.0.1:{port}/v1"] = server.stdout.readline().split()[-1]
                continue
            assert words[0] == "arena-agent", command
            args = [urls.get(word, word) for word in words[1:]]
            assert main([*args, "--quiet"]) == 0, command
            out = Path(args[args.index("--out") + 1])
            assert out.is_relative_to(tmp_path) or not out.is_absolute()
            _, results, totals = read_run(out)
            assert totals["complete"] and totals["errors"] == 0 and len(results) == totals["episodes"]
    finally:
        for server in servers:
            server.terminate()
            server.wait(30)
    err = capsys.readouterr().err
    assert "resuming runs/hunt: 8 episode records kept, 0 episodes to play" in err
    assert "all 2 groups have zero reward spread" in err
    assert err.count("answers one request at a time") == 1  # warned at --concurrency 3, not at 1
