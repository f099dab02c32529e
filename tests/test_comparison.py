"""Where a comparison's greedy answers part, the target's own logits say whether it is a
near-tie (llama.cpp rounds a batch of tokens differently from one at a time) or not."""

import numpy as np
import pytest
from conftest import GREEDY, make_engine, run_spec, run_to_done

from localspec.chat.comparison import NEAR_TIE, compare, measure_difference


@pytest.mark.slow
def test_a_difference_is_measured_by_the_targets_logits(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft) as e:
        toks = e.tokenize("Once upon a time")
        res = compare(e, toks, run_spec(e, sampling=GREEDY, max_tokens=30))
        assert res.identical and res.gap_at_difference is None
        assert res.outputs_line() == f"identical ({len(res.spec.token_ids)} tokens)"
        # Another answer stands in for a speculative one that parted from the target's.
        res.spec, _ = run_to_done(e, e.tokenize("The quick brown fox"), sampling=GREEDY, max_tokens=30)
        i = res.first_difference
        a, b = list(res.base.token_ids), list(res.spec.token_ids)
        measure_difference(e, toks, res)
        e.reset()
        x = e.target_ctx.decode(list(toks) + a[:i], logits="last")
        assert res.gap_at_difference == float(x[a[i]]) - float(x[b[i]])
        assert res.gap_at_difference > 0 and int(np.argmax(x)) == a[i], "the target's own greedy pick leads"
        line = res.outputs_line()
        far = abs(res.gap_at_difference) >= NEAR_TIE
        assert line.startswith(f"DIFFERENT from token {i} (the target's logits") or not far
        res.gap_at_difference = 0.0019
        assert "near-tie" in res.outputs_line() and "0.0019" in res.outputs_line()
        assert res.to_dict()["first_difference"] == i
