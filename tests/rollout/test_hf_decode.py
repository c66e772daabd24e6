"""The HF engine's own decoding loop (``decoder="own"``): with ``shrink=False`` and ``sampler="multinomial"``
(:data:`GENERATES`) the same samples as ``generate`` from the same seed; with ``shrink`` or ``sampler="inverse_cdf"``
(the defaults) log-probs of the training forward and the same distribution of samples."""

import functools
import logging
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import lit_grpo.rollout.decode as decode_mod
from lit_grpo.cli import LitGRPOCLI
from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.lora import LoraSettings, apply_lora, base_model
from lit_grpo.models.tiny import char_tokenizer, tiny_config
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout.decode import decode, filtered_scores
from lit_grpo.rollout.functional import encode_prompts
from lit_grpo.rollout.hf import GENERATE_DRAWS
from lit_grpo.types import SamplingParams

PROMPTS = ["1+2=", "37+45=", "99+9="]  # 4 and 6 characters: left padding in the batch
STEPS = 10
ROOT = Path(__file__).resolve().parents[2]
#: The own loop's settings that draw ``generate``'s tokens from the same seed (the defaults draw other samples)
GENERATES = GENERATE_DRAWS


def _policy(eos_bias: float = 2.0, keep: dict[int, float] | None = None, device: str = "cpu"):
    """A random tiny Qwen2 with a bias on its head: ``eos_bias`` on EOS (about one chance in six per token at 2.0,
    so completions end at every position), and with ``keep`` (token -> bias) every token but EOS and those made
    negligible (bias -20); on ``device`` (tests/gpu runs these checks on CUDA)."""
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    policy = AutoModelForCausalLM.from_config(tiny_config(tokenizer, "tiny")).float()
    policy.generation_config.eos_token_id = tokenizer.eos_token_id
    bias = torch.zeros(policy.config.vocab_size)
    if keep is not None:
        bias.fill_(-20.0)[list(keep)] = torch.tensor(list(keep.values()))
        bias[tokenizer.eos_token_id] = 0.0
    bias[tokenizer.eos_token_id] += eos_bias
    policy.lm_head.bias = torch.nn.Parameter(bias)
    policy.eval()
    return policy.to(device), tokenizer


@pytest.fixture(scope="module")
def tiny():
    return _policy()


def _generate(policy, tokenizer, sampling, seed=0, n=8, prompts=PROMPTS, **options):
    engine = HFGenerateEngine(**options)
    engine.bind(policy, tokenizer)
    torch.manual_seed(seed)
    return engine.generate(prompts, n, sampling)


def logprob_tolerance(policy, sampling: SamplingParams, logits_scale: float = 4.0) -> float:
    """How far two float32 forwards of the same tokens may put a log-prob apart when they differ only in the order
    of their sums (another batch width, cache layout or sequence length picks other kernels).

    A float32 dot product of length K summed in any order is within K * u of the exact value, relative to the sum
    of its terms' magnitudes (u = 2**-24, the unit roundoff), so two orders are within 2 * K * u. A token's logit
    is a chain of such sums: per layer the q/k/v projections (K = hidden), the attention scores (head size), the
    weighted sum of values (at most prompt + new tokens), o_proj (hidden), gate/up (hidden) and down
    (intermediate), then the head (hidden); RMS norms keep the activations near unit scale, so the relative errors
    add along the chain. A log-softmax moves by at most twice the largest logit change, and the logits of these
    tiny models stay within ``logits_scale`` in magnitude (under 3 with the EOS bias; the temperature divides them,
    so 1 / temperature more). This worst case is far above what rounding does in practice, and far below what a
    wrong temperature, position or cache row does (tenths).
    """
    c = policy.config
    head = c.hidden_size // c.num_attention_heads
    positions = 8 + sampling.max_new_tokens
    chain = c.num_hidden_layers * (4 * c.hidden_size + head + positions + c.intermediate_size) + c.hidden_size
    return 2 * (2 * chain * 2**-24) * logits_scale / (sampling.temperature or 1.0)


