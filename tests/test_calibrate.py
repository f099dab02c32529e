"""Cascade calibration: the shipped question set, the exact-match rule, the threshold table
and `localspec tune --cascade` storing a threshold that a bare --cascade then uses."""

import json

import pytest
from conftest import run_cli

from localspec.bench import calibrate
from localspec.bench.calibrate import Outcome, Question
from localspec.errors import BadInput

pytestmark = pytest.mark.usefixtures("one_llama_thread")


def test_shipped_questions():
    qs = calibrate.load_questions()
    assert len(qs) >= 100
    assert {q.kind for q in qs} == {"arithmetic", "unit conversion", "fact", "extraction"}
    assert all(q.q and q.a for q in qs)


def test_exact_match_rule():
    assert calibrate.is_right("Paris.", "Paris")
    assert calibrate.is_right("The answer is 42\nmore", "42")
    assert not calibrate.is_right("420", "42")
    assert not calibrate.is_right("\n\nFirst line\n42", "42")
    assert calibrate.is_right("-12", "-12")


def test_bad_question_file_is_one_line(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text('{"q": "x"}\n')
    with pytest.raises(BadInput, match="q.jsonl:1"):
        calibrate.load_questions(p)
    with pytest.raises(BadInput, match="cannot read"):
        calibrate.load_questions(tmp_path / "missing.jsonl")


def outcome(t_right, d_right, conf):
    return Outcome(Question("q", "a", "k"), t_right, 1.0, d_right, conf, 0.2, 0.9)


def test_no_threshold_when_the_cascade_saves_no_time():
    slow = [Outcome(Question("q", "a"), True, 1.0, True, 0.9, 1.5, 0.9)]
    r = calibrate.table(slow, thresholds=(0.5,))
    assert r["chosen"] is None and "does not pay" in calibrate.render(r)


def test_table_picks_the_fastest_threshold_within_the_accuracy_loss():
    outs = [outcome(True, True, 0.95), outcome(True, True, 0.9), outcome(True, False, 0.7), outcome(False, False, 0.4)]
    r = calibrate.table(outs, thresholds=(0.5, 0.8, 0.99), max_loss=0.02)
    rows = {x["threshold"]: x for x in r["thresholds"]}
    assert r["target_accuracy"] == 0.75
    assert rows[0.5]["accuracy"] == 0.5 and rows[0.5]["answered_by_draft"] == 0.75
    assert rows[0.8]["accuracy"] == 0.75 and rows[0.8]["time_saved"] == pytest.approx(1 - (0.4 + 2 * 1.1) / 4)
    assert rows[0.99]["time_saved"] == pytest.approx(1 - 4.4 / 4)
    assert r["chosen"]["threshold"] == 0.8
    assert "<- chosen" in calibrate.render(r)


def test_tune_cascade_stores_the_threshold(cost_pairs, tmp_path):
    """A draft 100x cheaper than the target: answering with it saves time."""
    tiny_target, draft = cost_pairs["big"], cost_pairs["small"]
    qs = tmp_path / "q.jsonl"
    qs.write_text("\n".join(json.dumps({"q": f"say {i}", "a": "zzz"}) for i in range(3)))
    out = tmp_path / "cal.json"
    r = run_cli("tune", "-m", str(tiny_target), "-d", str(draft), "--cascade", "--questions", str(qs),
                "--threads", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["questions"] == 3 and len(result["thresholds"]) == len(calibrate.THRESHOLDS)
    chosen = result["chosen"]["threshold"]
    assert "stored for this pair" in r.stdout
    r = run_cli("tune", "--show")
    assert "cascade threshold" in r.stdout
    r = run_cli("run", "-m", str(tiny_target), "-d", str(draft), "-p", "x", "-n", "4", "--cascade", "--json",
                "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["cascade"] == chosen and "calibrated for this pair" in r.stderr
