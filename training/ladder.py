"""``arena-eval --ladder``: one rating ladder for every kind of Team Capture team.

    arena-eval --ladder random scripted pretrained pretrained+scripted --games 200 --out runs/ladder
    arena-eval --ladder scripted pretrained llm:smollm2-tools@http://127.0.0.1:8000/v1 \\
        llm:smollm2-tools@http://127.0.0.1:8000/v1+scripted --games 200 --llm-games 4 --llm-tool-choice auto

An entrant is a team: one agent name for every seat, or one per seat joined by ``+`` (seat 1
first: ``pretrained+scripted`` is agent 1 played by the shipped policy and agent 2 by the
scripted team's second agent), optionally labelled ``LABEL=TEAM`` for the tables
(``smollm2=llm:smollm2-tools@http://127.0.0.1:8000/v1``). A seat is named as agents are everywhere
else (``training.common.agent_factory``, :mod:`arena_envs.pretrained`):

- ``random``, ``scripted``;
- ``pretrained``, ``pretrained:team_capture``, an exported ``.npz`` (numpy, no torch);
- a run directory of ``arena-train`` (its final ``model.zip``), a model ``.zip``, or a league
  snapshot ``<run>/league/snapshot_<steps>.pt`` (these three need torch: the 'train' extra; their
  weights are read, never their pickled objects: ``--trust-pickle`` lets SB3's ``PPO.load`` read a
  model the weights do not rebuild, see ``training/weights.py``);
- ``llm:<model>@<base-url>``: a model behind an OpenAI-compatible endpoint, played through the
  chat path of ``arena-agent`` (:class:`~arena_envs.llm.team.TeamChat`; needs the 'llm' extra).

Every pair of entrants plays ``--games`` games (``--llm-games`` when a seat is an LLM) on held-out
seeds ``--seed``, ``--seed + 1``...: the first half with the first entrant as blue, the second
half on the same seeds with the sides swapped. Games between policies run batched on the native
vector env (one ``training.common.play`` per side); a game with an LLM seat is one chat match,
``--concurrency`` of them at once. An LLM seat answers at most ``--llm-turns`` replies a game,
each followed by up to ``--llm-wait-ticks`` ticks while it walks; then it carries on with its
last action until the game ends (a game lasts up to 1200 ticks, and SmolLM2-135M on 2 CPU cores
takes 10-60 s a reply: reply by reply, one game would take hours).

Ratings are openskill's Plackett-Luce (mu, sigma; the ordinal mu - 3 sigma ranks them), updated
game by game in a fixed order (the first game of every pair, then the second...), so a run is
reproducible. Written to ``--out`` (default ``runs/ladder``):

    ladder.json   entrants, ratings, the win/draw/loss matrix, win rates against the scripted
                  team as blue with 95% Wilson intervals, the settings and the machine's load
    ladder.md     the same as tables
    ladder.png    the ratings (mu with +-3 sigma) and the win-rate matrix
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from openskill.models import PlackettLuce

from arena_envs import pretrained
from arena_envs.cli import UsageError, checked_env_arguments, env_argument
from arena_envs.llm.formats import FORMATS
from arena_envs.sharded import make_native_env as make_native
from arena_envs.team_capture_params import agent_names
from arena_envs.training.common import (
    ModelAgent,
    agent_factory,
    holding,
    load_config,
    play,
    run_config,
    run_encoding,
)
from arena_envs.training.render_results import ladder_plot, ladder_tables

SCENARIO = "team_capture"
HELD_OUT = 10_000  # the first seed: training worlds never reach it
LLM = "llm:"
Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


# -- entrants ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmSeat:
    """``llm:<model>@<base-url>``: the model's name and its OpenAI-compatible endpoint."""

    model: str
    base_url: str

    @classmethod
    def parse(cls, seat: str) -> LlmSeat:
        model, at, base_url = seat.removeprefix(LLM).partition("@")
        if not (model and at and base_url.startswith(("http://", "https://"))):
            raise UsageError(f"an LLM seat is llm:<model>@<base-url> (llm:smollm2-tools@http://127.0.0.1:8000/v1), "
                             f"got {seat!r}")
        return cls(model, base_url)


