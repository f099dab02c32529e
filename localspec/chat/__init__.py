"""The UI-free conversation core shared by the CLI, the app and the server: the conversation
and its prompt-cache reuse, live statistics, comparisons, system stats.

No textual here, and it sits above the engine and the models (tests/test_architecture.py
checks both); the model's chat template is rendered by :mod:`localspec.engine.template`.
"""
