from types import SimpleNamespace

import pytest
import torch

from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout.functional import (
    completion_mask,
    concat_rollouts,
    encode_prompts,
    eos_token_ids,
    group_rows,
    select_groups,
    select_rows,
    slice_rows,
)
from lit_grpo.types import SamplingParams


def _with_eos(policy_eos, tokenizer_eos):
    return SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=policy_eos)), SimpleNamespace(
        eos_token_id=tokenizer_eos)


@pytest.fixture(scope="module")
def engine(sft_model_path):
    eng = HFGenerateEngine()
    eng.bind(load_policy(sft_model_path), load_tokenizer(sft_model_path))
    return eng


PROMPTS = ["1+2=", "37+45=", "99+99="]


def test_shapes_groups_and_padding(engine):
    torch.manual_seed(0)
    r = engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=5))
    assert len(r) == 12 and r.group_size == 4 and len(r.texts) == 12
    assert r.completion_ids.shape == r.completion_mask.shape == r.logprobs.shape
    assert r.completion_ids.shape[1] <= 5
    tok = engine.tokenizer
    # prompts are left padded, group-major: rows 4i..4i+3 hold prompt i
    for i, prompt in enumerate(PROMPTS):
        for j in range(4):
            row = r.prompt_ids[4 * i + j][r.prompt_mask[4 * i + j]]
            assert tok.decode(row) == prompt
    assert not r.prompt_mask[0, 0]  # "1+2=" is shorter than "37+45=": padded on the left
    # completions: the mask covers tokens up to and including the first EOS, padding after it
    for row in range(12):
        ids, mask = r.completion_ids[row], r.completion_mask[row]
        n = int(mask.sum())
        assert mask[:n].all() and not mask[n:].any()
        assert (ids[n:] == tok.pad_token_id).all()
        eos = (ids[:n] == tok.eos_token_id).nonzero().flatten().tolist()
        assert eos in ([], [n - 1])
        assert bool(r.truncated[row]) == (eos == [])
        assert r.texts[row] == tok.decode(ids[:n], skip_special_tokens=True)
    assert torch.all(r.logprobs[~r.completion_mask] == 0) and torch.all(r.logprobs[r.completion_mask] <= 0)


def test_sampling_logprobs_match_the_training_forward(engine):
    torch.manual_seed(1)
    r = engine.generate(PROMPTS, 3, SamplingParams(temperature=0.7, max_new_tokens=6))
    with torch.no_grad():
        logp, _ = sequence_logprobs(engine.policy, r, temperature=0.7)
    torch.testing.assert_close(logp * r.completion_mask, r.logprobs, atol=1e-4, rtol=1e-4)


def test_greedy_is_deterministic_and_answers(engine):
    a = engine.generate(PROMPTS, 2, SamplingParams(temperature=0.0, max_new_tokens=6))
    b = engine.generate(PROMPTS, 1, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert a.texts[0::2] == a.texts[1::2] == b.texts


def test_truncation_is_flagged(engine):
    r = engine.generate(["12+34="], 2, SamplingParams(max_new_tokens=1))
    assert r.completion_ids.shape[1] == 1 and r.truncated.all() and r.completion_mask.all()


def test_generation_in_chunks_gives_the_same_form(engine, sft_model_path):
    chunked = HFGenerateEngine(batch_size=2)
    chunked.bind(engine.policy, engine.tokenizer)
    r = chunked.generate(PROMPTS, 3, SamplingParams(temperature=0.0, max_new_tokens=6))
    ref = engine.generate(PROMPTS, 3, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert r.texts == ref.texts and len(r) == 9


def test_engine_validates_options_and_binding():
    with pytest.raises(ValueError, match="batch_size"):
        HFGenerateEngine(batch_size=0)
    with pytest.raises(RuntimeError, match="bind"):
        HFGenerateEngine().generate(["1+1="], 1, SamplingParams())


def test_completion_mask_helper():
    ids = torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8], [2, 0, 0, 0]])
    mask, truncated = completion_mask(ids, 2)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


