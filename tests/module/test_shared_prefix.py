"""The shared-prefix forward gives the plain path's log-probs, entropy and gradients: each distinct prompt is
encoded once and its completions run against its keys and values."""

import logging

import pytest
import torch
from transformers import AutoModelForCausalLM

from lit_grpo import logprobs as logprobs_mod
from lit_grpo.logprobs import pack_rows, sequence_logprobs, shared_prefix_logprobs
from lit_grpo.lora import LoraSettings, apply_lora
from lit_grpo.models.tiny import char_tokenizer, tiny_config
from lit_grpo.types import Rollouts


def _policy(seed: int = 0, **config) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = tiny_config(char_tokenizer(), "tiny")
    for key, value in config.items():
        setattr(cfg, key, value)
    return AutoModelForCausalLM.from_config(cfg).float()


def _rollouts(prompt_lengths: list[int], group: int, t: int, vocab: int, seed: int = 0) -> Rollouts:
    """Groups of ``group`` completions (random lengths 1..t, right padded) of random prompts of
    ``prompt_lengths`` tokens (left padded), group-major."""
    gen = torch.Generator().manual_seed(seed)
    tp, n = max(prompt_lengths), len(prompt_lengths) * group
    prompt_ids = torch.zeros(n, tp, dtype=torch.long)
    prompt_mask = torch.zeros(n, tp, dtype=torch.bool)
    for g, length in enumerate(prompt_lengths):
        tokens = torch.randint(3, vocab, (length,), generator=gen)
        prompt_ids[g * group : (g + 1) * group, tp - length :] = tokens
        prompt_mask[g * group : (g + 1) * group, tp - length :] = True
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    lengths[0] = t
    completion_mask = torch.arange(t)[None, :] < lengths[:, None]  # [N, T]
    completion_ids = torch.randint(3, vocab, (n, t), generator=gen).masked_fill(~completion_mask, 0)
    return Rollouts(prompt_ids, prompt_mask, completion_ids, completion_mask, torch.zeros(n, t), [""] * n,
                    torch.zeros(n, dtype=torch.bool), group)


def _run(fn, policy, rollouts, temperature=0.7, with_entropy=False, entropy_grad=False, **options):
    """Log-probs and entropy on the completion tokens (0 on padding, which every reader masks out) and the
    gradients of a weighted sum of both (w.r.t. every trainable parameter)."""
    policy.zero_grad(set_to_none=True)
    weights = torch.rand(rollouts.completion_ids.shape, generator=torch.Generator().manual_seed(3))
    logp, entropy = fn(policy, rollouts, temperature, with_entropy=with_entropy, entropy_grad=entropy_grad,
                       **options)
    loss = (logp * weights * rollouts.completion_mask).sum()
    if entropy_grad:
        loss = loss - 0.5 * (entropy * rollouts.completion_mask).sum()
    loss.backward()
    grads = {k: p.grad.clone() for k, p in policy.named_parameters() if p.requires_grad}
    mask = rollouts.completion_mask
    return logp.detach() * mask, None if entropy is None else entropy.detach() * mask, grads


def _assert_same(got, want):
    # float32 rounding: the paths sum the same products in other orders (attention over other key lengths, the
    # gradients summed over rows by index_add_): relative differences of a few 1e-7 per value, far below 1e-5
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=0)
    if want[1] is not None:
        torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=0)
    assert got[2].keys() == want[2].keys() and want[2]
    for name, g in want[2].items():
        rel = (got[2][name] - g).norm() / g.norm().clamp(min=1e-30)
        assert rel <= 1e-5, f"{name}: relative gradient difference {rel:.2e}"


