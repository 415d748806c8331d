"""Training scripts and configs for arena-envs."""