class CacheKinds:
    """The ``(rows, cache class)`` of each forward of ``module`` inside the block: the own loop's cache is a
    ``BufferCache``, ``generate``'s a ``DynamicCache``."""

    def __init__(self, module):
        self.module, self.calls = module, []

    def __enter__(self):
        def record(module, args, kwargs):
            self.calls.append((kwargs["input_ids"].shape[0], type(kwargs.get("past_key_values")).__name__))

        self.handle = self.module.register_forward_pre_hook(record, with_kwargs=True)
        return self.calls

    def __exit__(self, *exc):
        self.handle.remove()


SAMPLINGS = [SamplingParams(temperature=t, top_p=p, top_k=k, max_new_tokens=STEPS)
             for t, p, k in [(0.0, 1.0, 0), (0.7, 1.0, 0), (1.0, 1.0, 0), (1.5, 1.0, 0), (1.0, 0.8, 0), (1.0, 1.0, 5),
                             (0.7, 0.9, 7)]]


@pytest.mark.parametrize("shared_prefill", [True, False])
@pytest.mark.parametrize("sampling", SAMPLINGS, ids=lambda s: f"t{s.temperature}-p{s.top_p}-k{s.top_k}")
def test_without_shrink_the_same_samples_as_generate(tiny, sampling, shared_prefill):
    policy, tokenizer = tiny
    reference = _generate(policy, tokenizer, sampling, decoder="generate", shared_prefill=shared_prefill)
    with CacheKinds(policy) as calls:
        own = _generate(policy, tokenizer, sampling, decoder="own", shared_prefill=shared_prefill, **GENERATES)
    if shared_prefill:  # each distinct prompt prefilled once, then the own loop on every row, none leaving
        assert calls.pop(0) == (3, "DynamicCache")
    assert calls and all(call == (24, "BufferCache") for call in calls)
    assert torch.equal(own.completion_ids, reference.completion_ids) and own.texts == reference.texts
    assert torch.equal(own.completion_mask, reference.completion_mask)
    assert torch.equal(own.truncated, reference.truncated)
    torch.testing.assert_close(own.logprobs, reference.logprobs, rtol=0,
                               atol=logprob_tolerance(policy, sampling))
    if sampling.temperature:  # really sampled, rows ending at different positions
        assert len(set(own.texts)) > 3 and len(set(own.completion_mask.sum(-1).tolist())) > 2


