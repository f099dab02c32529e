"""A chat saved and picked up again: the conversation as JSON (to resume it with
``localspec chat --resume FILE``) and as Markdown (to read or share).

The JSON holds what the model needs to go on (the system prompt and the messages, a thinking
model's reasoning as ``reasoning_content``) and, for the record, the models and settings it
was had with; resuming takes the conversation only (the models and settings are the ones the
command line gives now).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..errors import BadInput

FORMAT = "localspec-chat/1"
_ROLES = ("user", "assistant")


def save_transcript(folder: str | Path, system: str | None, messages: list[dict], *, models: str = "",
                    settings: dict | None = None, stem: str | None = None) -> tuple[Path, Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` into ``folder`` (made if missing).

    Returns:
        The two paths.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = stem or time.strftime("localspec-chat-%Y%m%d-%H%M%S")
    j, m = folder / f"{stem}.json", folder / f"{stem}.md"
    data = {"format": FORMAT, "models": models, "settings": settings or {}, "system": system,
            "messages": messages}
    j.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    lines = [f"# Chat with {models or 'a local model'}", ""]
    if system:
        lines += [f"*System:* {system}", ""]
    for msg in messages:
        lines += [f"**{'You' if msg['role'] == 'user' else 'Assistant'}:**", ""]
        if msg.get("reasoning_content"):
            lines += ["> " + line for line in msg["reasoning_content"].strip().splitlines()] + [""]
        lines += [msg["content"], ""]
    m.write_text("\n".join(lines), encoding="utf-8")
    return j, m


def load_transcript(path: str | Path) -> tuple[str | None, list[dict]]:
    """The system prompt and the messages of a chat :func:`save_transcript` wrote.

    Raises:
        BadInput: a missing or unreadable file, or one that is not a saved chat (one line).
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: not a saved chat ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadInput(f"{path}: not a chat saved by localspec (format {FORMAT})")
    system, messages = data.get("system"), data.get("messages")
    ok = isinstance(messages, list) and all(
        isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str) for m in messages)
    if not ok or not isinstance(system, (str, type(None))):
        raise BadInput(f"{path}: its messages must be user and assistant messages with text")
    return system, [{k: v for k, v in m.items() if k in ("role", "content", "reasoning_content")} for m in messages]