@dataclass(frozen=True)
class Entrant:
    """A team: its name as given and the agent name of each seat (seat i plays ``<team>_agent_<i+1>``)."""

    name: str
    seats: tuple[str, ...]
    trust_pickle: bool = False  # its model files may be unpickled (--trust-pickle)

    @classmethod
    def parse(cls, text: str, agents_per_team: int, trust_pickle: bool = False) -> Entrant:
        label, named, spec = text.partition("=")
        if not named or not label or any(c in label for c in ":/@"):  # no LABEL= before the team
            label, spec = text, text
        seats = tuple(seat.strip() for seat in spec.split("+"))
        if len(seats) == 1:
            seats *= agents_per_team
        if len(seats) != agents_per_team:
            raise UsageError(f"{spec!r} names {len(seats)} seats; a team has {agents_per_team} (one name for all, "
                             f"or one per seat joined by '+')")
        for seat in seats:
            check_seat(seat, trust_pickle)
        return cls(label, seats, trust_pickle)

    @property
    def chats(self) -> bool:
        return any(seat.startswith(LLM) for seat in self.seats)


def check_seat(seat: str, trust_pickle: bool = False) -> None:
    """A seat's name names something playable, or a one-line :class:`UsageError` says what does;
    a model is read here, so that one that cannot be is refused before any game."""
    if seat in ("random", "scripted"):
        return
    if seat.startswith(LLM):
        LlmSeat.parse(seat)
    elif pretrained.is_pretrained(seat):
        pretrained.load(seat, SCENARIO)
    elif not Path(seat).exists():
        raise UsageError(f"seat {seat!r} is none of random, scripted, pretrained[:team_capture], an .npz, a run "
                         f"directory, a model .zip, a league snapshot .pt, llm:<model>@<base-url>")
    elif not seat.endswith(".pt"):
        from arena_envs.training.weights import load_policy

        model = model_file(seat)
        load_policy(model, run_config(model), trust_pickle)


def model_file(seat: str) -> Path:
    """The model zip a seat names: a run directory's final ``model.zip``, or the zip itself."""
    path = Path(seat)
    if path.is_dir():
        path = path / "model.zip"
        if not path.exists():
            raise UsageError(f"{seat} is a directory without model.zip: name a run directory of arena-train")
    return path


def seat_factory(seat: str, seed: int, trust_pickle: bool = False) -> Callable[[Any], Any]:
    """``agent_factory``'s agent for a policy seat (a run directory: its final model; a ``.pt``: a
    league snapshot), actions sampled as the policies are trained and scored (``docs/results.md``)."""
    if seat.endswith(".pt"):
        return lambda envs: snapshot_agent(seat, envs, deterministic=False)
    return agent_factory(str(model_file(seat)), SCENARIO, seed, deterministic=False, trust_pickle=trust_pickle)


def snapshot_agent(path: str | Path, envs: Any, deterministic: bool = False) -> ModelAgent:
    """A league's frozen snapshot (``<run>/league/snapshot_<steps>.pt``: the lean PPO's ``Agent``
    state_dict, see training/league.py), rebuilt with its run's encoding and network."""
    from arena_envs.training.ppo import Agent
    from arena_envs.training.weights import torch_weights

    config = run_config(path)
    encoding = run_encoding(envs, config)
    state = torch_weights(path)
    # the hidden sizes are the weights' (read within a size cap), not the config's: a config
    # naming huge layers must not allocate them
    hidden = [value.shape[0] for key, value in state.items()
              if re.fullmatch(r"policy_net\.\d+\.weight", key) and getattr(value, "ndim", 0) == 2]
    activation = (config.get("policy_kwargs") or {}).get("activation", "tanh")
    try:
        net = Agent(int(np.prod(encoding.observation_space.shape)), list(encoding.action_space.nvec), hidden,
                    activation)
        net.load_state_dict(state)
    except (RuntimeError, KeyError, IndexError, TypeError, AttributeError) as error:  # another net's state dict
        raise UsageError(f"{path} is not a league snapshot of its run's network: {str(error)[:200]}") from None
    return ModelAgent(net, encoding, deterministic, **holding(config))


def parts(entrant: Entrant) -> dict[str, list[int]]:
    """The entrant's distinct seat names and the seats each plays."""
    found: dict[str, list[int]] = {}
    for i, seat in enumerate(entrant.seats):
        found.setdefault(seat, []).append(i)
    return found


