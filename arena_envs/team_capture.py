"""Team Capture: two teams fight over five capture points and talk with ``send_message``.

Two teams of ``agents_per_team`` agents (default 2, up to 8), ``blue_agent_1..N`` and
``red_agent_1..N``, walk a square world of side ``2 * half_size`` (default ±30) with the
seven universal tools. Blue spawns around (−25, 0), red at the mirror image of blue's
spawn through the centre, so neither side is favoured.

## Capture rules

Points A (−15, −15), B (15, −15), Center (0, 0), D (−15, 15), E (15, 15) start neutral.
Each tick, after movement, every point counts the agents of each team within
``capture_radius`` (3.0) of it. A team with strictly more agents inside than the other
*dominates* the point:

* a dominating team that does not own the point gains one tick of progress (progress
  starts over when the dominating team changes); after ``capture_ticks`` (50) ticks of
  progress the point flips to it, neutral or owned by the other team alike;
* a tie, an empty zone or the owner dominating resets progress to 0.

Scores: ``capture_score`` (+10) per capture, and at every whole second of game time
(every 10 ticks of 0.1 s) ``hold_score`` (+1) per point the team owns then. The episode
terminates for everyone when a team reaches ``win_score`` (100) and truncates after
``max_ticks`` (1200) ticks.

## Messages

``send_message`` carries a token in ``[0, message_vocab_size)`` (default 16) and a target:
0 for all teammates, ``i`` for teammate ``i`` (``blue_agent_i`` when sent by a blue agent).
A message is delivered next tick, that is in the observation that follows the step it was
sent in, to each addressed teammate within ``message_range`` (15) of the sender at that
moment. Each delivery is dropped with probability ``message_drop_prob`` (0.1), decided by
counter-based hashing of (world key, episode, tick, sender, receiver): the world key is
drawn from the world's own generator at reset, so drops are reproducible and do not
depend on the batch. Messages never reach the other team; a message to oneself reaches
nobody.

## Action space

The structured tool action of :mod:`arena_envs.actions` (``Dict``), per agent; only the
chosen tool's entry is read. ``send_message`` is ``MultiDiscrete([vocab, N + 1])``.
There are no resources or stations, so ``collect`` and ``craft`` answer ``NOT_FOUND``;
``query_world`` and ``query_inventory`` succeed and add nothing (every point is always
observed, and agents are seen by the perception rules below only).

## Observation space (per agent; N agents per team, P = 5 points, O obstacles)

Team-relative, so one policy can play either side. Float32 unless noted; rows of agents
not seen and of empty message slots are zero.

| key           | shape    | content                                                                 |
|---------------|----------|-------------------------------------------------------------------------|
| `agent`       | (7,)     | x, z, energy, moving (0/1), movement target x, target z, team (0 blue, 1 red) |
| `allies`      | (N, 4)   | row j = teammate j + 1: visible, dx, dz, distance (own row always zero)  |
| `enemies`     | (N, 4)   | row j = enemy j + 1: visible, dx, dz, distance                           |
| `points`      | (P, 7)   | dx, dz, distance, ours, theirs (ownership 0/1), our progress, their      |
|               |          | progress (fractions of ``capture_ticks``)                                |
| `messages`    | (N, 4)   | row j = the last message from teammate j + 1: sender (j + 1, 0 when      |
|               |          | none received), token, age in ticks (0 = arrived this tick), direct (1   |
|               |          | when addressed to this agent alone)                                      |
| `obstacles`   | (O, 4)   | present, dx, dz, radius (the map: every obstacle is always listed)      |
| `score`       | (2,)     | our score, their score                                                   |
| `last_action` | (2,) int | ``MultiDiscrete([7, 7])``: last tool and its result code                |
| `time_left`   | (1,)     | ticks until truncation                                                   |

Allies are seen within ``ally_radius`` (15), enemies within ``enemy_radius`` (20) and never
beyond; obstacles, when there are any, also block the line of sight to agents.

## Rewards

Per agent, the change this tick of (own team's score − other team's score): shared by
the team, zero-sum between the teams.

## Episode end

Every agent terminates when a team reaches ``win_score``; every agent truncates after
``max_ticks``.

## Info (per world)

``success`` (blue ahead), ``score`` (blue's score), ``blue_score``, ``red_score``,
``blue_points``, ``red_points`` (points owned).

## Rendering

``render_mode`` ``"rgb_array"``, ``"ansi"`` or ``"human"`` (every form; the vector env shows
its first four worlds): the field from above, capture zones filled and ringed in the owner's colour (grey while
neutral) with the capture in progress as a wedge of the capturing team's colour sweeping
clockwise, agents in their team's colour with their movement target and a ring at
``enemy_radius``, a status line with the tick and both scores, and a legend strip.

## Arguments

``agents_per_team``, ``capture_points``, ``capture_radius``, ``capture_ticks``,
``capture_score``, ``hold_score``, ``win_score``, ``ally_radius``, ``enemy_radius``,
``message_range``, ``message_drop_prob``, ``message_vocab_size``, ``spawn_distance``,
``spawn_spread``, ``num_obstacles`` (default 0: an open field; an even number gives
mirrored pairs of seeded circular obstacles that block movement and sight), and every
rule of :class:`~arena_envs.world.WorldParams` (``max_ticks``, called ``max_cycles`` by
the PettingZoo constructors, ``half_size``, ...).

    >>> from arena_envs import team_capture_v0
    >>> env = team_capture_v0.parallel_env(agents_per_team=2)
    >>> envs = team_capture_v0.vector_env(num_envs=4096, agents_per_team=4)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from arena_envs import dense
from arena_envs.actions import tool_action_space
from arena_envs.batch import step_subset
from arena_envs.dense import f32
from arena_envs.perception import line_of_sight, relative
from arena_envs.team_capture_params import BLUE, CANDIDATES, NEUTRAL, RED, TeamCaptureParams, agent_names
from arena_envs.team_capture_params import TEAMS as TEAMS  # a public name of the scenario
from arena_envs.tick import advance, apply_tools
from arena_envs.world import (
    F32,
    FAR,
    OBSTACLE_KINDS,
    OK,
    RESULT_CODES,
    SEND_MESSAGE,
    TOOL_NAMES,
    EntitySlots,
    ToolActions,
    WorldState,
    first_valid,
    reset_agents,
)
from arena_envs.xp import bits63, namespace, uniforms

_FAR = float(FAR)  # a Python float: what the dense rules compare with


class TeamCapture:
    """The Team Capture rules as pure functions over a batched :class:`WorldState`.

    The agent axis holds blue's agents then red's. ``observation_space`` and
    ``action_space`` are one agent's (every agent has the same ones).
    """

    def __init__(self, params: TeamCaptureParams | None = None, **kwargs):
        params = params or TeamCaptureParams()
        self.params = p = dataclasses.replace(params, **kwargs) if kwargs else params
        N, A, P, O = p.agents_per_team, p.num_agents, len(p.capture_points), p.num_obstacles
        self.agents_per_team, self.num_agents = N, A
        self.possible_agents = agent_names(N)
        self.slots = EntitySlots()
        self.point_x = np.array([c[0] for c in p.capture_points], F32)
        self.point_z = np.array([c[1] for c in p.capture_points], F32)
        self.team = np.repeat(np.arange(2), N)  # (A,) team of each agent
        self.sign = np.where(self.team == BLUE, F32(1), F32(-1))  # (A,) reward sign
        # Constant index tables that keep the hot path free of loops over agents. Reductions
        # and broadcasts over short trailing axes (N, P) are slow in numpy, so per-team counts
        # are a small matrix product and agent pairs are gathered flat: (B, A * N).
        self.team_onehot = np.repeat(np.eye(2, dtype=F32), N, axis=0)  # (A, 2)
        teammate = np.arange(N)
        self.observer = np.repeat(np.arange(A), N)  # (A * N,): row a * N + j belongs to agent a
        self.ally = (self.team[:, None] * N + teammate).ravel()  # ... and shows its teammate j
        self.enemy = ((1 - self.team)[:, None] * N + teammate).ravel()  # ... or the enemy j
        self.not_self = self.ally != self.observer
        self.sender_number = np.tile(np.arange(1, N + 1, dtype=F32), A)  # (A * N,)
        self.score_order = np.where(self.team[:, None] == BLUE, [BLUE, RED], [RED, BLUE])  # (A, 2)

        w, reach = p.half_size, 2 * p.half_size

        def table(row_low, row_high, rows):
            return spaces.Box(np.tile(np.array(row_low, F32), (rows, 1)), np.tile(np.array(row_high, F32), (rows, 1)))

        ar, er = p.ally_radius, p.enemy_radius
        self.observation_space = spaces.Dict({
            "agent": spaces.Box(np.array([-w, -w, 0, 0, -w, -w, 0], F32),
                                np.array([w, w, p.max_energy, 1, w, w, 1], F32)),
            "allies": table([0, -ar, -ar, 0], [1, ar, ar, ar], N),
            "enemies": table([0, -er, -er, 0], [1, er, er, er], N),
            "points": table([-reach, -reach, 0, 0, 0, 0, 0], [reach, reach, reach * np.sqrt(2), 1, 1, 1, 1], P),
            "messages": table([0, 0, 0, 0], [N, p.message_vocab_size - 1, p.max_ticks, 1], N),
            "obstacles": table([0, -reach, -reach, 0], [1, reach, reach, reach], O),
            "score": spaces.Box(0, p.max_score, (2,), F32),
            "last_action": spaces.MultiDiscrete([len(TOOL_NAMES), len(RESULT_CODES)]),
            "time_left": spaces.Box(0, p.max_ticks, (1,), F32),
        })
        self.action_space = tool_action_space(p, resources=0, recipes=0, stations=0, agents=N)
        # the global view: per agent x, z, moving; per point owner and progress of each team;
        # the scores; ticks left
        state_low = [-w, -w, 0] * A + [0, 0, 0, 0] * P + [0, 0, 0]
        state_high = [w, w, 1] * A + [1, 1, 1, 1] * P + [p.max_score, p.max_score, p.max_ticks]
        self.state_space = spaces.Box(np.array(state_low, F32), np.array(state_high, F32))

    def init_state(self, batch: int) -> WorldState:
        p, N, A, P = self.params, self.agents_per_team, self.num_agents, len(self.params.capture_points)
        s = WorldState.zeros(batch, A, self.slots, p.num_obstacles, len(p.item_names))
        s.extra.update(
            point_owner=np.full((batch, P), NEUTRAL, np.int8),
            point_capturer=np.full((batch, P), NEUTRAL, np.int8),
            point_progress=np.zeros((batch, P), np.int32),
            score=np.zeros((batch, 2), F32),
            inbox_token=np.full((batch, A, N), -1, np.int32),  # -1: nothing received from that teammate
            inbox_age=np.zeros((batch, A, N), np.int32),
            inbox_direct=np.zeros((batch, A, N), bool),
            message_key=np.zeros(batch, np.uint64),
        )
        return s

    # -- reset ---------------------------------------------------------------------------

    def reset(self, state: WorldState, index: np.ndarray, rngs: Sequence[np.random.Generator],
              seeds: Sequence[int | None] | None = None) -> None:
        """Start fresh episodes in worlds ``index``, each drawing from its own generator."""
        if len(index) == 0:
            return
        p, N, s = self.params, self.agents_per_team, state
        n, pairs = len(index), p.num_obstacles // 2
        draws = [(rng.random(2 * N + pairs * CANDIDATES * 4, dtype=F32), rng.integers(0, 2**63, dtype=np.uint64))
                 for rng in rngs]
        u = np.stack([d[0] for d in draws]).reshape(n, -1)
        s.extra["message_key"][index] = [d[1] for d in draws]

        # blue around (-spawn_distance, 0); red at the mirror image of blue through the centre
        spread = F32(p.spawn_spread)
        blue_x = -F32(p.spawn_distance) + (u[:, :N] * 2 - 1) * spread
        blue_z = (u[:, N:2 * N] * 2 - 1) * spread
        reset_agents(p, s, index, np.concatenate([blue_x, -blue_x], 1), np.concatenate([blue_z, -blue_z], 1))
        if pairs:
            (s.obst_x[index], s.obst_z[index], s.obst_r[index],
             s.obst_kind[index]) = self._obstacles(u[:, 2 * N:].reshape(n, pairs, CANDIDATES, 4))

        s.extra["point_owner"][index] = NEUTRAL
        s.extra["point_capturer"][index] = NEUTRAL
        s.extra["point_progress"][index] = 0
        s.extra["score"][index] = 0.0
        s.extra["inbox_token"][index] = -1
        s.extra["inbox_age"][index] = 0
        s.extra["inbox_direct"][index] = False

    def _obstacles(self, u: np.ndarray):
        """Mirrored pairs of circles, each clear of the capture zones and the spawn areas."""
        p = self.params
        w = F32(p.half_size)
        x, z = (u[..., 0] * 2 - 1) * (w - 2), (u[..., 1] * 2 - 1) * (w - 2)
        r = F32(0.8) + u[..., 2] * F32(1.2)
        kind = np.minimum(u[..., 3] * len(OBSTACLE_KINDS), len(OBSTACLE_KINDS) - 1)
        to_points = np.hypot(x[..., None] - self.point_x, z[..., None] - self.point_z).min(-1)
        to_spawn = np.minimum(np.hypot(x + p.spawn_distance, z), np.hypot(x - p.spawn_distance, z))
        spawn_reach = p.spawn_spread * np.sqrt(2) + p.agent_radius + 1.0
        ok = ((to_points > r + p.capture_radius + 1.0) & (to_spawn > r + spawn_reach)
              & (np.hypot(x, z) > r + p.agent_radius))  # the pair's two circles leave a gap at the centre
        chosen, placed = first_valid(np.stack([x, z, r, kind], -1), ok)
        ox, oz = np.where(placed, chosen[..., 0], FAR), np.where(placed, chosen[..., 1], FAR)
        mirror_x, mirror_z = np.where(placed, -ox, FAR), np.where(placed, -oz, FAR)
        orad = np.where(placed, chosen[..., 2], 0.0)
        okind = chosen[..., 3].astype(np.int8)
        return (np.concatenate([ox, mirror_x], 1), np.concatenate([oz, mirror_z], 1),
                np.concatenate([orad, orad], 1), np.concatenate([okind, okind], 1))

    # -- step ----------------------------------------------------------------------------

    def step(self, state: WorldState, actions: ToolActions, active: np.ndarray | None = None):
        """Advance the worlds where ``active`` is true by one tick.

        Returns rewards (B, A) and terminated, truncated (B,): every agent of a world
        ends together.
        """
        return step_subset(self._step, state, actions, active)

    def _step(self, s: WorldState, actions: ToolActions):
        p = self.params
        score = s.extra["score"]
        margin_before = score[:, BLUE] - score[:, RED]
        events = apply_tools(p, self.slots, s, actions)
        advance(p, self.slots, s, events)
        self._capture(s)
        self._deliver_messages(s, actions)
        reward = ((score[:, BLUE] - score[:, RED]) - margin_before)[:, None] * self.sign
        terminated = np.maximum(score[:, BLUE], score[:, RED]) >= p.win_score
        truncated = (s.tick >= p.max_ticks) & ~terminated
        return reward, terminated, truncated

    def _capture(self, s: WorldState) -> None:
        """Count agents in each zone, move progress on, flip points and score them."""
        p, B, P = self.params, s.batch_size, len(self.point_x)
        owner, capturer = s.extra["point_owner"], s.extra["point_capturer"]
        progress, score = s.extra["point_progress"], s.extra["score"]
        d2 = self._point_offsets(s)[2]
        inside = (d2 <= F32(p.capture_radius**2)) & s.alive  # (P, B, A)
        counts = (inside.reshape(P * B, -1).astype(F32) @ self.team_onehot).reshape(P, B, 2)
        blue, red = counts[..., BLUE].T, counts[..., RED].T  # (B, P)
        dominant = np.where(blue > red, BLUE, np.where(red > blue, RED, NEUTRAL)).astype(np.int8)
        contest = (dominant != NEUTRAL) & (dominant != owner)
        progress[...] = np.where(contest, np.where(capturer == dominant, progress + 1, 1), 0)
        capturer[...] = np.where(contest, dominant, NEUTRAL)
        flip = progress >= p.capture_ticks
        if flip.any():
            owner[flip] = dominant[flip]
            capturer[flip] = NEUTRAL
            progress[flip] = 0
            score += F32(p.capture_score) * self._per_team(flip, dominant)
        second = s.tick % p.ticks_per_second == 0
        if second.any():
            score += F32(p.hold_score) * self._per_team(second[:, None], owner)

    @staticmethod
    def _per_team(where: np.ndarray, team: np.ndarray) -> np.ndarray:
        """(B, 2): how many points per world are ``where`` and belong to blue, to red."""
        return np.stack([np.count_nonzero(where & (team == BLUE), axis=1),
                         np.count_nonzero(where & (team == RED), axis=1)], 1)

    def _point_offsets(self, s: WorldState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Offsets from every agent to every point and squared distances: (P, B, A) each."""
        dx = self.point_x[:, None, None] - s.x
        dz = self.point_z[:, None, None] - s.z
        return dx, dz, dx * dx + dz * dz

    def _deliver_messages(self, s: WorldState, actions: ToolActions) -> None:
        """Age every inbox, then deliver this tick's messages to teammates in range, minus drops."""
        p, N = self.params, self.agents_per_team
        s.extra["inbox_age"] += 1
        b, a = np.nonzero((s.last_tool == SEND_MESSAGE) & (s.last_code == OK) & s.acted)  # sent this tick
        if len(b) == 0:
            return
        receiver = (a - a % N)[:, None] + np.arange(N)  # (k, N): the sender's team
        target = actions.message_target[b, a]
        addressed = ((target[:, None] == 0) | (target[:, None] == np.arange(1, N + 1))) & (receiver != a[:, None])
        bb = b[:, None]
        dx = s.x[bb, receiver] - s.x[b, a][:, None]
        dz = s.z[bb, receiver] - s.z[b, a][:, None]
        delivered = addressed & (dx * dx + dz * dz <= F32(p.message_range**2)) & s.alive[bb, receiver]
        if p.message_drop_prob > 0:
            draw = uniform_hash(s.extra["message_key"][b], s.episode[b], s.tick[b], a, receiver)
            delivered &= draw >= p.message_drop_prob
        k, j = np.nonzero(delivered)
        b, sender, receiver = b[k], a[k], receiver[k, j]
        s.extra["inbox_token"][b, receiver, sender % N] = actions.message_token[b, sender]
        s.extra["inbox_age"][b, receiver, sender % N] = 0
        s.extra["inbox_direct"][b, receiver, sender % N] = target[k] != 0

    # -- observation, info, global state ---------------------------------------------------
    #
    # Tables are filled a column at a time from contiguous arrays: strided writes that also
    # cast (bool to float) or broadcast over a short axis cost several times more.

    def observe(self, s: WorldState) -> dict[str, np.ndarray]:
        """Every agent's observation: arrays (B, A, ...)."""
        p, N, A = self.params, self.agents_per_team, self.num_agents
        B = s.batch_size
        obs = self._empty_observation(B)
        agent = obs["agent"]
        for column, value in enumerate((s.x, s.z, s.energy, s.moving.astype(F32), s.target_x, s.target_z)):
            agent[..., column] = value
        agent[..., 6] = self.team

        points = obs["points"]
        dx, dz, d2 = self._point_offsets(s)  # (P, B, A)
        to_agents = (1, 2, 0)
        points[..., 0] = dx.transpose(to_agents)
        points[..., 1] = dz.transpose(to_agents)
        points[..., 2] = np.sqrt(d2, out=d2).transpose(to_agents)
        # what each team sees of the points, (2, B, P), then each agent its team's: (A, B, P)
        owner, capturer = s.extra["point_owner"], s.extra["point_capturer"]
        fraction = s.extra["point_progress"] * F32(1.0 / p.capture_ticks)
        blue_red = np.array([[BLUE], [RED]], np.int8)[:, :, None]
        owned, capturing = (owner == blue_red).astype(F32), fraction * (capturer == blue_red)
        for column, per_team in enumerate((owned, owned[::-1], capturing, capturing[::-1]), 3):
            points[..., column] = per_team[self.team].transpose(1, 0, 2)

        messages = obs["messages"].reshape(B, A * N, 4)
        token = s.extra["inbox_token"].reshape(B, A * N)
        received = (token >= 0).astype(F32)
        messages[..., 0] = received * self.sender_number
        messages[..., 1] = np.maximum(token, 0).astype(F32)
        messages[..., 2] = s.extra["inbox_age"].reshape(B, A * N) * received
        messages[..., 3] = s.extra["inbox_direct"].reshape(B, A * N).astype(F32)

        self._agents_seen(s, obs["allies"], obs["enemies"])
        self._obstacle_table(s, obs["obstacles"])
        obs["score"][...] = s.extra["score"][:, self.score_order]
        obs["time_left"][...] = (p.max_ticks - s.tick).astype(F32)[:, None, None]
        obs["last_action"][..., 0] = s.last_tool.astype(np.int64)
        obs["last_action"][..., 1] = s.last_code.astype(np.int64)
        return obs

    def _empty_observation(self, batch: int) -> dict[str, np.ndarray]:
        """The observation arrays of a batch: contiguous, but cut from one allocation.

        Allocated one by one, the dozen megabytes of a large batch's observation made glibc
        give memory back to the system and fault it in again on every step (a third of the
        step at B = 4096); a single block is reused in place.
        """
        layout = [(k, (batch, self.num_agents) + space.shape, np.dtype(space.dtype))
                  for k, space in self.observation_space.spaces.items()]
        nbytes = [math.prod(shape) * dtype.itemsize for _, shape, dtype in layout]
        starts = np.cumsum([0] + [-(-n // 8) * 8 for n in nbytes])  # 8-byte aligned
        block = np.empty(starts[-1], np.uint8)
        return {k: block[start:start + n].view(dtype).reshape(shape)
                for (k, shape, dtype), start, n in zip(layout, starts[:-1], nbytes, strict=True)}

    def _agents_seen(self, s: WorldState, allies: np.ndarray, enemies: np.ndarray) -> None:
        """Fill the ally and enemy tables (B, A, N, 4), each agent's row zero beyond its radius."""
        p, N, A, B = self.params, self.agents_per_team, self.num_agents, s.batch_size
        own_x, own_z = np.take(s.x, self.observer, axis=1), np.take(s.z, self.observer, axis=1)  # (B, A * N)
        both_alive = np.take(s.alive, self.observer, axis=1)
        hidden = self._hidden_pairs(s)
        for seen, radius, out in ((self.ally, p.ally_radius, allies), (self.enemy, p.enemy_radius, enemies)):
            dx = np.take(s.x, seen, axis=1)
            dx -= own_x
            dz = np.take(s.z, seen, axis=1)
            dz -= own_z
            d2 = dx * dx + dz * dz
            visible = (d2 <= F32(radius * radius)) & both_alive & np.take(s.alive, seen, axis=1)
            if seen is self.ally:
                visible &= self.not_self
            if hidden is not None:
                visible &= ~hidden[:, self.observer, seen]
            shown = visible.astype(F32)
            table = out.reshape(B, A * N, 4)
            table[..., 0] = shown
            table[..., 1] = np.multiply(dx, shown, out=dx)
            table[..., 2] = np.multiply(dz, shown, out=dz)
            table[..., 3] = np.multiply(np.sqrt(d2, out=d2), shown, out=d2)

    def _hidden_pairs(self, s: WorldState) -> np.ndarray | None:
        """(B, A, A): where an obstacle blocks the line of sight between two agents."""
        if self.params.num_obstacles == 0:
            return None
        _, _, d2 = relative(s, s.x, s.z)
        return ~line_of_sight(s, relative(s, s.obst_x, s.obst_z), s.x, s.z, d2, np.ones(d2.shape, bool))

    def _obstacle_table(self, s: WorldState, table: np.ndarray) -> None:
        if self.params.num_obstacles == 0:
            return
        present = (s.obst_r[:, None, :] > 0).astype(F32)
        table[..., 0] = present
        table[..., 1] = (s.obst_x[:, None, :] - s.x[:, :, None]) * present
        table[..., 2] = (s.obst_z[:, None, :] - s.z[:, :, None]) * present
        table[..., 3] = s.obst_r[:, None, :]

    def info(self, s: WorldState) -> dict[str, np.ndarray]:
        owner, score = s.extra["point_owner"], s.extra["score"]
        return {
            "success": score[:, BLUE] > score[:, RED],  # blue ahead: blue is the learner in self-play
            "score": score[:, BLUE].copy(),
            "blue_score": score[:, BLUE].copy(),
            "red_score": score[:, RED].copy(),
            "blue_points": np.count_nonzero(owner == BLUE, axis=1).astype(np.int32),
            "red_points": np.count_nonzero(owner == RED, axis=1).astype(np.int32),
        }

    def global_state(self, s: WorldState) -> np.ndarray:
        """The global view of :attr:`state_space` for every world: (B, state size)."""
        p, B = self.params, s.batch_size
        agents = np.stack([s.x, s.z, s.moving.astype(F32)], -1).reshape(B, -1)
        owner, capturer = s.extra["point_owner"], s.extra["point_capturer"]
        fraction = s.extra["point_progress"] * F32(1.0 / p.capture_ticks)
        points = np.stack([owner == BLUE, owner == RED, fraction * (capturer == BLUE),
                           fraction * (capturer == RED)], -1).reshape(B, -1)
        clock = (p.max_ticks - s.tick).astype(F32)[:, None]
        return np.concatenate([agents, points, s.extra["score"], clock], 1).astype(F32)


    # -- the same rules on any array library (arena_envs.dense: every world, no host sync) --

    def _constant(self, like: Any, values: Any, dtype: Any) -> Any:
        return dense.constant(namespace(like), like, values, dtype)

    def dense_reset(self, s: WorldState, mask: Any, keys: Any) -> None:
        """Fresh episodes where ``mask`` (B,) is true, drawn from the counter generator's ``keys``
        (B,): the worlds :meth:`reset` makes from :class:`~arena_envs.xp.CounterGenerator` s."""
        xp, p, N = namespace(s.x), self.params, self.agents_per_team
        pairs = p.num_obstacles // 2
        u = uniforms(xp, keys, 2 * N + pairs * CANDIDATES * 4)
        spread = f32(p.spawn_spread)
        blue_x = -f32(p.spawn_distance) + (u[:, :N] * 2 - 1) * spread
        blue_z = (u[:, N:2 * N] * 2 - 1) * spread
        dense.reset_agents(p, s, mask, xp.concat([blue_x, -blue_x], axis=1), xp.concat([blue_z, -blue_z], axis=1))
        if pairs:
            obstacles = self._dense_obstacles(xp, xp.reshape(u[:, 2 * N:], (u.shape[0], pairs, CANDIDATES, 4)))
            for name, value in zip(("obst_x", "obst_z", "obst_r", "obst_kind"), obstacles, strict=True):
                old = getattr(s, name)
                setattr(s, name, dense.where_worlds(mask, xp.astype(value, old.dtype), old))
        fresh = dict(point_owner=NEUTRAL, point_capturer=NEUTRAL, point_progress=0, score=0.0,
                     inbox_token=-1, inbox_age=0, inbox_direct=False)
        for name, value in fresh.items():
            old = s.extra[name]
            s.extra[name] = dense.where_worlds(mask, xp.full_like(old, value), old)
        s.extra["message_key"] = xp.where(mask, bits63(xp, keys), s.extra["message_key"])

    def _dense_obstacles(self, xp: Any, u: Any):
        """:meth:`_obstacles` for every world at once, operation for operation."""
        p = self.params
        w = f32(p.half_size)
        x, z = (u[..., 0] * 2 - 1) * (w - 2), (u[..., 1] * 2 - 1) * (w - 2)
        r = f32(0.8) + u[..., 2] * f32(1.2)
        kind = xp.minimum(u[..., 3] * len(OBSTACLE_KINDS), float(len(OBSTACLE_KINDS) - 1))
        px, pz = self._constant(u, self.point_x, xp.float32), self._constant(u, self.point_z, xp.float32)
        to_points = xp.min(xp.hypot(x[..., None] - px, z[..., None] - pz), axis=-1)
        to_spawn = xp.minimum(xp.hypot(x + p.spawn_distance, z), xp.hypot(x - p.spawn_distance, z))
        spawn_reach = p.spawn_spread * np.sqrt(2) + p.agent_radius + 1.0
        ok = ((to_points > r + p.capture_radius + 1.0) & (to_spawn > r + spawn_reach)
              & (xp.hypot(x, z) > r + p.agent_radius))
        chosen, placed = dense.first_valid(xp.stack([x, z, r, kind], axis=-1), ok)
        far = _FAR
        ox, oz = xp.where(placed, chosen[..., 0], far), xp.where(placed, chosen[..., 1], far)
        mirror_x, mirror_z = xp.where(placed, -ox, far), xp.where(placed, -oz, far)
        orad = xp.where(placed, chosen[..., 2], 0.0)
        okind = chosen[..., 3]
        return (xp.concat([ox, mirror_x], axis=1), xp.concat([oz, mirror_z], axis=1),
                xp.concat([orad, orad], axis=1), xp.concat([okind, okind], axis=1))

    def dense_step(self, s: WorldState, actions: ToolActions):
        """:meth:`step` of every world: rewards (B, A), terminated and truncated (B,)."""
        xp, p = namespace(s.x), self.params
        before = s.extra["score"]
        events = dense.apply_tools(p, self.slots, s, actions)
        dense.advance(p, self.slots, s, events)
        self._dense_capture(s)
        self._dense_messages(s, actions)
        score = s.extra["score"]
        margin = (score[:, BLUE] - score[:, RED]) - (before[:, BLUE] - before[:, RED])
        reward = margin[:, None] * self._constant(s.x, self.sign, xp.float32)
        terminated = xp.maximum(score[:, BLUE], score[:, RED]) >= p.win_score
        truncated = (s.tick >= p.max_ticks) & ~terminated
        return reward, terminated, truncated

    def _dense_capture(self, s: WorldState) -> None:
        xp, p, N = namespace(s.x), self.params, self.agents_per_team
        owner, capturer = s.extra["point_owner"], s.extra["point_capturer"]
        progress = s.extra["point_progress"]
        d2 = self._dense_point_offsets(s)[2]  # (B, A, P)
        inside = (d2 <= f32(p.capture_radius**2)) & s.alive[:, :, None]
        blue = xp.sum(xp.astype(inside[:, :N], xp.int32), axis=1)  # (B, P)
        red = xp.sum(xp.astype(inside[:, N:], xp.int32), axis=1)

        def team(value):
            return xp.full_like(owner, value)

        dominant = xp.where(blue > red, team(BLUE), xp.where(red > blue, team(RED), team(NEUTRAL)))
        contest = (dominant != NEUTRAL) & (dominant != owner)
        progress = xp.where(contest, xp.where(capturer == dominant, progress + 1, xp.ones_like(progress)),
                            xp.zeros_like(progress))
        capturer = xp.where(contest, dominant, team(NEUTRAL))
        flip = progress >= p.capture_ticks
        owner = xp.where(flip, dominant, owner)
        capturer = xp.where(flip, team(NEUTRAL), capturer)
        progress = xp.where(flip, xp.zeros_like(progress), progress)
        second = (s.tick % p.ticks_per_second == 0)[:, None]

        def per_team(where, of):
            return xp.stack([xp.sum(xp.astype(where & (of == BLUE), xp.float32), axis=1),
                             xp.sum(xp.astype(where & (of == RED), xp.float32), axis=1)], axis=1)

        s.extra["score"] = (s.extra["score"] + f32(p.capture_score) * per_team(flip, dominant)
                            + f32(p.hold_score) * per_team(second, owner))
        s.extra["point_owner"], s.extra["point_capturer"], s.extra["point_progress"] = owner, capturer, progress

    def _dense_point_offsets(self, s: WorldState) -> tuple[Any, Any, Any]:
        """Offsets from every agent to every point and squared distances: (B, A, P) each."""
        xp = namespace(s.x)
        dx = self._constant(s.x, self.point_x, xp.float32) - s.x[:, :, None]
        dz = self._constant(s.x, self.point_z, xp.float32) - s.z[:, :, None]
        return dx, dz, dx * dx + dz * dz

    def _dense_messages(self, s: WorldState, actions: ToolActions) -> None:
        """:meth:`_deliver_messages` for every (sender, teammate) pair at once."""
        xp, p, N, A = namespace(s.x), self.params, self.agents_per_team, self.num_agents
        B = s.x.shape[0]
        s.extra["inbox_age"] = s.extra["inbox_age"] + 1
        sent = (s.last_tool == SEND_MESSAGE) & (s.last_code == OK) & s.acted  # (B, A)
        receivers = (np.arange(A) - np.arange(A) % N)[:, None] + np.arange(N)  # (A, N): the sender's team
        to = self._constant(s.x, receivers.ravel(), xp.int64)

        def teammates(a):  # (B, A) -> (B, A, N): each sender's teammates' values
            return xp.reshape(xp.take(a, to, axis=1), (B, A, N))

        target = actions.message_target[:, :, None]
        numbers = self._constant(s.x, np.arange(1, N + 1), xp.int64)
        addressed = ((target == 0) | (target == numbers)) & self._constant(s.x, receivers != np.arange(A)[:, None],
                                                                            xp.bool)
        dx, dz = teammates(s.x) - s.x[:, :, None], teammates(s.z) - s.z[:, :, None]
        delivered = (sent[:, :, None] & addressed & (dx * dx + dz * dz <= f32(p.message_range**2))
                     & teammates(s.alive))
        if p.message_drop_prob > 0:
            draw = uniform_hash(s.extra["message_key"][:, None, None], s.episode[:, None, None],
                                s.tick[:, None, None], self._constant(s.x, np.arange(A)[None, :, None], xp.int64),
                                self._constant(s.x, receivers[None], xp.int64))
            delivered = delivered & (draw >= p.message_drop_prob)
        # the inbox slot (receiver r, sender number j) hears from sender (r's team) * N + j, if delivered to r
        senders = (np.arange(A) - np.arange(A) % N)[:, None] + np.arange(N)  # (A, N)
        flat = self._constant(s.x, (senders * N + (np.arange(A) % N)[:, None]).ravel(), xp.int64)
        heard = xp.reshape(xp.take(xp.reshape(delivered, (B, A * N)), flat, axis=1), (B, A, N))
        from_slot = self._constant(s.x, senders.ravel(), xp.int64)

        def of_sender(a):  # (B, A) -> (B, A, N): the value of the sender of each inbox slot
            return xp.reshape(xp.take(a, from_slot, axis=1), (B, A, N))

        inbox = s.extra
        inbox["inbox_token"] = xp.where(heard, xp.astype(of_sender(actions.message_token), xp.int32),
                                        inbox["inbox_token"])
        inbox["inbox_age"] = xp.where(heard, xp.zeros_like(inbox["inbox_age"]), inbox["inbox_age"])
        inbox["inbox_direct"] = xp.where(heard, of_sender(actions.message_target != 0), inbox["inbox_direct"])

    def dense_observe(self, s: WorldState) -> dict[str, Any]:
        """:meth:`observe` of every world, as new arrays of the state's library: (B, A, ...)."""
        xp, p, N, A = namespace(s.x), self.params, self.agents_per_team, self.num_agents
        B, f = s.x.shape[0], xp.float32
        team = self._constant(s.x, self.team, xp.int8)  # (A,)
        agent = xp.stack([s.x, s.z, s.energy, xp.astype(s.moving, f), s.target_x, s.target_z,
                          xp.broadcast_to(xp.astype(team, f)[None], s.x.shape)], axis=-1)
        dx, dz, d2 = self._dense_point_offsets(s)
        owner, capturer = s.extra["point_owner"][:, None, :], s.extra["point_capturer"][:, None, :]
        ours, theirs = team[None, :, None], 1 - team[None, :, None]
        # numpy makes the progress fraction in float64 (int32 by a float32 scalar)
        fraction = xp.astype(s.extra["point_progress"], xp.float64)[:, None, :] * f32(1.0 / p.capture_ticks)
        points = xp.stack([dx, dz, xp.sqrt(d2), xp.astype(owner == ours, f), xp.astype(owner == theirs, f),
                           xp.astype(fraction * xp.astype(capturer == ours, xp.float64), f),
                           xp.astype(fraction * xp.astype(capturer == theirs, xp.float64), f)], axis=-1)
        token = s.extra["inbox_token"]
        received = xp.astype(token >= 0, f)
        numbers = self._constant(s.x, np.arange(1, N + 1), f)
        messages = xp.stack([received * numbers, xp.astype(xp.clip(token, 0, None), f),
                             xp.astype(s.extra["inbox_age"], f) * received,
                             xp.astype(s.extra["inbox_direct"], f)], axis=-1)
        allies, enemies = self._dense_agents_seen(s)
        if p.num_obstacles:
            present = xp.astype(s.obst_r[:, None, :] > 0, f)
            obstacles = xp.stack([xp.broadcast_to(present, (B, A, p.num_obstacles)),
                                  (s.obst_x[:, None, :] - s.x[:, :, None]) * present,
                                  (s.obst_z[:, None, :] - s.z[:, :, None]) * present,
                                  xp.broadcast_to(s.obst_r[:, None, :], (B, A, p.num_obstacles))], axis=-1)
        else:
            obstacles = xp.zeros((B, A, 0, 4), dtype=f, device=s.x.device)
        order = self._constant(s.x, self.score_order.ravel(), xp.int64)
        return {
            "agent": agent,
            "allies": allies,
            "enemies": enemies,
            "points": points,
            "messages": messages,
            "obstacles": obstacles,
            "score": xp.reshape(xp.take(s.extra["score"], order, axis=1), (B, A, 2)),
            "last_action": xp.astype(xp.stack([s.last_tool, s.last_code], axis=-1), xp.int64),
            "time_left": xp.broadcast_to(xp.astype(p.max_ticks - s.tick, f)[:, None, None], (B, A, 1)),
        }

    def _dense_agents_seen(self, s: WorldState) -> tuple[Any, Any]:
        """The ally and enemy tables (B, A, N, 4) of :meth:`_agents_seen`."""
        xp, p, N, A = namespace(s.x), self.params, self.agents_per_team, self.num_agents
        B = s.x.shape[0]
        hidden = None
        if p.num_obstacles:
            dx, dz, d2 = dense.relative(s, s.x, s.z)
            ones = xp.ones(d2.shape, dtype=xp.bool, device=s.x.device)
            hidden = ~dense.line_of_sight(s, dense.relative(s, s.obst_x, s.obst_z), dx, dz, d2, ones)  # (B, A, A)
        observer = self._constant(s.x, self.observer, xp.int64)
        tables = []
        for seen_index, radius in ((self.ally, p.ally_radius), (self.enemy, p.enemy_radius)):
            seen = self._constant(s.x, seen_index, xp.int64)
            dx = xp.take(s.x, seen, axis=1) - xp.take(s.x, observer, axis=1)
            dz = xp.take(s.z, seen, axis=1) - xp.take(s.z, observer, axis=1)
            d2 = dx * dx + dz * dz
            visible = ((d2 <= f32(radius * radius)) & xp.take(s.alive, observer, axis=1)
                       & xp.take(s.alive, seen, axis=1))
            if seen_index is self.ally:
                visible = visible & self._constant(s.x, self.not_self, xp.bool)
            if hidden is not None:
                pair = self._constant(s.x, self.observer * A + seen_index, xp.int64)
                visible = visible & ~xp.take(xp.reshape(hidden, (B, A * A)), pair, axis=1)
            shown = xp.astype(visible, xp.float32)
            table = xp.stack([shown, dx * shown, dz * shown, xp.sqrt(d2) * shown], axis=-1)
            tables.append(xp.reshape(table, (B, A, N, 4)))
        return tables[0], tables[1]

    def dense_info(self, s: WorldState) -> dict[str, Any]:
        """:meth:`info` of every world, as arrays of the state's library."""
        xp = namespace(s.x)
        owner, score = s.extra["point_owner"], s.extra["score"]
        return {"success": score[:, BLUE] > score[:, RED], "score": score[:, BLUE],
                "blue_score": score[:, BLUE], "red_score": score[:, RED],
                "blue_points": xp.sum(xp.astype(owner == BLUE, xp.int32), axis=1, dtype=xp.int32),
                "red_points": xp.sum(xp.astype(owner == RED, xp.int32), axis=1, dtype=xp.int32)}


def uniform_hash(key: Any, episode: Any, tick: Any, sender: Any, receiver: Any) -> Any:
    """A uniform [0, 1) number for every (world key, episode, tick, sender, receiver), broadcast:
    (k,) keys, episodes, ticks and senders as rows (k, 1) against receivers (k, N), or arrays of
    any shapes that broadcast (the dense rules' (B, 1, 1) against (1, A, N)).

    Counter-based (SplitMix64 finaliser over a packed counter): the same inputs always give
    the same number, whatever else is in the batch. The 64-bit arithmetic runs in int64, whose
    products wrap as unsigned ones do, with logical shifts made by masking: the same bits on
    every array library (torch has no unsigned 64-bit multiply).
    """
    xp = namespace(key)
    if isinstance(key, np.ndarray) and key.dtype == np.uint64:
        key = key.view(np.int64)

    def shifted(z, k):  # z >> k for the unsigned value z holds
        return (z >> k) & ((1 << (64 - k)) - 1)

    def i64(a):
        return xp.astype(xp.asarray(a), xp.int64) if not isinstance(a, int) else a

    episode, tick, sender, receiver = (i64(a) for a in (episode, tick, sender, receiver))
    if getattr(sender, "ndim", 0) == 1:  # (k,) rows against (k, N) receivers
        key, episode, tick, sender = key[:, None], episode[:, None], tick[:, None], sender[:, None]
    counter = (episode << 40) ^ (tick << 10) ^ (sender << 5) ^ receiver
    z = key + (counter + 1) * _SPLITMIX[0]
    z = z ^ shifted(z, 30)
    z = z * _SPLITMIX[1]
    z = z ^ shifted(z, 27)
    z = z * _SPLITMIX[2]
    z = z ^ shifted(z, 31)
    return xp.astype(shifted(z, 11), xp.float64) * (1.0 / 2**53)


_SPLITMIX = tuple(c - (1 << 64) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))
"""SplitMix64's constants as the int64 values of the same bits."""


def decision_view(team_obs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """What a team's decision about where to go rests on, from its observations (B, N, ...):
    (B, 2P) bools, each point's owner (ours, theirs), and (B, N) bools, which teammates are
    walking. See :func:`decision_events`."""
    points = team_obs["points"][:, 0]  # every agent of a team sees the points alike
    return points[..., 3:5].reshape(len(points), -1) > 0, team_obs["agent"][..., 3] > 0


def decision_events(before: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """(B,): the worlds where something a team decides on happened between two
    :func:`decision_view`: a point changed hands or a teammate stopped walking (it arrived). A
    league's learner with ``decide_on_events`` decides then (``training/league.py``): a
    hand-made team deciding only on these events wins as often against the scripted team (89% of
    200 games, 20 decisions a game) as deciding every tick. A capture starting or stopping is no
    event: it adds nothing to that team's wins (29 decisions a game), and it cut short the
    learner's first step away from a contested point (the enemy starts taking it), so that only
    one training seed of four learnt to leave it; without it every seed tried did."""
    (points_before, walking_before), (points_after, walking_after) = before, after
    return (points_before != points_after).any(1) | (walking_before & ~walking_after).any(1)


def split_teams(tree: Any, agents_per_team: int) -> tuple[Any, Any]:
    """Blue's and red's halves of (nested dicts of) arrays with an agent axis 1: (B, A, ...)."""
    if isinstance(tree, dict):
        halves = {k: split_teams(v, agents_per_team) for k, v in tree.items()}
        return {k: v[0] for k, v in halves.items()}, {k: v[1] for k, v in halves.items()}
    return tree[:, :agents_per_team], tree[:, agents_per_team:]


def join_teams(blue: Any, red: Any) -> Any:
    """The inverse of :func:`split_teams`: one batch of both teams' actions or observations."""
    if isinstance(blue, dict):
        return {k: join_teams(blue[k], red[k]) for k in blue}
    return np.concatenate([np.asarray(blue), np.asarray(red)], axis=1)


def make_scenario(params: TeamCaptureParams | None = None, agents_per_team: int | None = None,
                  max_cycles: int | None = None, **kwargs) -> TeamCapture:
    """The scenario for the PettingZoo-style arguments: ``max_cycles`` is ``max_ticks``."""
    if agents_per_team is not None:
        kwargs["agents_per_team"] = agents_per_team
    if max_cycles is not None:
        kwargs["max_ticks"] = max_cycles
    return TeamCapture(params, **kwargs)
