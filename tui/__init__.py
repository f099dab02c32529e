"""The Textual app (``localspec chat``), installed as ``localspec.tui``: screens, widgets,
workers and styles only.

* What it shows comes from the UI-free core in :mod:`localspec.chat` (the conversation, live
  statistics, comparisons, system stats) and runs through :meth:`Engine.run
  <localspec.engine.Engine.run>` with a :class:`~localspec.engine.RunSpec`.
* The boundary: :mod:`.worker` runs the engine (and pulls) in threads and posts coalesced
  :mod:`.messages` to the UI at a bounded rate.
* The UI: :mod:`.app`, :mod:`.screens` and :mod:`.widgets`, styled by the ``*.tcss`` files here.

Neither the engine nor the chat core imports this package (tests/test_architecture.py checks it).
"""
