"""The real-model table of the docs: SmolLM2-135M behind llama.cpp's server, through ``arena-agent``.

    python docs/real_model_eval.py --episodes 8 --out runs/real-model

Starts llama.cpp's server on 127.0.0.1 (arena_envs.llm.llama_server), runs the ``arena-agent``
console script once per scenario and call format, then prints one Markdown row per run from its
``results.json``: success and mean return with a 95% interval, turns, the share of turns by parse
status, errors, seconds per episode and completion tokens per second.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

from arena_envs.llm.llama_server import LlamaServer

FORMATS = {  # how each call format reaches the model (see arena_envs.llm.llama_server)
    "openai": ["--model", "smollm2-tools", "--format", "openai", "--tool-choice", "auto"],
    "hermes": ["--model", "smollm2", "--format", "hermes", "--no-tools"],
    "json": ["--model", "smollm2", "--format", "json", "--no-tools"],
}
SCENARIOS = ("TreasureHunt-v0", "Foraging-v0", "Crafting-v0", "TeamCapture-v0")


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its normal 95% interval."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, 1.96 * math.sqrt(var / n) if n else 0.0


def row(out: Path) -> str:
    results = json.loads((out / "results.json").read_text())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    success = interval([float(r["success"]) for r in records])
    ret = interval([r["reward"] for r in records])
    turns = sum(r["turns"] for r in records) or 1
    statuses: dict[str, int] = {}
    for r in records:
        for status, count in r.get("parse_statuses", {}).items():
            statuses[status] = statuses.get(status, 0) + count
    shares = ", ".join(f"{k} {100 * v / turns:.0f}%" for k, v in sorted(statuses.items(), key=lambda kv: -kv[1]))
    speed = results.get("tokens_per_second")
    return (f"| {results['env_id'].removeprefix('arena_envs/')} | {results['format']} | {len(records)} | "
            f"{100 * success[0]:.0f}% ± {100 * success[1]:.0f} | {ret[0]:.3f} ± {ret[1]:.3f} | "
            f"{results['turns']:.1f} | {shares} | {results['errors']} | "
            f"{results['wall_seconds_per_episode']:.1f} | {speed if speed is None else f'{speed:.0f}'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    parser.add_argument("--out", default="runs/real-model")
    args = parser.parse_args()
    agent = str(Path(sys.executable).with_name("arena-agent"))
    rows = []
    with LlamaServer() as server:
        for scenario in args.scenarios:
            for fmt in args.formats:
                out = Path(args.out) / f"{scenario}-{fmt}"
                subprocess.run([agent, scenario, "--base-url", server.base_url, *FORMATS[fmt], "--episodes",
                                str(args.episodes), "--concurrency", "1", "--max-turns", str(args.max_turns),
                                "--max-tokens", str(args.max_tokens), "--temperature", "0.7", "--seed", "1000",
                                "--overwrite", "--quiet", "--out", str(out)], check=False,
                               stdout=subprocess.DEVNULL)
                rows.append(row(out))
                print(rows[-1], flush=True)
    print("| scenario | format | episodes | success (95% CI) | return (95% CI) | turns | parse statuses of turns | "
          "errors | s/episode | tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
