"""Generation with each distinct prompt prefilled once (``shared_prefill``): the plain path's samples and
log-probs, with only the last prompt token and the new tokens computed per row."""

import functools
import logging

import pytest
import torch
from transformers import AutoModelForCausalLM

from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.lora import LoraSettings, apply_lora, base_model
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.models.tiny import char_tokenizer, tiny_config
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout import prefill as prefill_mod
from lit_grpo.types import SamplingParams

PROMPTS = ["1+2=", "37+45=", "99+9=", "5+55="]  # 4 and 6 characters: left padding in the batch
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)
SAMPLED = SamplingParams(temperature=0.8, max_new_tokens=6)


@pytest.fixture(scope="module")
def sft(sft_model_path):
    return load_policy(sft_model_path), load_tokenizer(sft_model_path)


def _generate(policy, tokenizer, sampling, shared, n=4, seed=0, prompts=PROMPTS, **options):
    engine = HFGenerateEngine(shared_prefill=shared, **options)
    engine.bind(policy, tokenizer)
    torch.manual_seed(seed)
    return engine.generate(prompts, n, sampling)


class ForwardWidths:
    """The ``(rows, tokens)`` of ``input_ids`` at each forward of ``module`` inside the block."""

    def __init__(self, module):
        self.module, self.widths = module, []

    def __enter__(self):
        def record(module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.widths.append(tuple(ids.shape))

        self.handle = self.module.register_forward_pre_hook(record, with_kwargs=True)
        return self.widths

    def __exit__(self, *exc):
        self.handle.remove()


def _fresh_log():
    prefill_mod.FALLBACK.forget_logged()


def test_greedy_completions_equal_the_plain_path_with_one_prefill_per_prompt(sft):
    policy, tokenizer = sft
    plain = _generate(policy, tokenizer, GREEDY, shared=False)
    with ForwardWidths(policy) as widths:
        shared = _generate(policy, tokenizer, GREEDY, shared=True)
    tp = plain.prompt_ids.shape[1]
    # one forward of the 4 distinct prompts over all but their last token, then generate from the last one
    assert widths[0] == (4, tp - 1) and widths[1] == (16, 1)
    assert all(w[1] == 1 for w in widths[1:])
    assert torch.equal(shared.prompt_ids, plain.prompt_ids) and torch.equal(shared.prompt_mask, plain.prompt_mask)
    assert not plain.prompt_mask[0, 0]  # the short prompts are left padded
    assert torch.equal(shared.completion_ids, plain.completion_ids) and shared.texts == plain.texts
    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=1e-5, rtol=0)


