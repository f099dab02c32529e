"""Progress bars on the terminal (tqdm) for downloads, verification, quantization and sweeps.

A bar is drawn only for a person watching: when standard output and standard error (where
the bars go) are both terminals. Piped or redirected (``--json | jq``, a CI log, a file) the
commands print their results alone.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm


def interactive(out: TextIO | None = None, err: TextIO | None = None) -> bool:
    """Whether a person watches: both streams (default: ``sys.stdout``, ``sys.stderr``) are
    terminals."""
    streams = (out or sys.stdout, err or sys.stderr)
    return all(getattr(s, "isatty", lambda: False)() for s in streams)


def bar(**kwargs) -> tqdm:
    """A tqdm bar on standard error, drawn only when :func:`interactive` (else disabled: it
    draws and counts nothing). ``kwargs`` go to tqdm."""
    from tqdm.auto import tqdm

    return tqdm(file=sys.stderr, disable=not interactive(), dynamic_ncols=True, **kwargs)


class Bars:
    """One bar per label, with bytes, rate and ETA; driven by (label, done, total) calls.

    Args:
        enabled: False draws nothing; None (the default) draws when :func:`interactive`.
    """

    def __init__(self, enabled: bool | None = None):
        self.enabled = interactive() if enabled is None else enabled and interactive()
        self.bars: dict[str, tqdm] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        b = self.bars.get(label)
        if b is None:
            b = bar(total=total or None, initial=done, unit="B", unit_scale=True, unit_divisor=1000,
                    desc=label[-48:], leave=True)
            self.bars[label] = b
        if total and b.total != total:
            b.total = total
        b.update(done - b.n)
        if total and done >= total:
            b.close()

    def close(self) -> None:
        for b in self.bars.values():
            b.close()
