"""Scenarios as pure functions over batched state."""
