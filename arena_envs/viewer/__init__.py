"""``arena-view``: a replay page for recorded episodes (see :mod:`arena_envs.viewer.cli`)."""
