"""scripts/llama_replay.py, which scripts/bench_overhead.py --replay measures the loop alone
with: a played-back generation is the recorded one, token for token, and llama.cpp computes
nothing while it plays (full rows and the backend sampler's rows alike)."""

from __future__ import annotations

import sys
from pathlib import Path

import llama_cpp.llama_cpp as ll
import pytest
from conftest import make_engine, run_to_done

from localspec.engine import SamplingConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from llama_replay import Replay, ReplayDiverged  # noqa: E402

SAMPLE = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=3)


@pytest.fixture
def replay():
    rep = Replay().install()
    try:
        yield rep
    finally:
        rep.uninstall()


@pytest.mark.parametrize("device_sampling", [False, True])
@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.0), SAMPLE], ids=["greedy", "sample"])
def test_playback_is_the_recorded_generation(tiny_target, tiny_draft, replay, device_sampling, sampling):
    prompt = [5, 9, 14, 3, 27, 8, 11]
    with make_engine(tiny_target, tiny_draft, device_sampling=device_sampling) as e:
        run_to_done(e, prompt, sampling=sampling, max_tokens=24)   # caches as such a run leaves them
        replay.record()
        recorded, _ = run_to_done(e, prompt, sampling=sampling, max_tokens=24)
        r = recorded.summary
        assert replay.recorded_decodes() > 0 and r.drafted > 0
        before = replay.real_decodes
        for _ in range(2):
            replay.replay()
            played, _ = run_to_done(e, prompt, sampling=sampling, max_tokens=24)
            assert played.token_ids == recorded.token_ids
            assert (played.summary.drafted, played.summary.accepted) == (r.drafted, r.accepted)
        assert replay.real_decodes == before      # llama.cpp decoded nothing while it played
        replay.off()
        again, _ = run_to_done(e, prompt, sampling=sampling, max_tokens=24)
        assert again.token_ids == recorded.token_ids   # the engine goes on with real decodes


def test_a_playback_that_leaves_the_recording_stops(tiny_target, tiny_draft, replay):
    with make_engine(tiny_target, tiny_draft) as e:
        run_to_done(e, [5, 9, 14], max_tokens=8)
        replay.record()
        run_to_done(e, [5, 9, 14], max_tokens=8)
        replay.replay()
        with pytest.raises(ReplayDiverged):
            run_to_done(e, [5, 9, 15], max_tokens=8)


def test_uninstall_gives_llama_cpp_back(replay):
    replay.uninstall()
    assert ll.llama_decode is replay.real["llama_decode"] and ll.llama_get_logits is replay.real["llama_get_logits"]