class TeamAgent:
    """An entrant's policy seats acting on one team's batch, arrays (B, agents_per_team, ...): each
    distinct agent acts for the whole team (so the scripted team keeps its roles), and its seats'
    actions are taken."""

    def __init__(self, entrant: Entrant, envs: Any, seed: int):
        self.agents = [(seat_factory(seat, seed, entrant.trust_pickle)(envs), seats)
                       for seat, seats in parts(entrant).items()]

    def act(self, obs: dict[str, np.ndarray]) -> dict[str, Any]:
        (first, _), *others = self.agents
        actions = first.act(obs)
        for agent, seats in others:
            put_seats(actions, agent.act(obs), seats)
        return actions


def put_seats(into: Any, source: Any, seats: list[int]) -> None:
    """``into[:, seats] = source[:, seats]`` over a tree of (B, agents, ...) arrays."""
    if isinstance(into, dict):
        for key in into:
            put_seats(into[key], source[key], seats)
    else:
        into[:, seats] = np.asarray(source)[:, seats]


# -- games -----------------------------------------------------------------------------------------


def sides(games: int) -> tuple[int, int]:
    """How many of a pair's games the first entrant plays as blue, and as red."""
    return (games + 1) // 2, games // 2


def policy_games(a: Entrant, b: Entrant, games: int, seed: int, env_kwargs: dict[str, Any]) -> np.ndarray:
    """``a`` against ``b``, no chat seat: ``games`` outcomes from ``a``'s side (1 win, 0 draw, -1 loss),
    the first half with ``a`` as blue, then the sides swapped on the same seeds; each half one batch."""
    outcomes = []
    for (blue, red), n, sign in zip(((a, b), (b, a)), sides(games), (1, -1), strict=True):
        if n:
            result = play(lambda envs, e=blue: TeamAgent(e, envs, seed), SCENARIO, n, seed, env_kwargs,
                          lambda envs, e=red: TeamAgent(e, envs, seed + 1))
            outcomes.append(sign * blue_outcome(result["success"], result["draw"]))
    return np.concatenate(outcomes).astype(int)


def blue_outcome(won: np.ndarray, draw: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(won) > 0, 1, np.where(np.asarray(draw) > 0, 0, -1))


@dataclass
class ChatSettings:
    """How the LLM seats play (``--llm-*`` flags)."""

    turns: int = 4
    wait_ticks: int = 20
    call_format: str = "openai"
    tool_choice: str | None = None
    max_tokens: int | None = 64
    temperature: float | None = None
    no_tools: bool = False
    timeout: float = 300.0
    concurrency: int = 1