def test_eos_at_every_position_and_in_chunks(tiny):
    policy, tokenizer = tiny
    sampling = SamplingParams(temperature=1.0, max_new_tokens=STEPS)
    ends = set()
    for seed in range(3):
        reference = _generate(policy, tokenizer, sampling, seed=seed, n=16, decoder="generate", batch_size=20)
        own = _generate(policy, tokenizer, sampling, seed=seed, n=16, decoder="own", batch_size=20, **GENERATES)
        assert torch.equal(own.completion_ids, reference.completion_ids)
        torch.testing.assert_close(own.logprobs, reference.logprobs, rtol=0,
                                   atol=logprob_tolerance(policy, sampling))
        ends |= set((reference.completion_mask.sum(-1)[~reference.truncated] - 1).tolist())  # where EOS came
    assert ends == set(range(STEPS))  # completions ended at every position, the last one too


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lora_folded_the_same_samples_as_generate(temperature):
    policy, tokenizer = _policy()
    policy = apply_lora(policy, LoraSettings(r=4, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    with torch.no_grad():  # adapters that change the forward
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=STEPS)
    reference = _generate(policy, tokenizer, sampling, decoder="generate", merge_lora=True)
    with CacheKinds(base_model(policy)) as calls:
        own = _generate(policy, tokenizer, sampling, decoder="own", merge_lora=True, **GENERATES)
    assert calls.pop(0) == (3, "DynamicCache")  # the shared prompt prefill, then the own loop
    assert calls and all(kind == "BufferCache" for _, kind in calls)
    assert torch.equal(own.completion_ids, reference.completion_ids)
    torch.testing.assert_close(own.logprobs, reference.logprobs, rtol=0, atol=logprob_tolerance(policy, sampling))
    with torch.no_grad():  # the unfolded adapters' forward, as the trainer runs it
        logp, _ = sequence_logprobs(policy, own, temperature=temperature or 1.0)
    torch.testing.assert_close(logp * own.completion_mask, own.logprobs, rtol=0,
                               atol=logprob_tolerance(policy, sampling))


@pytest.mark.parametrize("sampler", ["multinomial", "inverse_cdf"])
@pytest.mark.parametrize("sampling", [SamplingParams(temperature=1.0, max_new_tokens=STEPS),
                                      SamplingParams(temperature=0.7, top_p=0.9, top_k=7, max_new_tokens=STEPS)],
                         ids=["t1", "t0.7-p0.9-k7"])
def test_with_shrink_finished_rows_leave_and_logprobs_are_the_training_forwards(tiny, sampling, sampler):
    policy, tokenizer = tiny
    with CacheKinds(policy) as calls:
        r = _generate(policy, tokenizer, sampling, n=16, decoder="own", shrink=True, sampler=sampler)
    assert calls.pop(0) == (3, "DynamicCache")  # the shared prompt prefill
    rows = [n for n, _ in calls]
    still = [int((r.completion_mask.sum(-1) > t).sum()) for t in range(r.completion_ids.shape[1])]
    assert rows == still and rows[0] == 48 and rows[-1] < 48  # each forward runs only the unfinished rows
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy, r, temperature=sampling.temperature)
    torch.testing.assert_close(logp * r.completion_mask, r.logprobs, rtol=0, atol=logprob_tolerance(policy, sampling))
    assert torch.all(r.logprobs[~r.completion_mask] == 0)
    assert set(r.completion_ids[~r.completion_mask].tolist()) == {tokenizer.pad_token_id}


def test_keep_rows_moves_the_last_unfinished_rows_into_the_finished_rows_places():
    """A shrink copies only the rows that move, into the same buffers: each kept row holds its own keys and values
    (the filled part), and the returned order names it."""
    layers, n, heads, length, size = 2, 8, 3, 5, 4
    cache = decode_mod.BufferCache(layers, capacity=length + 3)
    before = []
    for _ in range(layers):
        keys, values = torch.randn(n, heads, length, size), torch.randn(n, heads, length, size)
        before.append((keys, values))
    for layer, (keys, values) in zip(cache.layers, before, strict=True):
        layer.update(keys, values)
    storage = [layer.key_buffer.data_ptr() for layer in cache.layers]
    stay = torch.tensor([True, False, True, False, False, True, True, True])  # 5 stay: rows 1, 3, 4 leave
    order = cache.keep_rows(stay)
    assert order.tolist() == [0, 5, 2, 6, 7]  # rows 5, 6, 7 (after the first 5) take the places of 1, 3, 4
    for layer, (keys, values), ptr in zip(cache.layers, before, storage, strict=True):
        assert layer.key_buffer.data_ptr() == ptr and layer.keys.shape == (5, heads, length, size)
        assert torch.equal(layer.keys, keys[order]) and torch.equal(layer.values, values[order])
    layer = cache.layers[0]
    new_keys = torch.randn(5, heads, 1, size)
    keys, _ = layer.update(new_keys, torch.randn(5, heads, 1, size))  # the next token goes on after the filled part
    assert keys.shape == (5, heads, length + 1, size) and torch.equal(keys[:, :, -1:], new_keys)
    assert torch.equal(keys[:, :, :length], before[0][0][order])
    assert cache.keep_rows(torch.ones(5, dtype=torch.bool)).tolist() == list(range(5))  # nothing leaves


