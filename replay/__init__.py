"""Replay of real adversarial rounds: data plans and reports (pure, no database)."""