class ChatGames:
    """Games with LLM seats, each a :class:`~arena_envs.llm.team.TeamChat` match in one event loop;
    one :class:`~arena_envs.llm.agents.OpenAIChatAgent` per distinct LLM seat, shared by its games."""

    def __init__(self, settings: ChatSettings, env_kwargs: dict[str, Any]):
        self.settings, self.env_kwargs = settings, env_kwargs
        self.clients: dict[str, Any] = {}
        self.limit: asyncio.Semaphore | None = None
        self.requests = 0  # replies asked for
        self.failed = 0  # of them, failed (the server down, a timeout): the seat carried on
        self.ticks: list[int] = []  # each game's length

    async def connect(self, seat: str) -> None:
        """The seat's client, once its server is seen to serve its model."""
        if seat not in self.clients:
            from arena_envs.llm.cli import served_agent

            s, llm = self.settings, LlmSeat.parse(seat)
            sampling = {k: v for k, v in (("temperature", s.temperature), ("max_tokens", s.max_tokens),
                                          ("tool_choice", s.tool_choice)) if v is not None}
            agent = await served_agent(llm.base_url, llm.model, timeout=s.timeout, max_in_flight=s.concurrency * 2,
                                       send_tools=not s.no_tools, **sampling)
            self.clients[seat] = agent

    async def game(self, blue: Entrant, red: Entrant, seed: int) -> int:
        """One match on world ``seed``: 1 blue wins, 0 draw, -1 red wins."""
        from arena_envs.llm.team import TeamChat, team_controller

        s = self.settings
        names = agent_names(len(blue.seats))
        chat: dict[str, Any] = {}
        controllers = []
        envs = make_native(SCENARIO, 1, **self.env_kwargs)  # the spaces and params the policy seats are built on
        for team, entrant, agent_seed in (("blue", blue, seed), ("red", red, seed + 1)):
            members = [n for n in names if n.startswith(team + "_")]
            for seat, seats in parts(entrant).items():
                if seat.startswith(LLM):
                    chat.update({members[i]: self.clients[seat] for i in seats})
                else:
                    agent = seat_factory(seat, agent_seed, entrant.trust_pickle)(envs)
                    controllers.append(team_controller(team, agent.act, [members[i] for i in seats]))
        envs.close()
        options = {"max_turns": s.turns, "wait_ticks": s.wait_ticks, "call_format": s.call_format,
                   "tools_in_prompt": s.no_tools}
        async with self.limit:
            match = TeamChat(list(chat), controllers, **options, **self.env_kwargs)
            try:
                await self.play(match, chat, seed)
            finally:
                match.close()
        info = match.world.info
        return int(np.sign(float(info["blue_score"]) - float(info["red_score"])))

    async def play(self, match: Any, chat: dict[str, Any], seed: int) -> None:
        """The chat seats' replies until each has spent its turns or the game ended; then the world
        plays on, every chat seat carrying on with its last action, to the game's end. A reply
        that fails (the server down, a timeout) leaves its seat carrying on: the game still counts."""
        openings = await match.areset(seed)
        shown = {name: messages for name, (messages, _tools) in openings.items()}
        while not match.done:
            live = [n for n in chat if not match.sessions[n].done]
            for name in live:
                shown[name] += match.sessions[name].messages_from(len(shown[name]))
            replies = await asyncio.gather(*(chat[n].reply(list(shown[n]), match.sessions[n].tools,
                                                           episode=f"{seed}/{n}") for n in live))
            self.requests += len(live)
            self.failed += sum(r.message is None for r in replies)
            answered = {n: r.message for n, r in zip(live, replies, strict=True) if r.message is not None}
            if not answered:
                break
            await match.astep(answered)
        first, ticks = next(iter(chat)), max(session.ticks for session in match.sessions.values())
        while match.world.env.agents:  # the world's end, the chat seats carrying on
            await match.world.call(first, None)
            ticks += 1
        self.ticks.append(ticks)

    async def games(self, a: Entrant, b: Entrant, games: int, seed: int) -> np.ndarray:
        """As :func:`policy_games`, through chat: outcomes from ``a``'s side, ``--concurrency`` at once."""
        blue_first, red_first = sides(games)
        jobs = [self.game(a, b, seed + i) for i in range(blue_first)]
        jobs += [self.game(b, a, seed + i) for i in range(red_first)]
        outcomes = await asyncio.gather(*jobs)
        return np.array(outcomes[:blue_first] + [-o for o in outcomes[blue_first:]], int)

    async def run(self, pairs: Sequence[tuple[Entrant, Entrant]], games: int, seed: int) -> list[np.ndarray]:
        self.limit = asyncio.Semaphore(self.settings.concurrency)
        try:
            for seat in dict.fromkeys(seat for pair in pairs for entrant in pair for seat in entrant.seats):
                if seat.startswith(LLM):
                    await self.connect(seat)
            return list(await asyncio.gather(*(self.games(a, b, games, seed) for a, b in pairs)))
        finally:
            for client in self.clients.values():
                await client.close()


# -- ratings and tables --------------------------------------------------------------------------


def ratings(entrants: Sequence[str], results: dict[tuple[int, int], np.ndarray]) -> list[dict[str, Any]]:
    """openskill's Plackett-Luce ratings after every game, rated in a fixed order (game k of every
    pair, then game k + 1), best ordinal first."""
    model = PlackettLuce()
    rating = [model.rating(name=name) for name in entrants]
    longest = max((len(o) for o in results.values()), default=0)
    for k in range(longest):
        for (i, j), outcomes in results.items():
            if k < len(outcomes):
                ranks = {1: [1, 2], 0: [1, 1], -1: [2, 1]}[int(outcomes[k])]
                [[rating[i]], [rating[j]]] = model.rate([[rating[i]], [rating[j]]], ranks=ranks)
    table = [{"entrant": name, "ordinal": r.ordinal(), "mu": r.mu, "sigma": r.sigma}
             for name, r in zip(entrants, rating, strict=True)]
    return sorted(table, key=lambda row: -row["ordinal"])