def _count_prompt_rows(policy) -> list[int]:
    """A hook on the embedding recording the rows of each decoder call."""
    calls: list[int] = []
    policy.get_input_embeddings().register_forward_hook(lambda m, a, out: calls.append(tuple(out.shape[:2])))
    return calls


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_logprobs_entropy_and_gradients_equal_the_plain_path(entropy_grad, packed):
    policy = _policy()
    rollouts = _rollouts([9, 4, 6], group=4, t=7, vocab=policy.config.vocab_size)  # left padding differs
    plain = _run(sequence_logprobs, policy, rollouts, with_entropy=True, entropy_grad=entropy_grad)
    calls = _count_prompt_rows(policy)
    shared = _run(shared_prefix_logprobs, policy, rollouts, with_entropy=True, entropy_grad=entropy_grad,
                  packed=packed)
    inputs = (rollouts.completion_mask.sum(-1) - 1).tolist()  # completion tokens that predict the next one
    bins = pack_rows([row // 4 for row in range(12)], inputs, 6)
    # three prompts once, then twelve completions without their last token; packed: end to end in fewer rows
    assert calls == [(3, 9), (len(bins) if packed else 12, 6)]
    assert not packed or len(bins) < 12
    _assert_same(shared, plain)


def test_eager_attention_packs_with_an_additive_mask():
    policy = _policy(_attn_implementation="eager")
    rollouts = _rollouts([5, 8], group=4, t=6, vocab=policy.config.vocab_size, seed=9)
    _assert_same(_run(shared_prefix_logprobs, policy, rollouts, with_entropy=True),
                 _run(sequence_logprobs, policy, rollouts, with_entropy=True))


def test_pack_rows_first_fit_longest_first_within_one_prompt():
    bins = pack_rows(owners=[0, 0, 0, 0, 1, 1], lengths=[5, 2, 3, 0, 4, 4], capacity=5)
    assert bins == [(0, [(0, 0)]), (0, [(2, 0), (1, 3)]), (1, [(4, 0)]), (1, [(5, 0)])]
    for _, rows in bins:  # nothing overlaps or overflows
        ends = [offset + [5, 2, 3, 0, 4, 4][row] for row, offset in rows]
        assert max(ends) <= 5 and sorted(ends) == ends


def test_with_lora_adapters():
    policy = apply_lora(_policy(), LoraSettings(r=4, alpha=8.0))
    with torch.no_grad():  # adapters start at zero; give them weight so every gradient is non-trivial
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    rollouts = _rollouts([5, 11], group=3, t=6, vocab=policy.config.vocab_size, seed=1)
    plain = _run(sequence_logprobs, policy, rollouts, with_entropy=True)
    shared = _run(shared_prefix_logprobs, policy, rollouts, with_entropy=True)
    assert all("lora_" in name for name in plain[2])
    _assert_same(shared, plain)


def test_a_micro_batch_with_part_of_a_group_and_rows_out_of_order():
    policy = _policy()
    rollouts = _rollouts([8, 3, 5], group=4, t=5, vocab=policy.config.vocab_size, seed=2)
    rows = torch.tensor([6, 1, 4, 2, 11, 5])  # two rows of group 0, three of group 1, one of group 2
    part = Rollouts(rollouts.prompt_ids[rows], rollouts.prompt_mask[rows], rollouts.completion_ids[rows],
                    rollouts.completion_mask[rows], rollouts.logprobs[rows], [""] * len(rows),
                    rollouts.truncated[rows], rollouts.group_size)
    plain = _run(sequence_logprobs, policy, part)
    calls = _count_prompt_rows(policy)
    shared = _run(shared_prefix_logprobs, policy, part)
    assert calls[0][0] == 3
    _assert_same(shared, plain)


def test_one_completion_token_and_chunked_head(monkeypatch):
    policy = _policy()
    rollouts = _rollouts([6, 2], group=3, t=1, vocab=policy.config.vocab_size, seed=4)
    _assert_same(_run(shared_prefix_logprobs, policy, rollouts), _run(sequence_logprobs, policy, rollouts))
    rollouts = _rollouts([6, 2], group=3, t=6, vocab=policy.config.vocab_size, seed=4)
    plain = _run(sequence_logprobs, policy, rollouts, with_entropy=True)
    monkeypatch.setattr(logprobs_mod, "MAX_LOGITS_ELEMENTS", 5 * policy.config.vocab_size)
    _assert_same(_run(shared_prefix_logprobs, policy, rollouts, with_entropy=True), plain)


def test_without_gradient_equals_the_plain_path():
    policy = _policy().eval()
    rollouts = _rollouts([7, 3], group=4, t=5, vocab=policy.config.vocab_size, seed=5)
    mask = rollouts.completion_mask
    with torch.no_grad():
        torch.testing.assert_close(shared_prefix_logprobs(policy, rollouts)[0] * mask,
                                   sequence_logprobs(policy, rollouts)[0] * mask, atol=1e-5, rtol=0)


@pytest.mark.parametrize("setting", ["gradient_checkpointing", "sliding_window", "logit_scale"])
def test_settings_it_cannot_serve_fall_back_with_one_message(setting, caplog):
    if setting == "sliding_window":
        layers = tiny_config(char_tokenizer(), "tiny").num_hidden_layers
        policy = _policy(layer_types=["sliding_attention"] + ["full_attention"] * (layers - 1), sliding_window=4,
                         use_sliding_window=True)
    elif setting == "logit_scale":
        policy = _policy(logit_scale=2.0)
    else:
        policy = _policy()
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy.train()
    rollouts = _rollouts([6, 3], group=3, t=4, vocab=policy.config.vocab_size, seed=6)
    logprobs_mod.FALLBACK.forget_logged()
    with caplog.at_level(logging.INFO, logger="lit_grpo.logprobs"):
        plain = _run(sequence_logprobs, policy, rollouts)
        calls = _count_prompt_rows(policy)
        shared = _run(shared_prefix_logprobs, policy, rollouts)
        _run(shared_prefix_logprobs, policy, rollouts)
    assert calls[0] == (6, 10)  # the plain path: prompt and completion per row
    torch.testing.assert_close(shared[0], plain[0], atol=0, rtol=0)
    messages = [r.getMessage() for r in caplog.records if "shared_prefix" in r.getMessage()]
    assert len(messages) == 1
    expected = {"gradient_checkpointing": "gradient checkpointing", "sliding_window": "sliding_attention",
                "logit_scale": "logit_scale"}[setting]
    assert expected in messages[0]


def test_a_decoder_without_a_cache_falls_back_once_and_is_remembered(caplog):
    policy = _policy()
    decoder = policy.get_decoder()
    passes = []

    def no_cache(*args, **kwargs):  # a decoder that cannot return keys and values
        passes.append(kwargs["input_ids"].shape)
        return decoder(*args, **{**kwargs, "use_cache": False})

    policy.get_decoder = lambda: no_cache
    rollouts = _rollouts([5, 3], group=3, t=4, vocab=policy.config.vocab_size, seed=8)
    logprobs_mod.FALLBACK.forget_logged()
    with caplog.at_level(logging.INFO, logger="lit_grpo.logprobs"):
        plain = _run(sequence_logprobs, policy, rollouts)
        shared = _run(shared_prefix_logprobs, policy, rollouts)
        _run(shared_prefix_logprobs, policy, rollouts)
    assert passes == [(2, 5)]  # one prompt pass, then the plain path (the model's own forward) from then on
    torch.testing.assert_close(shared[0], plain[0], atol=0, rtol=0)
    messages = [r.getMessage() for r in caplog.records if "shared_prefix" in r.getMessage()]
    assert len(messages) == 1 and "NoneType" in messages[0]


def test_sharded_policies_fall_back(monkeypatch, caplog):
    policy = _policy()
    rollouts = _rollouts([4, 2], group=2, t=3, vocab=policy.config.vocab_size, seed=7)
    monkeypatch.setattr(logprobs_mod, "is_sharded", lambda module: True)
    logprobs_mod.FALLBACK.forget_logged()
    with caplog.at_level(logging.INFO, logger="lit_grpo.logprobs"):
        shared_prefix_logprobs(policy, rollouts)
    assert any("sharded (FSDP)" in r.getMessage() for r in caplog.records)


def _fit(tmp_path, model, shared: bool, **options):
    import lightning as L

    from tests.helpers import tiny_data, tiny_module, tiny_trainer
    from tests.recording import Record
    from tests.scale.train_tiny import ScriptedEngine, SkewedReward

    L.seed_everything(0)
    module = tiny_module(model, reward=SkewedReward(), engine=ScriptedEngine(), shared_prefix=shared, **options)
    record = Record()
    trainer = tiny_trainer(tmp_path / str(shared), max_steps=2, callbacks=[record])
    trainer.fit(module, datamodule=tiny_data())
    return module, record


@pytest.mark.parametrize("options", [
    {"micro_batch_size": 3, "entropy_coef": 0.01},  # micro-batches with parts of groups
    {"steps_per_generation": 2, "num_iterations": 2, "loss": "beta"},  # frozen old and reference log-probs
])
def test_module_update_equals_the_plain_path(tmp_path, sft_model_path, options, monkeypatch):
    from lit_grpo.losses import PPOClip

    if options.get("loss") == "beta":
        options = {**options, "loss": PPOClip(beta=0.04)}
    shared_passes = []
    encode = logprobs_mod._shared_prefix_hidden
    monkeypatch.setattr(logprobs_mod, "_shared_prefix_hidden",
                        lambda *args: shared_passes.append(torch.is_grad_enabled()) or encode(*args))
    shared, record = _fit(tmp_path, sft_model_path, True, **options)
    assert True in shared_passes and (False in shared_passes) == ("loss" in options)  # frozen forwards too
    monkeypatch.undo()
    plain, reference = _fit(tmp_path, sft_model_path, False, **options)
    assert len(record.steps) == len(reference.steps) >= 2
    for (_, ours), (_, theirs) in zip(record.steps, reference.steps, strict=True):
        diff = torch.sqrt(sum((ours[k] - g).double().square().sum() for k, g in theirs.items()))
        norm = torch.sqrt(sum(g.double().square().sum() for g in theirs.values()))
        assert norm > 0 and diff / norm < 1e-4
    # The parameters: Adam divides each gradient component by its own running size, so a component whose gradient
    # is at float-rounding level can move by up to lr a step either way in one run and not the other; the update as
    # a whole must still agree within ten times the gradients' bound above, over the whole parameter vector
    start = AutoModelForCausalLM.from_pretrained(sft_model_path).state_dict()
    ours, theirs = shared.policy.state_dict(), plain.policy.state_dict()
    diff = torch.sqrt(sum((ours[k] - v).double().square().sum() for k, v in theirs.items()))
    update = torch.sqrt(sum((v - start[k]).double().square().sum() for k, v in theirs.items()))
    assert update > 0 and diff / update < 1e-3


def test_episodes_run_the_head_on_the_sampled_tokens_only():
    """An episode's observations are context: the decoder reads them, the LM head only the sampled tokens."""
    policy = _policy()
    rollouts = _rollouts([6, 3], group=4, t=9, vocab=policy.config.vocab_size, seed=5)
    sampled = rollouts.completion_mask.clone()
    sampled[:, 2:5] = False  # an observation between two turns
    rollouts.policy_mask = sampled
    heads: list[int] = []
    handle = policy.get_output_embeddings().register_forward_hook(
        lambda m, args, out: heads.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))
    weights = torch.rand(sampled.shape, generator=torch.Generator().manual_seed(3))

    def run(fn, **options):
        policy.zero_grad(set_to_none=True)
        logp, entropy = fn(policy, rollouts, 0.7, with_entropy=True, **options)
        (logp * weights * sampled).sum().backward()
        return logp.detach() * sampled, entropy.detach() * sampled, {
            k: p.grad.clone() for k, p in policy.named_parameters() if p.requires_grad}

    plain = run(sequence_logprobs)
    heads.clear()
    packed = run(shared_prefix_logprobs, packed=True)
    handle.remove()
    assert sum(heads) == int(sampled.sum()) < int(rollouts.completion_mask.sum())
    _assert_same(packed, plain)
