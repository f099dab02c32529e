"""Where a comparison's greedy answers part, the target's own logits say whether it is a
near-tie (llama.cpp rounds a batch of tokens differently from one at a time) or not."""

import numpy as np
import pytest
from conftest import GREEDY, make_engine, run_spec, run_to_done

from localspec.chat.comparison import NEAR_TIE, compare, measure_difference, near_tie
from localspec.errors import BadInput


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
        # read as the target alone read it: the prompt in one batch, its answer a token at a time
        e.reset()
        x = e.target_ctx.decode(list(toks), logits="last")
        for t in a[:i]:
            x = e.target_ctx.decode([t], logits="last")
        assert res.gap_at_difference == float(x[a[i]]) - float(x[b[i]])
        assert res.gap_at_difference > 0 and int(np.argmax(x)) == a[i], "the target's own greedy pick leads"
        with pytest.raises(BadInput):
            e.logit_gap(a[:2], a[2], b[2], stepped=2)
        line = res.outputs_line()
        far = abs(res.gap_at_difference) >= NEAR_TIE
        assert line.startswith(f"DIFFERENT from token {i} (the target's logits") or not far
        res.gap_at_difference = 0.0019
        assert "near-tie" in res.outputs_line() and "0.0019" in res.outputs_line()
        assert res.to_dict()["first_difference"] == i


@pytest.mark.slow
def test_batch_rounding_is_measured_on_the_model(smollm2_f16, smollm2_q4_1, smollm2_q4_k_m):
    """llama.cpp computes a batch of tokens with other kernels than one token at a time: on a
    CPU the gap between a position's two best tokens moves by thousandths of a logit with F16
    weights, not at all with Q4_1 here, and by tenths with the K-quants' kernels (the same
    model, SmolLM2-135M)."""
    rounding = {}
    for name, path in (("f16", smollm2_f16), ("q4_1", smollm2_q4_1), ("q4_k_m", smollm2_q4_k_m)):
        with make_engine(path) as e:
            toks = e.tokenize("The ocean is a vast body of salt water that covers most of the planet, and")
            rounding[name] = e.batch_rounding(toks)
            assert rounding[name] == e.batch_rounding(toks), "the same decodes, the same figure"
    assert rounding["f16"] < NEAR_TIE and rounding["q4_1"] < NEAR_TIE < 0.05 < rounding["q4_k_m"], rounding


def test_a_near_tie_is_below_the_fixed_bound_or_the_measured_rounding():
    assert near_tie(0.004) and near_tie(-0.004) and not near_tie(0.04) and not near_tie(None)
    assert near_tie(0.04, 0.2) and not near_tie(0.4, 0.2) and not near_tie(0.04, 0.001)


@pytest.mark.slow
def test_a_k_quant_target_parts_at_its_own_batch_rounding(smollm2_q4_k_m, smollm2_q4_1):
    """Speculation on a Q4_K_M target parts from the target alone where its batched decodes
    rank the two best tokens otherwise: compare names it a near-tie with the rounding measured
    there (the fixed bound, right for F16 weights, would call it DIFFERENT). Verify batches of
    9 tokens: on an AVX-512/AMX CPU batches of 5 went through the one-token kernels and parted
    nowhere in 10 prompts x 128 tokens, while batches of 9 parted in 7 of them."""
    with make_engine(smollm2_q4_k_m, smollm2_q4_1, drafter="model", draft_max=8) as e:
        parted = None
        for text in ("Once upon a time", "The ocean is", "def fib(n):", "List three colors:"):
            res = compare(e, e.tokenize(text), run_spec(e, sampling=GREEDY, max_tokens=128))
            if not res.identical and res.gap_at_difference is not None:
                parted = res
                break
        assert parted is not None, "no prompt parted"
        assert parted.batch_rounding is not None and parted.batch_rounding > NEAR_TIE
        assert near_tie(parted.gap_at_difference, parted.batch_rounding), parted.gap_at_difference
        assert "near-tie" in parted.outputs_line() and "on this model" in parted.outputs_line()
        assert parted.to_dict()["batch_rounding"] == parted.batch_rounding
