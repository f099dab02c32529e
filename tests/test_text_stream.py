"""Streaming text: UTF-8 split across tokens, stop strings split across tokens."""

from localspec.engine.text import TextStream


def test_utf8_split_across_tokens():
    s = TextStream()
    data = "héllo ✓".encode()
    out = [s.push(data[i:i + 1]) for i in range(len(data))]
    assert "".join(out) + s.flush() == "héllo ✓"
    assert "\ufffd" not in "".join(out)


def test_stop_string_across_tokens_is_held_then_dropped():
    s = TextStream(["</end>"])
    assert s.push(b"answer is 4") == "answer is 4"
    assert s.push(b" </e") == " "
    assert s.push(b"nd> trailing") == ""
    assert s.stopped
    assert s.text == "answer is 4 "


def test_false_alarm_is_released():
    s = TextStream(["STOP"])
    assert s.push(b"ST") == ""
    assert s.push(b"AR") == "STAR"
    assert s.push(b"S") == ""
    assert s.flush() == "S"
    assert s.text == "STARS"
