"""Progress bars on the terminal (tqdm) for downloads, verification and quantization."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


class Bars:
    """One bar per label, with bytes, rate and ETA; driven by (label, done, total) calls."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.bars: dict[str, tqdm] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        bar = self.bars.get(label)
        if bar is None:
            bar = tqdm(total=total or None, initial=done, unit="B", unit_scale=True, unit_divisor=1000,
                       desc=label[-48:], file=sys.stderr, leave=True, dynamic_ncols=True)
            self.bars[label] = bar
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)
        if total and done >= total:
            bar.close()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
