import math

import pytest
import torch

from lit_grpo.diagnostics import (
    EMASuccessTracker,
    degeneracy_summary,
    degenerate_groups,
    iid_degeneracy,
    per_prompt_iid_degeneracy,
    starved_fraction,
    unbiased_iid_degeneracy,
)

NAN = math.nan


def test_degenerate_groups_masks():
    rewards = torch.tensor(
        [
            [1.0, 1.0, 1.0, 1.0],  # all correct
            [0.0, 0.0, 0.0, 0.0],  # all wrong
            [1.0, 0.0, 0.0, 0.0],  # mixed
            [1.0, NAN, 1.0, NAN],  # all scorable correct
            [NAN, NAN, NAN, NAN],  # nothing scorable: degenerate, neither
            [NAN, 0.0, NAN, NAN],  # one scorable: degenerate
            [0.5, 0.5, 0.5, 0.5],  # constant non-binary: degenerate, neither
            [1.0, 1.0 - 1e-8, 1.0, 1.0],  # equal within atol (no std == 0 test)
        ],
        dtype=torch.float64,
    )
    m = degenerate_groups(rewards)
    assert m["degenerate"].tolist() == [True, True, False, True, True, True, True, True]
    assert m["all_correct"].tolist() == [True, False, False, True, False, False, False, True]
    assert m["all_wrong"].tolist() == [False, True, False, False, False, True, False, False]
    assert degenerate_groups(rewards, atol=1e-10)["degenerate"][-1].item() is False


def test_degenerate_groups_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\[P, G\]"):
        degenerate_groups(torch.zeros(4))
    with pytest.raises(ValueError, match="atol"):
        degenerate_groups(torch.zeros(2, 2), atol=-1.0)