def wilson(wins: int, games: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a win rate (sound at 0 and 1 wins and for few games)."""
    if games == 0:
        return 0.0, 1.0
    p, z2 = wins / games, Z95 ** 2
    centre = (p + z2 / (2 * games)) / (1 + z2 / games)
    half = Z95 * math.sqrt(p * (1 - p) / games + z2 / (4 * games ** 2)) / (1 + z2 / games)
    return max(0.0, centre - half), min(1.0, centre + half)


def matrix(entrants: Sequence[str], results: dict[tuple[int, int], np.ndarray]) -> dict[str, dict[str, list[int]]]:
    """``matrix[a][b]`` = [wins, draws, losses] of ``a`` against ``b``."""
    table = {a: {} for a in entrants}
    for (i, j), o in results.items():
        a, b = entrants[i], entrants[j]
        wins, draws, losses = int((o == 1).sum()), int((o == 0).sum()), int((o == -1).sum())
        table[a][b], table[b][a] = [wins, draws, losses], [losses, draws, wins]
    return table


def against_scripted(entrants: Sequence[str], results: dict[tuple[int, int], np.ndarray],
                     reference: str = "scripted") -> list[dict[str, Any]]:
    """Each entrant's games as blue against the ``reference`` team (red): wins, draws, games, and the
    win rate with its 95% Wilson interval."""
    if reference not in entrants:
        return []
    ref = entrants.index(reference)
    rows = []
    for (i, j), outcomes in results.items():  # outcomes from i's side; i is blue in the first games
        if ref not in (i, j):
            continue
        as_blue, _ = sides(len(outcomes))
        team, mine = (entrants[i], outcomes[:as_blue]) if j == ref else (entrants[j], -outcomes[as_blue:])
        if not len(mine):  # one game a pair: the first entrant's blue game only
            continue
        wins, draws = int((mine == 1).sum()), int((mine == 0).sum())
        low, high = wilson(wins, len(mine))
        rows.append({"team": team, "games": len(mine), "wins": wins, "draws": draws,
                     "win_rate": wins / max(len(mine), 1), "interval": [low, high]})
    return sorted(rows, key=lambda row: entrants.index(row["team"]))


# -- the command -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="arena-eval --ladder", description=__doc__.split("\n\n")[0])
    parser.add_argument("entrants", nargs="+", metavar="TEAM",
                        help="teams, [LABEL=]SEAT or [LABEL=]SEAT+SEAT (one per seat); a seat: random, scripted, "
                             "pretrained, an .npz, a run directory, a .zip, a league snapshot .pt, "
                             "llm:<model>@<base-url>")
    parser.add_argument("--games", type=int, default=200, help="games per pair (default 200), half with each side")
    parser.add_argument("--llm-games", type=int, default=None,
                        help="games per pair with an LLM seat (default: --games)")
    parser.add_argument("--seed", type=int, default=HELD_OUT, help="seed of the first world (default 10000)")
    parser.add_argument("--out", default="runs/ladder", help="where to write (default runs/ladder)")
    parser.add_argument("--env-arg", type=env_argument, action="append", default=[], metavar="KEY=VALUE",
                        help="team capture argument on top of the config's (agents_per_team=2), e.g. max_ticks=600")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="games with an LLM seat in flight at once (llama.cpp's server answers one at a time)")
    parser.add_argument("--llm-turns", type=int, default=4, help="replies an LLM seat gives per game (default 4)")
    parser.add_argument("--llm-wait-ticks", type=int, default=20,
                        help="ticks an LLM seat walks on after a reply before it is asked again (default 20)")
    parser.add_argument("--llm-format", choices=FORMATS, default="openai",
                        help="the call syntax taught to LLM seats (default openai)")
    parser.add_argument("--llm-tool-choice", default=None, help="tool_choice sent (auto: llama.cpp's smollm2-tools)")
    parser.add_argument("--llm-no-tools", action="store_true", help="tools in the prompt, not sent as tools=")
    parser.add_argument("--llm-max-tokens", type=int, default=64, help="tokens per reply (default 64)")
    parser.add_argument("--llm-temperature", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model request (default 300)")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="let Stable-Baselines3's PPO.load read a model its config and weights do not rebuild: "
                             "that unpickles the file, running any code it holds (only for files you trust)")
    return parser.parse_args(argv)


def ladder(argv: list[str] | None = None) -> dict[str, Any]:
    """Run ``arena-eval --ladder`` with these arguments (without the flag); the document written."""
    args = parse_args(argv)
    if args.games < 1 or (args.llm_games is not None and args.llm_games < 1) or args.concurrency < 1:
        raise UsageError("--games, --llm-games and --concurrency must be at least 1")
    if args.llm_turns < 1 or args.llm_wait_ticks < 0:
        raise UsageError("--llm-turns must be at least 1 and --llm-wait-ticks at least 0")
    env_kwargs = {**load_config(SCENARIO).get("env_kwargs", {}), **dict(args.env_arg)}
    checked_env_arguments(SCENARIO, env_kwargs)
    team_size = make_native(SCENARIO, 1, **env_kwargs)
    agents_per_team = team_size.unwrapped.scenario.agents_per_team
    team_size.close()
    entrants = [Entrant.parse(name, agents_per_team, args.trust_pickle) for name in args.entrants]
    names = [e.name for e in entrants]
    if len(set(names)) != len(names) or len(names) < 2:
        raise UsageError(f"a ladder needs at least two teams of different names, got {' '.join(names)}")
    llm_games = args.llm_games or args.games
    pairs = list(combinations(range(len(entrants)), 2))
    chat_pairs = [(i, j) for i, j in pairs if entrants[i].chats or entrants[j].chats]
    load_before, start = os.getloadavg(), time.perf_counter()
    results: dict[tuple[int, int], np.ndarray] = {}
    chat = ChatGames(ChatSettings(args.llm_turns, args.llm_wait_ticks, args.llm_format, args.llm_tool_choice,
                                  args.llm_max_tokens, args.llm_temperature, args.llm_no_tools, args.timeout,
                                  args.concurrency), env_kwargs)
    if chat_pairs:
        import openai  # noqa: F401  (the 'llm' extra: when it is missing, one line says so before any game)
    for i, j in pairs:
        if (i, j) not in chat_pairs:
            results[i, j] = policy_games(entrants[i], entrants[j], args.games, args.seed, env_kwargs)
    if chat_pairs:
        played = asyncio.run(chat.run([(entrants[i], entrants[j]) for i, j in chat_pairs], llm_games, args.seed))
        results.update(zip(chat_pairs, played, strict=True))
    results = {pair: results[pair] for pair in pairs}  # the fixed order the ratings are updated in
    document = {
        "scenario": SCENARIO, "env_kwargs": env_kwargs, "games": args.games, "llm_games": llm_games,
        "seeds": [args.seed, args.seed + sides(max(args.games, llm_games if chat_pairs else 0))[0] - 1],
        "entrants": {e.name: list(e.seats) for e in entrants},
        "llm_pairs": [[names[i], names[j]] for i, j in chat_pairs],
        "llm": {"turns": args.llm_turns, "wait_ticks": args.llm_wait_ticks, "format": args.llm_format,
                "tool_choice": args.llm_tool_choice, "max_tokens": args.llm_max_tokens,
                "temperature": args.llm_temperature, "requests": chat.requests,
                "failed_requests": chat.failed, "mean_ticks": float(np.mean(chat.ticks))} if chat_pairs else None,
        "ratings": ratings(names, results), "matrix": matrix(names, results),
        "against_scripted": against_scripted(names, results),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "load": {"before": [round(x, 1) for x in load_before], "after": [round(x, 1) for x in os.getloadavg()]},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = "\n".join(ladder_tables(document))
    (out / "ladder.json").write_text(json.dumps(document, indent=1))
    (out / "ladder.md").write_text(table + "\n")
    written = [out / "ladder.json", out / "ladder.md", ladder_plot(document, out / "ladder.png")]
    print(table, flush=True)
    print("wrote " + ", ".join(str(p) for p in written))
    return document
