"""Model management: the catalog, the Hub client, pulling, the local store, GGUF metadata,
tokenizer compatibility, requantization and the built-in demo pair.

Nothing here generates text; the engine reads only file paths and compatibility reports.
"""
