"""``python -m arena_envs.serve SCENARIO ...``: the same as ``arena-serve``."""

from arena_envs.cli import arena_serve

if __name__ == "__main__":
    raise SystemExit(arena_serve())
