"""A Textual compositor that draws a partial update from the rows it updates only.

Textual 8 draws a partial update (a frame that refreshes some regions) by taking the
rectangle around every refreshed region, then asking each widget whose *clip* (its
container's area) overlaps that rectangle for all its visible lines. While an answer
streams, a frame refreshes a few lines of the answer and a few of the gauges, and that rule
makes every widget of the screen (header, footer keys, input, the full height of each
container) render every frame: ~200 lines for ~30 changed cells, most of the app's CPU time.

:class:`RowCroppedCompositor` asks only the widgets whose visible area overlaps the
rectangle, only for the rows of the rectangle, and skips a widget whose rows are wholly
covered by widgets in front of it (a container under its children: Textual takes each
piece of a row from the front-most widget there). It changes which lines are computed, not
what is drawn: the frame's output comes from those rows alone (Textual writes only the
refreshed spans, all inside the rectangle). Columns are left whole, because Textual cuts
each row at widget edges and a refreshed span may start inside a cut.

It relies on the private ``Compositor._get_renders``; :func:`install` keeps Textual's own
when that is not the method it was written against.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

from textual._compositor import Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class RowCroppedCompositor(Compositor):
    """Textual's compositor, rendering a partial update from its rows only."""

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        if crop is None:
            yield from super()._get_renders(crop)
            return
        top, bottom = crop.y, crop.bottom
        left, right = crop.x, crop.right
        in_front: list[Region] = []
        for widget, (region, clip) in self.visible_widgets.items():     # front to back
            x, y, width, height = region.intersection(clip)
            if not (width and height) or x >= right or x + width <= left:
                continue
            y0, y1 = max(y, top), min(y + height, bottom)
            if y0 >= y1:
                continue
            rows = Region(x, y0, width, y1 - y0)
            if covered(rows, in_front):
                continue        # every cell of it would come from widgets in front
            in_front.append(rows)
            # (region, clip, strips): the caller draws region ∩ clip, which is ``rows``.
            yield region, rows, widget.render_lines(Region(x - region.x, y0 - region.y, width, y1 - y0))


def covered(area: Region, regions: list[Region]) -> bool:
    """Whether ``regions`` together cover every cell of ``area``."""
    x0, x1 = area.x, area.right
    for y in range(area.y, area.bottom):
        spans = sorted((r.x, r.right) for r in regions if r.y <= y < r.bottom and r.right > x0 and r.x < x1)
        reach = x0
        for a, b in spans:
            if a > reach:
                return False
            reach = max(reach, b)
            if reach >= x1:
                break
        if reach < x1:
            return False
    return True


def _compatible() -> bool:
    try:
        source = inspect.getsource(Compositor._get_renders)
        chops = inspect.getsource(Compositor._render_chops)
    except (AttributeError, OSError, TypeError):
        return False
    return "crop_overlaps(clip)" in source and "intersection(region, clip)" in chops


COMPATIBLE = _compatible()


def install(screen: Screen) -> bool:
    """Give ``screen`` the row-cropped compositor (before it is mounted); False if this
    Textual is not the one it was written for (the screen then keeps Textual's own)."""
    if not COMPATIBLE:
        return False
    screen._compositor = RowCroppedCompositor()
    return True
