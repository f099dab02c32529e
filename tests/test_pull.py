"""`localspec pull`, `list`, `rm`, `import`, `quantize` against a local Hub that speaks the
Hub's HTTP (tests/hubserver.py), with the real huggingface_hub client.

The catalog's SmolLM2 repos are published on the fake Hub with generated tiny models under
the catalog's exact file names, so `pull smollm2-1.7b --draft 135m` runs end to end.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hubserver import FakeHub, configure_client, set_offline
from tiny import TinySpec, write_model

from localspec.cli import main
from localspec.models import hub as lhub
from localspec.models import puller

T_REPO, T_FILE = "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF", "smollm2-1.7b-instruct-q4_k_m.gguf"
D_REPO, D_FILE = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "smollm2-135m-instruct-q8_0.gguf"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hubfiles")
    return {
        "target": write_model(root / "target.gguf", TinySpec()),
        "draft": write_model(root / "draft.gguf", TinySpec(noise=0.1)),
        # A bigger file (a wider model) for resume and "few MB" checks.
        "big": write_model(root / "big.gguf", TinySpec(n_embd=256, n_ff=512, n_layer=4)),
        "other_vocab": write_model(root / "other.gguf", TinySpec(vocab_shuffle=3, n_embd=256, n_ff=512,
                                                                      n_layer=4)),
    }


@pytest.fixture
def hub(files, monkeypatch, tmp_path):
    with FakeHub() as h:
        h.add_file(T_REPO, T_FILE, files["target"])
        h.add_file(T_REPO, "README.md", b"# target\n")
        h.add_file(D_REPO, D_FILE, files["draft"])
        env = configure_client(monkeypatch, h, tmp_path)
        monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "home"))
        monkeypatch.setattr(lhub, "_retry_pause", lambda attempt: None)
        h.env = env
        yield h


def cli(*args: str, capsys=None) -> tuple[int, str, str]:
    """Run the real command line in this process (so the fake Hub's client settings apply)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr() if capsys else None
    return exc.value.code, (out.out if out else ""), (out.err if out else "")


def one_line_error(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("localspec: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def registered(home_env=None) -> dict:
    from localspec.models.store import Store

    return {m.name: m for m in Store().models()}


# -- the happy path ------------------------------------------------------------------------

def test_pull_pair_end_to_end(hub, files, capsys):
    code, out, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 0, err
    assert "compatible" in err
    models = registered()
    t, d = models["smollm2-1.7b:q4_k_m"], models["smollm2-135m:q8_0"]
    # The files are in the Hugging Face cache, in its own layout, byte for byte.
    cache = hub.env.cache_dir
    for entry, src in ((t, files["target"]), (d, files["draft"])):
        p = Path(entry.path)
        assert str(p).startswith(str(cache)) and "/snapshots/" in str(p)
        assert p.read_bytes() == src.read_bytes()
    from huggingface_hub import try_to_load_from_cache

    assert try_to_load_from_cache(T_REPO, T_FILE, cache_dir=cache) == t.path
    # `list` shows both models and the compatible pair.
    code, out, _ = cli("list", "--json", capsys=capsys)
    data = json.loads(out)
    assert {m["name"] for m in data["models"]} == {"smollm2-1.7b:q4_k_m", "smollm2-135m:q8_0"}
    assert data["pairs"][0]["compatible"] is True
    # The names work in run and check.
    code, out, err = cli("run", "-m", "smollm2-1.7b", "-d", "smollm2-135m", "-p", "hi", "-n", "5", "--json",
                         capsys=capsys)
    assert code == 0, err
    assert len(json.loads(out)["token_ids"]) == 5
    code, out, _ = cli("check", "smollm2-1.7b:q4_k_m", "smollm2-135m", capsys=capsys)
    assert code == 0 and "verdict: compatible" in out
    # A second pull downloads nothing.
    hub.clear_log()
    code, _, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 0, err
    assert hub.bytes_sent() == 0


def test_dry_run_fetches_only_headers(hub, capsys):
    code, out, err = cli("pull", "smollm2-1.7b", "--draft", "smollm2-135m", "--dry-run", "--json", capsys=capsys)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["dry_run"] and plan["compatible"] is True
    assert [f["path"] for f in plan["files"]] == [T_FILE, D_FILE]
    assert registered() == {}
    total = sum(f["size"] for f in plan["files"])
    assert hub.bytes_sent() <= plan["header_bytes"] < total
    assert all(r.range for r in hub.content_gets())


def test_missing_draft_size_takes_the_nearest_and_says_so(hub, capsys):
    code, out, err = cli("pull", "smollm2-1.7b", "--draft", "100m", "--dry-run", "--json", capsys=capsys)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["draft"] == "smollm2-135m:q8_0"
    assert "no 100m model: taking the nearest compatible size, 135m (smollm2-135m)" in plan["notes"][0]
    assert "the others, nearest first: 360m" in plan["notes"][0]


def test_the_catalog_decides_before_any_network_access(hub, monkeypatch, tmp_path, capsys):
    """The design card's own example: the Qwen 3.5 family has no 1.5B model. With no network
    the decision is printed before the connection error."""
    from hubserver import free_port

    hub.clear_log()
    configure_client(monkeypatch, f"http://127.0.0.1:{free_port()}", tmp_path / "x")
    code, _, err = cli("pull", "qwen-27b", "--draft", "1.5b", capsys=capsys)
    assert code == 1
    lines = err.strip().splitlines()
    assert lines[0].startswith("note: Qwen") and "taking the nearest compatible size, 2b (qwen3.5-2b)" in lines[0]
    assert "0.8b (qwen3.5-0.8b)" in lines[0]
    assert "connection to" in one_line_error(err) and lines[-1].startswith("localspec: error:")
    set_offline(monkeypatch, True)
    code, _, err = cli("pull", "qwen-27b", "--draft", "1.5b", capsys=capsys)
    assert code == 1 and err.startswith("note: Qwen") and "HF_HUB_OFFLINE" in one_line_error(err)
    assert hub.log == []


def test_unknown_alias_did_you_mean(hub, capsys):
    code, _, err = cli("pull", "smollm2-1.7", capsys=capsys)
    assert code == 2
    assert "did you mean" in one_line_error(err)


def test_name_not_pulled_shows_pull_command(hub, capsys):
    code, _, err = cli("run", "-m", "qwen2.5-7b", "--no-draft", "-p", "hi", capsys=capsys)
    assert code == 2
    assert "localspec pull qwen2.5-7b" in one_line_error(err)


# -- failures ------------------------------------------------------------------------------

def test_dropped_connection_resumes_on_the_next_pull(hub, files, capsys):
    size = files["big"].stat().st_size
    step = size // 10
    hub.add_file("acme/Big-GGUF", "big-q8_0.gguf", files["big"])
    hub.drop_after("acme/Big-GGUF", "big-q8_0.gguf", step, times=7)
    code, _, err = cli("pull", "acme/Big-GGUF:Q8_0", capsys=capsys)
    assert code == 1
    line = one_line_error(err)
    assert "run the same command to resume" in line
    assert registered() == {}
    partials = list(hub.env.cache_dir.rglob("*.incomplete"))
    assert len(partials) == 1 and 0 < partials[0].stat().st_size < size
    kept = partials[0].stat().st_size
    hub.clear_log()
    code, _, err = cli("pull", "acme/Big-GGUF:Q8_0", capsys=capsys)
    assert code == 0, err
    ranges = [r.range for r in hub.content_gets()]
    transfers = [r for r in ranges if r and r.endswith("-")]   # the rest are GGUF header reads
    assert transfers and transfers[0] == f"bytes={kept}-", ranges
    entry = registered()["acme/Big-GGUF:q8_0"]
    assert Path(entry.path).read_bytes() == files["big"].read_bytes()
    assert entry.sha256["big-q8_0.gguf"] == hub.file("acme/Big-GGUF", "big-q8_0.gguf").sha256


def test_corrupted_bytes_fail_the_checksum(hub, capsys):
    hub.corrupt(D_REPO, D_FILE)
    code, _, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 1
    line = one_line_error(err)
    assert "checksum mismatch" in line and "nothing was registered" in line
    assert registered() == {}
    assert not list(hub.env.cache_dir.rglob("*.incomplete"))


def test_unknown_repo_and_file(hub, capsys):
    code, _, err = cli("pull", "nobody/Missing-GGUF:Q4_K_M", capsys=capsys)
    assert code == 1 and "repository not found" in one_line_error(err)
    code, _, err = cli("pull", f"{T_REPO}/nope.gguf", capsys=capsys)
    assert code == 1 and "no file nope.gguf" in one_line_error(err)
    code, _, err = cli("pull", f"{T_REPO}:Q2_K", capsys=capsys)
    assert code == 2 and "has no Q2_K" in one_line_error(err)


def test_server_unreachable(hub, monkeypatch, tmp_path, capsys):
    from hubserver import free_port

    configure_client(monkeypatch, f"http://127.0.0.1:{free_port()}", tmp_path / "x")
    code, _, err = cli("pull", "smollm2-1.7b", capsys=capsys)
    assert code == 1
    assert "connection to" in one_line_error(err)


def test_offline_with_and_without_files(hub, monkeypatch, capsys):
    set_offline(monkeypatch, True)
    code, _, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 1
    assert "HF_HUB_OFFLINE" in one_line_error(err)
    set_offline(monkeypatch, False)
    assert cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)[0] == 0
    # Forget the registry, go offline: the pull completes from the cache alone.
    (Path(hub.env.cache_dir).parent / "home" / "registry.json").unlink()
    set_offline(monkeypatch, True)
    hub.clear_log()
    code, _, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 0, err
    assert hub.log == []
    assert set(registered()) == {"smollm2-1.7b:q4_k_m", "smollm2-135m:q8_0"}


def test_incompatible_pair_refused_after_headers_only(hub, files, capsys):
    hub.add_file("acme/Big-GGUF", "big-q4_k_m.gguf", files["big"])
    hub.add_file("acme/Other-GGUF", "other-q8_0.gguf", files["other_vocab"])
    code, out, err = cli("pull", "acme/Big-GGUF:Q4_K_M", "--draft", "acme/Other-GGUF:Q8_0", capsys=capsys)
    assert code == 1
    assert "incompatible pair: token texts" in one_line_error(err)
    assert "FAIL  token texts" in err
    total = files["big"].stat().st_size + files["other_vocab"].stat().st_size
    assert hub.bytes_sent() < 3_000_000 < total
    assert registered() == {}
    # --force pulls it anyway, and says so in the registry.
    code, _, err = cli("pull", "acme/Big-GGUF:Q4_K_M", "--draft", "acme/Other-GGUF:Q8_0", "--force",
                       capsys=capsys)
    assert code == 0, err
    code, out, _ = cli("list", "--json", capsys=capsys)
    assert json.loads(out)["pairs"][0]["compatible"] is False


def test_not_enough_disk_space_refused_before_download(hub, monkeypatch, capsys):
    monkeypatch.setattr(puller, "disk_free", lambda path: 1000)
    code, _, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 1
    line = one_line_error(err)
    assert "not enough disk space" in line and "1.00 KB free" in line
    assert all(r.range for r in hub.content_gets()), "only header reads happened"
    assert registered() == {}


def test_path_traversal_rejected(hub, capsys):
    hub.add_file("acme/Evil-GGUF", "model-q4_k_m.gguf", b"GGUF" + b"\0" * 100)
    hub.override_name("acme/Evil-GGUF", "model-q4_k_m.gguf", "../model-q4_k_m.gguf")
    code, _, err = cli("pull", "acme/Evil-GGUF:Q4_K_M", capsys=capsys)
    assert code == 2
    assert "refusing remote file name" in one_line_error(err)
    assert hub.content_gets() == []


def test_token_is_honoured(hub, monkeypatch, capsys):
    hub.require_token("hf_secret")
    code, _, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 1
    assert "HF_TOKEN" in one_line_error(err)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    code, _, err = cli("pull", "smollm2-1.7b", "--draft", "135m", capsys=capsys)
    assert code == 0, err


def test_two_pulls_at_once(hub, files):
    results, errors = [], []

    def go():
        try:
            plan = puller.plan_pull("smollm2-1.7b", "135m")
            puller.check_headers(plan)
            puller.check_space(plan)
            results.append(puller.execute(plan))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    models = registered()
    assert set(models) == {"smollm2-1.7b:q4_k_m", "smollm2-135m:q8_0"}
    assert Path(models["smollm2-1.7b:q4_k_m"].path).read_bytes() == files["target"].read_bytes()
    assert not list(hub.env.cache_dir.rglob("*.incomplete"))


def test_two_pull_processes_at_once(hub, files, tmp_path):
    """Two separate `localspec pull` processes on the same cache and store."""
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-m", "localspec", "pull", "smollm2-1.7b", "--draft", "135m"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    models = registered()
    assert Path(models["smollm2-135m:q8_0"].path).read_bytes() == files["draft"].read_bytes()


# -- the store -------------------------------------------------------------------------------

def test_import_quantize_list_rm(hub, smollm2_q4_1, tmp_path, capsys):
    code, out, err = cli("import", str(smollm2_q4_1), "--name", "smol-q41", capsys=capsys)
    assert code == 0, err
    code, out, err = cli("quantize", "smol-q41", "--type", "Q8_0", "--name", "smol-q8", capsys=capsys)
    assert code == 0, err
    assert "quantized" in out
    models = registered()
    q8 = models["smol-q8"]
    assert q8.quant == "Q8_0" and Path(q8.path).is_file()
    code, out, _ = cli("check", "smol-q41", "smol-q8", capsys=capsys)
    assert code == 0
    code, out, _ = cli("list", capsys=capsys)
    assert "smol-q41" in out and "smol-q8" in out
    code, out, _ = cli("rm", "smol-q8", capsys=capsys)
    assert code == 0 and not Path(q8.path).exists()
    code, out, _ = cli("rm", "smol-q41", capsys=capsys)
    assert code == 0 and smollm2_q4_1.exists(), "imported files are never deleted"
    code, _, err = cli("rm", "smol-q41", capsys=capsys)
    assert code == 2 and "no model named" in one_line_error(err)


def test_import_from_the_hf_cache(hub, capsys):
    assert cli("pull", "smollm2-1.7b", "--no-draft", capsys=capsys)[0] == 0
    code, out, err = cli("import", f"{T_REPO}/{T_FILE}", "--name", "mine", capsys=capsys)
    assert code == 0, err
    assert registered()["mine"].path == registered()["smollm2-1.7b:q4_k_m"].path


def test_quantize_bad_input(hub, tmp_path, capsys):
    junk = tmp_path / "junk.gguf"
    junk.write_text("nope")
    code, _, err = cli("quantize", str(junk), "--type", "Q8_0", capsys=capsys)
    assert code == 2 and "not a GGUF file" in one_line_error(err)
    code, _, err = cli("quantize", str(junk), "--type", "Q9_9", capsys=capsys)
    assert code == 2


def test_pull_the_real_smollm2_file(hub, smollm2_q4_1, capsys):
    """The real 98 MB SmolLM2 GGUF through the fake Hub: pulled, verified, and it runs."""
    repo, name = "acme/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"
    hub.add_file(repo, name, smollm2_q4_1)
    code, out, err = cli("pull", f"{repo}/{name}", "--json", capsys=capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["registered"] == [f"{repo}/{name}"]
    assert hub.bytes_sent(repo) >= smollm2_q4_1.stat().st_size
    code, out, err = cli("run", "-m", f"{repo}/{name}", "--no-draft", "--chat", "-p", "What is the capital of France?",
                         "-n", "12", "--temp", "0", "--json", capsys=capsys)
    assert code == 0, err
    assert len(json.loads(out)["token_ids"]) > 0


def test_split_target_as_written(hub, files, capsys):
    """`localspec pull qwen2.5-32b --draft 1.5b` exactly as the issue writes it: the catalog's
    split Q4_K_M target (every part) and the 1.5b Q8_0 draft."""
    t_repo, d_repo = "Qwen/Qwen2.5-32B-Instruct-GGUF", "Qwen/Qwen2.5-1.5B-Instruct-GGUF"
    data = files["target"].read_bytes()
    half = len(data) // 2
    # A split GGUF keeps the metadata in its first part.
    hub.add_file(t_repo, "qwen2.5-32b-instruct-q4_k_m-00001-of-00002.gguf", data[:half])
    hub.add_file(t_repo, "qwen2.5-32b-instruct-q4_k_m-00002-of-00002.gguf", data[half:])
    hub.add_file(t_repo, "qwen2.5-32b-instruct-q8_0-00001-of-00009.gguf", b"GGUF-not-this-one")
    hub.add_file(d_repo, "qwen2.5-1.5b-instruct-q8_0.gguf", files["draft"])
    code, out, err = cli("pull", "qwen2.5-32b", "--draft", "1.5b", capsys=capsys)
    assert code == 0, err
    entry = registered()["qwen2.5-32b:q4_k_m"]
    assert [Path(f).name for f in entry.files] == ["qwen2.5-32b-instruct-q4_k_m-00001-of-00002.gguf",
                                                    "qwen2.5-32b-instruct-q4_k_m-00002-of-00002.gguf"]
    assert entry.path == entry.files[0]
    assert b"".join(Path(f).read_bytes() for f in entry.files) == data
    assert registered()["qwen2.5-1.5b:q8_0"].quant == "Q8_0"
    assert hub.content_gets(t_repo, "qwen2.5-32b-instruct-q8_0-00001-of-00009.gguf") == []


def test_linking_the_same_snapshot_from_many_threads(tmp_path, monkeypatch):
    """Two pulls that finish together both place the snapshot link; neither may fail."""
    monkeypatch.setattr(lhub, "cache_dir", lambda: tmp_path)
    blob = tmp_path / "blob"
    blob.write_bytes(b"weights")
    rf = lhub.RemoteFile("org/repo", "m.gguf", 7, "0" * 64, "a" * 40)
    errors = []

    def go():
        for _ in range(200):
            try:
                lhub._link_snapshot(rf, blob)
            except OSError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    snap = tmp_path / "models--org--repo" / "snapshots" / ("a" * 40) / "m.gguf"
    assert snap.read_bytes() == b"weights"
    assert [p.name for p in snap.parent.iterdir()] == ["m.gguf"]
