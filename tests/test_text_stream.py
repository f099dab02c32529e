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


def test_n_indent_ends_the_answer_before_a_line_indented_too_little():
    """llama-server's n_indent: the first line is free; a later line (or a blank one) with fewer
    leading spaces or tabs ends the text before its first other character."""
    s = TextStream(n_indent=4)
    out = "".join(s.push(p.encode()) for p in ["return a", " + b\n", "  ", "  x = 1\n", "\t", "y", "ignored"])
    assert out == "return a + b\n    x = 1\n\t" and s.stopped and s.indented
    blank = TextStream(n_indent=2)
    assert blank.push(b"a\n\nb") == "a\n" and blank.indented
    stop = TextStream(["END"], n_indent=2)
    assert stop.push(b"x\n  y END") == "x\n  y " and stop.stopped and not stop.indented
    assert TextStream().push(b"a\nb") == "a\nb"
