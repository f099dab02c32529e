"""State files survive two processes writing at once: every update holds the file's lock and
replaces it atomically, so no process loses another's keys."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from localspec import paths
from localspec.models.store import ModelEntry, Store

WRITES = 200

# Each writer waits for the go file, so the two run their updates at the same time.
WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path

    which, tag, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    from localspec import paths
    from localspec.bench import tuning
    from localspec.engine import memory
    from localspec.models.store import ModelEntry, Store

    Path(go.with_suffix("." + tag)).touch()
    while not go.exists():
        time.sleep(0.001)
    for i in range({writes}):
        key = f"{{tag}}-{{i}}"
        if which == "update_json":
            paths.update_json("state.json", lambda data: data.__setitem__(key, i))
        elif which == "tuned":
            tuning.store(key, {{"draft_max": i}})
        elif which == "learned":
            memory.Memory(sys.argv[4], None, "cpu").put(key, {{"k": i}})
            memory.flush()
        elif which == "registry":
            Store().add_model(ModelEntry(name=key, path="/nowhere/" + key))
""").format(writes=WRITES)


def _two_writers(tmp_path: Path, which: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    go = tmp_path / "go"
    env = {**os.environ, "LOCALSPEC_HOME": str(home)}
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, which, tag, str(go), str(model)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for tag in ("a", "b")]
    try:
        while not all(go.with_suffix("." + tag).exists() for tag in ("a", "b")):
            for p in procs:
                if p.poll() is not None:
                    pytest.fail(p.stderr.read())
        go.touch()
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.parametrize("which,file", [("update_json", "state.json"), ("tuned", "tuned.json"),
                                        ("learned", "learned.json")])
def test_two_processes_keep_every_key(tmp_path, which, file):
    _two_writers(tmp_path, which)
    data = json.loads((tmp_path / "home" / file).read_text())
    assert len(data) == 2 * WRITES
    assert {k.rsplit("|", 1)[-1] for k in data} == {f"{t}-{i}" for t in "ab" for i in range(WRITES)}


def test_two_processes_keep_every_registry_entry(tmp_path):
    _two_writers(tmp_path, "registry")
    data = json.loads((tmp_path / "home" / "registry.json").read_text())
    assert set(data["models"]) == {f"{t}-{i}" for t in "ab" for i in range(WRITES)}


def test_update_returns_what_the_change_returns_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    assert paths.update_json("s.json", lambda d: d.setdefault("n", 7)) == 7
    assert paths.update_json("s.json", lambda d: d.pop("n")) == 7
    assert paths.read_json("s.json") == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json", "s.json.lock"]


def test_an_unreadable_file_reads_as_empty_and_is_replaced_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    (tmp_path / "s.json").write_text("{ half a fi")
    assert paths.read_json("s.json") == {}
    paths.update_json("s.json", lambda d: d.update(k=1))
    assert json.loads((tmp_path / "s.json").read_text()) == {"k": 1}


def test_a_lock_held_elsewhere_times_out_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    monkeypatch.setattr(paths, "LOCK_TIMEOUT", 0.05)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, filelock
        lock = filelock.FileLock({str(tmp_path / 's.json.lock')!r})
        lock.acquire()
        print("held", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(paths.StateLockTimeout, match=r"s\.json: another localspec process") as exc:
            paths.update_json("s.json", lambda d: d.update(k=1))
        assert "\n" not in str(exc.value)
    finally:
        holder.communicate("")
    assert paths.read_json("s.json") == {}


def test_the_lock_is_reentrant_within_a_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    paths.update_json("s.json", lambda d: d.update(inner=paths.read_json("s.json")))
    assert paths.read_json("s.json") == {"inner": {}}
    store = Store(tmp_path)
    store.add_model(ModelEntry(name="m", path="/m.gguf"))
    assert [m.name for m in store.models()] == ["m"]


def test_learned_state_outlives_a_stuck_lock_in_the_process(tmp_path, monkeypatch):
    """A generation never fails on learned.json: with its lock held elsewhere, what was
    learned stays in the process."""
    from localspec.engine import memory

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    monkeypatch.setattr(paths, "LOCK_TIMEOUT", 0.05)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, filelock
        lock = filelock.FileLock({str(tmp_path / (memory.FILE + '.lock'))!r})
        lock.acquire()
        print("held", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        m = memory.Memory(str(model), None, "cpu")
        m.put("model", {"k": 1})
        memory.flush()      # the write waits for the lock, gives up, and raises nothing
        assert m.get("model") == {"k": 1}
        assert memory.Memory(str(model), None, "cpu").get("model") is None
    finally:
        holder.communicate("")
    assert not (tmp_path / memory.FILE).exists()


def test_learned_states_are_written_together_off_the_callers_thread(tmp_path, monkeypatch):
    """A put returns without touching the disk (a server's engine thread must not pay ~5 ms a
    request); a timer, or flush, writes what waits, to the home of the put; a new Memory in
    the process sees a state still waiting."""
    from localspec.engine import memory

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    first, second = tmp_path / "one", tmp_path / "two"
    memory.flush()   # nothing of an earlier test waits, and no timer runs
    monkeypatch.setenv("LOCALSPEC_HOME", str(first))
    monkeypatch.setattr(memory, "WRITE_DELAY", 3600.0)
    m = memory.Memory(str(model), None, "cpu")
    m.put("model", {"k": 1})
    m.put("ngram", {"k": 2})
    assert not (first / memory.FILE).exists()
    assert memory.Memory(str(model), None, "cpu").get("ngram") == {"k": 2}
    monkeypatch.setenv("LOCALSPEC_HOME", str(second))
    memory.flush()
    stored = json.loads((first / memory.FILE).read_text())
    assert sorted(e["drafter"] for e in stored.values()) == ["model", "ngram"]
    assert not (second / memory.FILE).exists()

    monkeypatch.setattr(memory, "WRITE_DELAY", 0.01)
    memory.Memory(str(model), None, "cpu").put("model", {"k": 3})   # in `second`, by the timer
    deadline = time.monotonic() + 30
    while not (second / memory.FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    stored = json.loads((second / memory.FILE).read_text())
    assert [e["state"] for e in stored.values()] == [{"k": 3}]


def test_forgetting_drops_waiting_writes(tmp_path, monkeypatch):
    from localspec.engine import memory

    memory.flush()
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    monkeypatch.setattr(memory, "WRITE_DELAY", 3600.0)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    m = memory.Memory(str(model), None, "cpu")
    m.put("model", {"k": 1})
    m.forget()
    memory.flush()
    assert memory.load() == {}
    m.put("model", {"k": 1})
    memory.reset()
    memory.flush()
    assert memory.load() == {}


def test_a_drafter_with_nothing_stored_reads_the_file_once(tmp_path, monkeypatch):
    """A server asks for the learned state at every request: a drafter the file has nothing
    for is not read again (a locked read is ~1 ms); what this process learns still counts."""
    from localspec.engine import memory

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    reads = []
    real = memory.load
    monkeypatch.setattr(memory, "load", lambda: reads.append(1) or real())
    m = memory.Memory(str(model), None, "cpu")
    assert [m.get("model") for _ in range(5)] == [None] * 5
    assert len(reads) == 1
    m.put("model", {"k": 1})
    assert m.get("model") == {"k": 1} and len(reads) == 1
    m.forget()
    assert m.get("model") is None and len(reads) == 2
