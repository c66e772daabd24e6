"""A producer process draws from the trainer's random state wherever the synchronous engine would (validation,
refills, every batch at max_staleness 0) and hands the state back, so the trainer's generator advances as it does
synchronously: the same samples, the same dropout masks after them, the same parameters."""

from __future__ import annotations

import lightning as L
import torch

from lit_grpo.callbacks import HeldOutReport
from lit_grpo.lora import LoraSettings
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import AsyncRollouts, HFGenerateEngine
from lit_grpo.types import PromptBatch, SamplingParams
from tests.helpers import tiny_data, tiny_module, tiny_trainer

SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=8)
PROMPTS = PromptBatch(["3+4=", "12+9=", "7+7="], ["7", "21", "14"], ["a", "b", "c"])


def _sampled_now(engine, model_path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The completions of a sampled ``engine.rollout`` of three prompts after ``torch.manual_seed(7)``, and the
    trainer's random state after it."""
    engine.bind(load_policy(model_path, "float32"), load_tokenizer(model_path))
    torch.manual_seed(7)
    try:
        out = engine.rollout(PROMPTS, 4, SAMPLED)
    finally:
        engine.close()
    return out.completion_ids, torch.get_rng_state()


def test_a_producer_process_samples_outside_the_pipeline_from_the_trainers_random_state(sft_model_path):
    """Validation and refills (``rollout`` outside the pipeline): the tokens the synchronous engine draws, and the
    trainer's generator left where the synchronous engine leaves it."""
    synchronous = _sampled_now(HFGenerateEngine(), sft_model_path)
    for k in (0, 1):
        process = _sampled_now(AsyncRollouts(max_staleness=k, producer="process"), sft_model_path)
        assert torch.equal(process[0], synchronous[0]), k
        assert torch.equal(process[1], synchronous[1]), k


def test_the_held_out_report_of_a_producer_process_is_that_of_the_thread_and_the_synchronous_engine(
        tmp_path, sft_model_path):
    """The report that read 0.375, 0.125, 0.375 over three identical runs: the sampled held-out rewards, per
    prompt, before training those of the synchronous engine, after it those of the producer thread (at k = 1 the
    training, and so the weights after it, differ from the synchronous run's)."""
    values = {}
    for name, engine in (("synchronous", None), ("thread", AsyncRollouts(max_staleness=1)),
                         ("process", AsyncRollouts(max_staleness=1, producer="process"))):
        L.seed_everything(0)
        report = HeldOutReport()
        module = tiny_module(sft_model_path, val_samples=4, temperature=1.0,
                             **({} if engine is None else {"engine": engine}))
        tiny_trainer(tmp_path / name, max_steps=2, callbacks=[report]).fit(module, datamodule=tiny_data())
        values[name] = report.values
    for when, reference in (("before", "synchronous"), ("before", "thread"), ("after", "thread")):
        assert torch.equal(values["process"][when]["reward_mean"], values[reference][when]["reward_mean"]), when


def test_max_staleness_0_with_a_producer_process_and_dropout_is_the_synchronous_run(tmp_path, sft_model_path):
    """LoRA dropout draws from the trainer's generator after each batch: at k = 0 the process hands back the
    state it drew from, so the masks (and so the parameters) are the synchronous run's, bit for bit."""
    runs = {}
    for name, engine in (("synchronous", None), ("process", AsyncRollouts(max_staleness=0, producer="process"))):
        L.seed_everything(0)
        module = tiny_module(sft_model_path, lora=LoraSettings(r=4, alpha=8, dropout=0.2),
                             **({} if engine is None else {"engine": engine}))
        tiny_trainer(tmp_path / name, max_steps=3).fit(module, datamodule=tiny_data())
        runs[name] = {k: v.detach().clone() for k, v in module.policy.state_dict().items()}
    assert all(torch.equal(runs["synchronous"][k], runs["process"][k]) for k in runs["synchronous"])
