"""The Textual app (``localspec chat``), installed as ``localspec.tui``.

Layout (one responsibility per module):

* UI-free core, importable without textual: :mod:`.chat_settings` (the settings a message is
  generated with, parsed and validated), :mod:`.session` (models, engine lifecycle and the
  conversation), :mod:`.live` (engine events folded into live statistics),
  :mod:`.comparison` (target-only vs speculative results, JSON and Markdown),
  :mod:`.system_stats` (VRAM through NVML, RAM and CPU through psutil).
* The boundary: :mod:`.worker` runs the engine (and pulls) in threads and posts coalesced
  :mod:`.messages` to the UI at a bounded rate.
* The UI: :mod:`.app`, :mod:`.screens` and :mod:`.widgets`, styled by the ``*.tcss`` files here.

The engine never imports this package (tests/test_architecture.py checks it).
"""
