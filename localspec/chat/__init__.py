"""The UI-free conversation core shared by the CLI, the app and the server: chat templates,
the conversation and its prompt-cache reuse, live statistics, comparisons, system stats.

No textual here (tests/test_architecture.py checks it); submodules are imported on demand so
that the engine can use :mod:`localspec.chat.template` without loading the rest.
"""