def test_grouped_heads_shared_inside_sdpa_give_transformers_bits_and_the_config_is_set_back(tiny):
    """While the loop decodes, an ``sdpa`` model with grouped-query heads attends with ``gqa_sdpa_attention`` (its
    output is transformers' ``sdpa`` output bit for bit, with a padding mask); its configuration reads ``sdpa``
    again afterwards, also when the forward raises."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    policy, tokenizer = tiny
    attention = policy.model.layers[0].self_attn
    assert attention.num_key_value_groups == 2 and policy.config._attn_implementation == "sdpa"
    torch.manual_seed(0)
    n, heads, kv_heads, size = 5, policy.config.num_attention_heads, policy.config.num_key_value_heads, 32
    for length, queries in [(9, 1), (9, 9)]:  # a decoding step, a prompt's forward
        query = torch.randn(n, heads, queries, size)
        key, value = torch.randn(n, kv_heads, length + 4, size)[:, :, :length], torch.randn(n, kv_heads, length, size)
        mask = torch.ones(n, 1, queries, length, dtype=torch.bool).tril(length - queries)
        mask[:2, :, :, :3] = False  # left padding
        if queries > 1:
            mask[:2, :, :3, :] = True  # the padding's own queries attend somewhere (no row of -inf only)
        ours, _ = decode_mod.gqa_sdpa_attention(attention, query, key, value, mask, scaling=size**-0.5)
        theirs, _ = sdpa_attention_forward(attention, query, key, value, mask, scaling=size**-0.5)
        assert torch.equal(ours, theirs)
    seen = []
    handle = attention.register_forward_pre_hook(lambda *_: seen.append(policy.config._attn_implementation))
    try:
        _generate(policy, tokenizer, SamplingParams(temperature=1.0, max_new_tokens=3), decoder="own")
    finally:
        handle.remove()
    assert seen[0] == "sdpa" and set(seen[1:]) == {decode_mod.GQA_SDPA}  # the shared prompt prefill, then the loop
    assert policy.config._attn_implementation == "sdpa"

    def fail(*_):
        raise RuntimeError("a forward that fails")

    handle = attention.register_forward_pre_hook(fail)
    ids, mask = encode_prompts(tokenizer, PROMPTS)
    try:
        with pytest.raises(RuntimeError, match="a forward that fails"):
            decode(policy, ids, mask, SamplingParams(temperature=1.0, max_new_tokens=3), [tokenizer.eos_token_id],
                   tokenizer.pad_token_id)
    finally:
        handle.remove()
    assert policy.config._attn_implementation == "sdpa"


def _chi_square_p(a: Counter, b: Counter, min_count: int = 20) -> tuple[float, int]:
    """p-value and degrees of freedom of the chi-square test that the samples ``a`` and ``b`` (outcome counts)
    come from one distribution; outcomes seen fewer than ``min_count`` times in all are pooled into one."""
    common = [k for k in a.keys() | b.keys() if a[k] + b[k] >= min_count]
    rare = [k for k in a.keys() | b.keys() if a[k] + b[k] < min_count]
    table = torch.tensor([[a[k] for k in common] + [sum(a[k] for k in rare)],
                          [b[k] for k in common] + [sum(b[k] for k in rare)]], dtype=torch.float64)
    table = table[:, table.sum(0) > 0]  # [2, K]
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    statistic = ((table - expected) ** 2 / expected).sum()
    dof = table.shape[1] - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), statistic / 2)), dof


@pytest.mark.parametrize("options", [{"shrink": True, "sampler": "multinomial"},
                                     {"shrink": False, "sampler": "inverse_cdf"},
                                     {"shrink": True, "sampler": "inverse_cdf"}], ids=["shrink", "cdf", "shrink-cdf"])
def test_with_shrink_or_inverse_cdf_the_samples_follow_generates_distribution(options):
    """Whole completions of at most 4 tokens over three likely tokens (EOS, "a", "b": 1 + 2 + 4 + 8 + 16 outcomes
    per prompt), of two prompts, 8000 from each engine, compared by a chi-square test at alpha = 1e-3. Fixed seeds,
    so the outcome is the same at every run (p = 0.69 with shrink, 34 degrees of freedom); sampling at a
    temperature 10% off in the shrinking loop fails it (p = 2e-6)."""
    a, b = char_tokenizer().convert_tokens_to_ids(["a", "b"])
    policy, tokenizer = _policy(eos_bias=0.0, keep={a: 1.5, b: 0.0})  # spread logits: the temperature matters
    sampling = SamplingParams(temperature=0.7, max_new_tokens=4)
    counts = {}
    for decoder, given, seed in [("generate", {}, 1), ("own", options, 2)]:
        r = _generate(policy, tokenizer, sampling, seed=seed, n=4000, prompts=["1+2=", "x"], decoder=decoder,
                      **given)
        counts[decoder] = Counter((row // 4000, *ids[m].tolist()) for row, (ids, m) in
                                  enumerate(zip(r.completion_ids, r.completion_mask, strict=True)))
    p, dof = _chi_square_p(counts["generate"], counts["own"])
    assert dof >= 20  # enough outcomes for the test to see a changed distribution
    assert p > 1e-3, f"p = {p:.2e} over {dof} degrees of freedom"


def test_inverse_cdf_draws_each_token_at_its_probability_and_never_one_of_probability_zero():
    """200,000 draws from rows of one distribution with zeros at both ends and inside, and its tail of 1e-3 of the
    mass: a chi-square goodness-of-fit test against the probabilities at alpha = 1e-3 (fixed seed, so the same
    outcome at every run); a row whose mass is all on one token draws that token."""
    probs = torch.tensor([0.0, 0.5, 0.0, 0.299, 0.2, 0.001, 0.0])  # [V]
    torch.manual_seed(0)
    drawn = decode_mod.inverse_cdf(probs.expand(200_000, -1))  # [n]
    counts = torch.bincount(drawn, minlength=probs.numel()).double()
    assert counts[probs == 0].sum() == 0
    expected = probs[probs > 0].double() * drawn.numel()
    statistic = ((counts[probs > 0] - expected) ** 2 / expected).sum()
    dof = int((probs > 0).sum()) - 1
    p = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), statistic / 2))
    assert p > 1e-3, f"p = {p:.2e}"
    one_hot = torch.zeros(3, 5)
    one_hot[0, 0], one_hot[1, 4], one_hot[2, 2] = 1.0, 1.0, 1.0
    assert decode_mod.inverse_cdf(one_hot).tolist() == [0, 4, 2]
    with pytest.raises(RuntimeError, match="probability tensor contains"):  # as multinomial: a diverged policy
        decode_mod.inverse_cdf(torch.full((2, 5), float("nan")))


def test_the_loop_returns_generates_sequences_pads_included(tiny):
    """The loop's own output, before the engine masks anything: tokens after a row's EOS are pad tokens, and the
    steps run end where generate's do."""
    policy, tokenizer = tiny
    ids, mask = encode_prompts(tokenizer, PROMPTS)
    ids, mask = ids.repeat_interleave(8, 0), mask.repeat_interleave(8, 0).long()  # [24, Tp]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=STEPS)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    for seed in range(3):
        torch.manual_seed(seed)
        expected = policy.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                   max_new_tokens=STEPS, pad_token_id=pad, eos_token_id=eos)  # [N, Tp + T]
        torch.manual_seed(seed)
        with torch.no_grad():
            tokens, logprobs = decode(policy, ids, mask, sampling, [eos], pad)
        assert torch.equal(tokens, expected[:, ids.shape[1]:]) and logprobs.shape == tokens.shape
        after = (tokens == eos).long().cumsum(-1) - (tokens == eos).long() > 0  # [N, T] after the first EOS
        assert after.any() and (tokens[after] == pad).all()


