"""The names scripts/bench_policy.py imports from here; everything else imports :mod:`tiny`."""

from tiny import TinySpec
from tiny import write_model as write_tiny_model

__all__ = ["TinySpec", "write_tiny_model"]
