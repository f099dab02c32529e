"""The Textual app (``localspec chat``), installed as ``localspec.tui``.

It consumes engine events in a thread worker; the engine never imports it. The app itself
arrives with the TUI issue; this package is its home in the layout.
"""
