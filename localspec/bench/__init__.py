"""Measured sweeps: `localspec bench` (settings x prompts x runs) and `localspec tune` (the
fastest settings for a pair, stored for run/chat/serve to use)."""