def test_sampled_completions_and_logprobs_equal_the_plain_path_and_the_training_forward(sft):
    policy, tokenizer = sft
    plain = _generate(policy, tokenizer, SAMPLED, shared=False, seed=3)
    shared = _generate(policy, tokenizer, SAMPLED, shared=True, seed=3)
    # prefilling draws no random numbers, so the same seed samples the same tokens (the logits agree to ~1e-6)
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    assert len(set(shared.texts)) > 2  # really sampled
    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy, shared, temperature=SAMPLED.temperature)
    torch.testing.assert_close(logp * shared.completion_mask, shared.logprobs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("batch_size", [3, 5, 16])
def test_chunks_that_split_groups(sft, batch_size):
    policy, tokenizer = sft
    plain = _generate(policy, tokenizer, GREEDY, shared=False)
    with ForwardWidths(policy) as widths:
        shared = _generate(policy, tokenizer, GREEDY, shared=True, batch_size=batch_size)
    assert shared.texts == plain.texts and torch.equal(shared.completion_ids, plain.completion_ids)
    tp = plain.prompt_ids.shape[1]
    # rows 0..15 hold prompts 0,0,0,0,1,...: a chunk prefills the distinct prompts it holds, unless none repeats
    chunks = [range(start, min(start + batch_size, 16)) for start in range(0, 16, batch_size)]
    distinct = [len({row // 4 for row in rows}) for rows in chunks]
    assert [w[0] for w in widths if w[1] == tp - 1] == [u for u, rows in zip(distinct, chunks, strict=True)
                                                        if u < len(rows)]
    assert [w[0] for w in widths if w[1] == tp] == [len(rows) for u, rows in zip(distinct, chunks, strict=True)
                                                    if u == len(rows)]
    sampled = _generate(policy, tokenizer, SAMPLED, shared=True, batch_size=batch_size, seed=1)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy, sampled, temperature=SAMPLED.temperature)
    torch.testing.assert_close(logp * sampled.completion_mask, sampled.logprobs, atol=1e-4, rtol=1e-4)


def test_a_chunk_without_repeated_prompts_generates_the_plain_way(sft):
    policy, tokenizer = sft
    with ForwardWidths(policy) as widths:
        r = _generate(policy, tokenizer, GREEDY, shared=True, n=1)
    assert widths[0] == (4, r.prompt_ids.shape[1])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lora_folded_generation(sft_model_path, temperature):
    torch.manual_seed(0)
    policy = apply_lora(load_policy(sft_model_path),
                        LoraSettings(r=4, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    with torch.no_grad():  # adapters that change the forward
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    tokenizer = load_tokenizer(sft_model_path)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=6)
    plain = _generate(policy, tokenizer, sampling, shared=False, merge_lora=True)
    with ForwardWidths(base_model(policy)) as widths:
        shared = _generate(policy, tokenizer, sampling, shared=True, merge_lora=True)
    assert widths[0][0] == 4 and widths[1] == (16, 1)
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    with torch.no_grad():  # the unfolded adapters' forward
        logp, _ = sequence_logprobs(policy, shared, temperature=sampling.temperature or 1.0)
    torch.testing.assert_close(logp * shared.completion_mask, shared.logprobs, atol=1e-4, rtol=1e-4)


def test_without_the_cache_it_generates_the_plain_way_saying_so_once(sft, caplog):
    policy, tokenizer = sft
    plain = _generate(policy, tokenizer, GREEDY, shared=False, use_cache=False)
    _fresh_log()
    with caplog.at_level(logging.INFO, logger="lit_grpo.rollout.prefill"), ForwardWidths(policy) as widths:
        shared = _generate(policy, tokenizer, GREEDY, shared=True, use_cache=False)
        _generate(policy, tokenizer, GREEDY, shared=True, use_cache=False)
    assert widths[0] == (16, plain.prompt_ids.shape[1])  # every row's whole prompt, no prefill
    assert shared.texts == plain.texts
    messages = [r.getMessage() for r in caplog.records if "shared_prefill" in r.getMessage()]
    assert len(messages) == 1 and "use_cache=False" in messages[0]


def _tiny_policy(**config):
    tokenizer = char_tokenizer()
    cfg = tiny_config(tokenizer, "tiny")
    for key, value in config.items():
        setattr(cfg, key, value)
    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_config(cfg).float()
    policy.generation_config.eos_token_id = tokenizer.eos_token_id
    return policy, tokenizer


def _sliding():
    layers = tiny_config(char_tokenizer(), "tiny").num_hidden_layers
    return _tiny_policy(layer_types=["sliding_attention"] + ["full_attention"] * (layers - 1), sliding_window=4,
                        use_sliding_window=True)


def _static_cache():
    policy, tokenizer = _tiny_policy()
    policy.generation_config.cache_implementation = "static"
    return policy, tokenizer


@pytest.mark.parametrize(("build", "expected"), [(_sliding, "sliding_attention"),
                                                 (_static_cache, "cache_implementation='static'")])
def test_models_it_cannot_serve_generate_the_plain_way_saying_why_once(build, expected, caplog):
    policy, tokenizer = build()
    plain = _generate(policy, tokenizer, GREEDY, shared=False, n=3)
    _fresh_log()
    with caplog.at_level(logging.INFO, logger="lit_grpo.rollout.prefill"), ForwardWidths(policy) as widths:
        shared = _generate(policy, tokenizer, GREEDY, shared=True, n=3)
        _generate(policy, tokenizer, GREEDY, shared=True, n=3)
    assert widths[0] == (12, plain.prompt_ids.shape[1])
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    messages = [r.getMessage() for r in caplog.records if "shared_prefill" in r.getMessage()]
    assert len(messages) == 1 and expected in messages[0]


def test_a_forward_that_fills_no_cache_falls_back_once_and_is_remembered(caplog):
    policy, tokenizer = _tiny_policy()
    forward = policy.forward

    @functools.wraps(forward)
    def no_cache(*args, **kwargs):  # a model that ignores the cache it is given while prefilling
        if kwargs.get("input_ids") is not None and kwargs["input_ids"].shape[1] > 1:
            kwargs = {**kwargs, "past_key_values": None, "use_cache": False}
        return forward(*args, **kwargs)

    policy.forward = no_cache
    plain = _generate(policy, tokenizer, GREEDY, shared=False, n=3)
    _fresh_log()
    with caplog.at_level(logging.INFO, logger="lit_grpo.rollout.prefill"), ForwardWidths(policy) as widths:
        shared = _generate(policy, tokenizer, GREEDY, shared=True, n=3)
        _generate(policy, tokenizer, GREEDY, shared=True, n=3)
    tp = plain.prompt_ids.shape[1]
    prefills = [w for w in widths if w == (4, tp - 1)]
    assert len(prefills) == 1  # tried once, then remembered for this model
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    messages = [r.getMessage() for r in caplog.records if "shared_prefill" in r.getMessage()]
    assert len(messages) == 1 and "NoneType" in messages[0]