def test_iid_degeneracy_float_and_tensor():
    assert iid_degeneracy(0.25, 4) == pytest.approx(0.3203125)
    assert iid_degeneracy(0.5, 2) == pytest.approx(0.5)
    p = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    assert torch.allclose(iid_degeneracy(p, 3), torch.tensor([1.0, 0.25, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="G"):
        iid_degeneracy(0.5, 0)


def test_unbiased_iid_degeneracy_golden():
    assert unbiased_iid_degeneracy(16, 4, 4) == pytest.approx(0.272527, abs=1e-6)
    assert iid_degeneracy(4 / 16, 4) == pytest.approx(0.320312, abs=1e-6)  # the biased plug-in
    assert unbiased_iid_degeneracy(16, 0, 4) == 1.0
    assert unbiased_iid_degeneracy(4, 2, 4) == 0.0


def test_unbiased_iid_degeneracy_tensor_matches_exact():
    n, G = 12, 5
    c = torch.arange(n + 1)
    got = unbiased_iid_degeneracy(n, c, G)
    want = torch.tensor([unbiased_iid_degeneracy(n, int(k), G) for k in c], dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-12)


def test_unbiased_iid_degeneracy_is_unbiased():
    # E_c[estimate] over c ~ Bin(n, p) equals f(p) exactly.
    n, G, p = 10, 4, 0.3
    expected = sum(
        math.comb(n, c) * p**c * (1 - p) ** (n - c) * unbiased_iid_degeneracy(n, c, G) for c in range(n + 1)
    )
    assert expected == pytest.approx(iid_degeneracy(p, G), abs=1e-12)


def test_unbiased_iid_degeneracy_errors():
    with pytest.raises(ValueError, match="n >= G"):
        unbiased_iid_degeneracy(3, 1, 4)
    with pytest.raises(ValueError, match="count c"):
        unbiased_iid_degeneracy(8, 9, 4)
    with pytest.raises(ValueError, match="counts c"):
        unbiased_iid_degeneracy(8, torch.tensor([1, 9]), 4)


def test_summary_heterogeneous_exceeds_pooled_prediction():
    # Half the prompts succeed with p = 0.9, half with p = 0.1: pooled p = 0.5 predicts 2 * 0.5^4,
    # but the true rate is 0.9^4 + 0.1^4 (Jensen). Many groups drawn with a fixed generator.
    gen = torch.Generator().manual_seed(0)
    P, G = 20000, 4
    p = torch.cat([torch.full((P // 2, 1), 0.9), torch.full((P // 2, 1), 0.1)])
    rewards = (torch.rand(P, G, generator=gen) < p).float()
    s = degeneracy_summary(rewards)
    truth = 0.9**4 + 0.1**4
    assert s["pooled_success_rate"] == pytest.approx(0.5, abs=0.01)
    assert s["degenerate_iid_pred"] == pytest.approx(iid_degeneracy(s["pooled_success_rate"], G))
    assert s["degenerate_frac"] == pytest.approx(truth, abs=0.01)
    assert s["degenerate_excess"] > 0.5
    assert s["degenerate_frac"] == pytest.approx(s["all_correct_frac"] + s["all_wrong_frac"])


def test_summary_exact_small_batch():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, NAN]])
    s = degeneracy_summary(rewards)
    assert s["degenerate_frac"] == 0.75
    assert s["all_correct_frac"] == 0.25
    assert s["all_wrong_frac"] == 0.5
    assert s["pooled_success_rate"] == pytest.approx(3 / 7)
    pred = (3 / 7) ** 2 + (4 / 7) ** 2
    assert s["degenerate_iid_pred"] == pytest.approx(pred)
    assert s["degenerate_excess"] == pytest.approx(0.75 - pred)


def test_summary_nothing_scorable_is_nan():
    s = degeneracy_summary(torch.full((2, 3), NAN))
    assert s["degenerate_frac"] == 1.0
    assert math.isnan(s["pooled_success_rate"]) and math.isnan(s["degenerate_excess"])


def test_starved_fraction():
    adv = torch.tensor([[0.0, 0.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    assert starved_fraction(adv) == 0.75
    mask = torch.tensor([[True, True, True, True], [False, False, False, False]])
    assert starved_fraction(adv, mask) == 0.5
    assert starved_fraction(torch.tensor([[1e-12, -1.0]])) == 0.0  # exactly zero only
    with pytest.raises(ValueError, match="mask shape"):
        starved_fraction(adv, mask[:1])


def test_per_prompt_iid_degeneracy_ignores_nan():
    p = torch.tensor([0.9, 0.1, NAN])
    want = (0.9**4 + 0.1**4 + 0.1**4 + 0.9**4) / 2
    assert per_prompt_iid_degeneracy(p, 4) == pytest.approx(want, rel=1e-6)
    assert per_prompt_iid_degeneracy(p[:2], 4) > iid_degeneracy(0.5, 4)  # Jensen
    assert math.isnan(per_prompt_iid_degeneracy(torch.tensor([NAN]), 4))


def test_ema_tracker_update_get_and_state():
    t = EMASuccessTracker(decay=0.5)
    t.update(["a", "b"], torch.tensor([1.0, 0.0]))
    t.update(["a", "c"], [0.0, NAN])  # NaN rate skipped
    got = t.get(["a", "b", "c"])
    assert got[:2].tolist() == [0.5, 0.0]
    assert math.isnan(got[2].item())
    assert len(t) == 2

    fresh = EMASuccessTracker(decay=0.1)
    fresh.load_state_dict(t.state_dict())
    assert fresh.decay == 0.5
    assert fresh.get(["a", "b"]).tolist() == [0.5, 0.0]
    fresh.update(["a"], [1.0])
    assert t.get(["a"]).item() == 0.5  # state was copied, not shared


def test_ema_tracker_validation():
    with pytest.raises(ValueError, match="decay"):
        EMASuccessTracker(decay=1.0)
    with pytest.raises(ValueError, match="same length"):
        EMASuccessTracker().update(["a"], [0.1, 0.2])