@pytest.mark.parametrize(("policy_eos", "tokenizer_eos", "expected"), [
    (0, 5, [0]),  # an EOS id of 0 is an id, not a missing one
    (None, 0, [0]),
    ([2, 7], 5, [2, 7]),
    (None, None, []),  # no EOS at all: no [None]
])
def test_eos_ids_come_from_the_generation_config_then_the_tokenizer(policy_eos, tokenizer_eos, expected):
    assert eos_token_ids(*_with_eos(policy_eos, tokenizer_eos)) == expected


def test_without_eos_ids_every_completion_runs_to_the_end():
    mask, truncated = completion_mask(torch.tensor([[0, 3, 0], [4, 4, 4]]), [])
    assert mask.all() and truncated.all()
    mask, truncated = completion_mask(torch.tensor([[5, 0, 3], [4, 4, 4]]), [0])
    assert mask.tolist() == [[True, True, False], [True, True, True]] and truncated.tolist() == [False, True]


def test_the_engine_encodes_prompts_with_the_shared_encoder(engine):
    ids, mask = encode_prompts(engine.tokenizer, PROMPTS)
    r = engine.generate(PROMPTS, 2, SamplingParams(0.0, max_new_tokens=2))
    assert torch.equal(r.prompt_ids, ids.repeat_interleave(2, 0)) and torch.equal(r.prompt_mask, mask.repeat_interleave(2, 0))
    assert engine.eos_ids() == [engine.tokenizer.eos_token_id]


def test_select_concat_and_slice(engine):
    torch.manual_seed(0)
    a = engine.generate(["1+2=", "3+4="], 2, SamplingParams(max_new_tokens=3))
    b = engine.generate(["10+20="], 2, SamplingParams(max_new_tokens=5))
    both = concat_rollouts([a, b], engine.tokenizer.pad_token_id)
    assert len(both) == 6 and both.texts == a.texts + b.texts
    picked = select_groups(both, [2, 0])
    assert picked.texts == b.texts + a.texts[:2]
    mb = slice_rows(both, 4, 6)
    assert mb.texts == b.texts and mb.prompt_mask.all(-1).any()
    torch.testing.assert_close(mb.logprobs.sum(), b.logprobs.sum())
    rows = select_rows(both, [5, 0, 3])  # any order, groups not kept; the group size stays
    assert rows.texts == [both.texts[5], both.texts[0], both.texts[3]] and rows.group_size == 2
    torch.testing.assert_close(rows.completion_ids, both.completion_ids[[5, 0, 3]])
    assert group_rows([2, 0], 2).tolist() == [4, 5, 0, 1]


def test_a_prompt_whose_completion_would_pass_the_context_is_refused(engine):
    context = engine.max_sequence_length()  # 256 for the committed policy: one token per character
    added = len(encode_prompts(engine.tokenizer, ["1"])[0][0]) - 1  # tokens the tokenizer adds to a prompt
    fits = "1" * (context - 8 - added)  # with max_new_tokens=8 it ends exactly at the context
    with pytest.raises(ValueError, match=rf"1 of 2 prompts leave no room for max_new_tokens=8 in the model's "
                                         rf"{context}-token context .* prompt 1 of the batch, has {context - 7} tokens"):
        engine.generate(["1+2=", fits + "1"], 2, SamplingParams(max_new_tokens=8))
    assert len(engine.generate([fits], 1, SamplingParams(max_new_tokens=8))) == 1


def test_a_policy_with_non_finite_weights_stops_sampling_with_a_lit_grpo_error(sft_model_path):
    eng = HFGenerateEngine(shared_prefill=False)
    policy = load_policy(sft_model_path)
    with torch.no_grad():
        policy.lm_head.weight.fill_(float("nan"))  # a diverged run: every logit NaN
    eng.bind(policy, load_tokenizer(sft_model_path))
    with pytest.raises(FloatingPointError, match="next-token probabilities are not finite .* lower optim.lr"):
        eng.generate(PROMPTS, 2, SamplingParams(max_new_tokens=4))
