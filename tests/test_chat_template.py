"""Chat templates are untrusted input: rendered in Jinja's sandbox, errors are one line."""

import pytest

from localspec.engine.template import CHATML, render_chat
from localspec.errors import LocalspecError

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_chatml_fallback():
    out = render_chat(None, MSGS)
    assert out == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\n")
    assert render_chat(CHATML, MSGS, add_generation_prompt=False).endswith("Hi<|im_end|>\n")


def test_hf_template_features():
    tmpl = ("{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
            "{{ m.content | tojson }}{% endfor %}{% if messages | length > 5 %}"
            "{{ raise_exception('too long') }}{% endif %}")
    assert render_chat(tmpl, MSGS, bos_token="<s>") == '<s>"Hi"'
    with pytest.raises(LocalspecError, match="too long"):
        render_chat(tmpl, MSGS * 3)


@pytest.mark.parametrize("evil", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__.__init__.__globals__ }}",
    "{% set x = messages.append({'role': 'user', 'content': 'injected'}) %}{{ messages | length }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
])
def test_sandbox_blocks_escapes(evil):
    with pytest.raises(LocalspecError):
        render_chat(evil, [dict(m) for m in MSGS])


def test_syntax_error_is_one_line():
    with pytest.raises(LocalspecError) as exc:
        render_chat("{% for m in messages %}", MSGS)
    assert "\n" not in str(exc.value)


def test_generation_blocks_render_their_body():
    tmpl = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
            "[{{ m.content }}]{% endgeneration %}{% else %}{{ m.content }}|{% endif %}{% endfor %}")
    msgs = MSGS + [{"role": "assistant", "content": "Hello."}]
    assert render_chat(tmpl, msgs) == "Be brief.|Hi|[Hello.]"


def test_loop_controls_and_do_render():
    tmpl = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% do m.content.upper() %}"
            "{% if loop.index > 3 %}{% break %}{% endif %}{% if m.role == 'system' %}{% continue %}{% endif %}"
            "{% set ns.n = ns.n + 1 %}{{ m.content }};{% endfor %}{{ ns.n }}")
    msgs = MSGS + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    assert render_chat(tmpl, msgs) == "Hi;x;2"


def test_an_unclosed_generation_block_is_one_line():
    with pytest.raises(LocalspecError, match="endgeneration") as exc:
        render_chat("{% generation %}{{ 1 }}", MSGS)
    assert "\n" not in str(exc.value)