def test_filtered_scores_are_the_transformers_processors():
    torch.manual_seed(0)
    scores = torch.randn(64, 100) * 3
    scores[:, 10:14] = scores[:, 9:10]  # ties at the top-k and top-p boundaries
    for temperature, top_k, top_p in [(0.7, 0, 1.0), (1.0, 5, 1.0), (1.3, 0, 0.8), (0.5, 11, 0.6), (1.0, 200, 0.3)]:
        expected = scores.clone()
        for warper in ([TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []) + \
                ([TopKLogitsWarper(top_k)] if top_k else []) + ([TopPLogitsWarper(top_p)] if top_p < 1 else []):
            expected = warper(None, expected)
        assert torch.equal(filtered_scores(scores, temperature, top_k, top_p), expected)


def _bad_forward(policy):
    forward = policy.forward

    @functools.wraps(forward)
    def no_cache(*args, **kwargs):  # a model that drops the cache it is given
        return forward(*args, **{**kwargs, "past_key_values": None})

    policy.forward = no_cache
    return policy


@pytest.mark.parametrize(("change", "expected", "options"), [
    (lambda p: setattr(p.generation_config, "repetition_penalty", 1.3) or p, "repetition_penalty=1.3", {}),
    (lambda p: p, "use_cache=False", {"use_cache": False}),
    (_bad_forward, "not the cache it was given", {}),
])
def test_models_the_loop_cannot_serve_generate_saying_why_once(change, expected, options, caplog):
    policy, tokenizer = _policy()
    policy = change(policy)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=STEPS)
    reference = _generate(policy, tokenizer, sampling, decoder="generate", **options)
    decode_mod.FALLBACK.forget_logged()
    with caplog.at_level(logging.INFO, logger="lit_grpo.rollout.decode"), CacheKinds(policy) as calls:
        own = _generate(policy, tokenizer, sampling, decoder="own", shrink=True, **options)
        _generate(policy, tokenizer, sampling, decoder="own", **options)
    assert torch.equal(own.completion_ids, reference.completion_ids)  # generate's samples: shrink does not apply
    assert not any(kind == "BufferCache" for _, kind in calls[1:])  # only a first probing forward, if any
    messages = [r.getMessage() for r in caplog.records if "decoder='own'" in r.getMessage()]
    assert len(messages) == 1 and expected in messages[0]


