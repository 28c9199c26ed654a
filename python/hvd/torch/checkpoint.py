"""Sharded checkpoints (being written)."""