def test_the_decoder_options_on_the_command_line_and_in_yaml(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.engine=HFGenerateEngine",
                           "--model.engine.init_args.decoder=generate"], run=False)
    assert (cli.model.engine.decoder, cli.model.engine.shrink) == ("generate", False)
    overlay = tmp_path / "engine.yaml"
    overlay.write_text("model:\n  engine:\n    class_path: lit_grpo.HFGenerateEngine\n"
                       "    init_args: {decoder: own, shrink: true, batch_size: 8}\n")
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--config", str(overlay)], run=False)
    assert (cli.model.engine.decoder, cli.model.engine.shrink, cli.model.engine.batch_size) == ("own", True, 8)
    # the defaults: the fastest settings that keep the distribution exact
    assert (HFGenerateEngine().decoder, HFGenerateEngine().shrink, HFGenerateEngine().sampler) == \
        ("own", True, "inverse_cdf")
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.engine=HFGenerateEngine",
                           "--model.engine.init_args.sampler=multinomial",
                           "--model.engine.init_args.shrink=false"], run=False)
    assert (cli.model.engine.sampler, cli.model.engine.shrink) == ("multinomial", False)


def test_an_unknown_decoder_fails_naming_the_option(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(ValueError, match="decoder='vllm'"):
        HFGenerateEngine(decoder="vllm")
    with pytest.raises(ValueError, match="sampler='gumbel'.*multinomial, inverse_cdf"):
        HFGenerateEngine(sampler="gumbel")
    # shrink and sampler are the own loop's: with generate, what runs is generate's (every row, multinomial)
    engine = HFGenerateEngine(decoder="generate")
    assert (engine.shrink, engine.sampler) == (False, "multinomial")
    with pytest.raises(SystemExit):
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.engine=HFGenerateEngine",
                         "--model.engine.init_args.decoder=bogus"], run=False)
    assert "decoder" in capsys.readouterr().err
