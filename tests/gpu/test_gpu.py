"""The GPU paths: training on CUDA, bf16 mixed precision, bf16 weights, FSDP2 through
ModelParallelStrategy (FSDP2) and FSDPStrategy (FSDP1) on one device, the CLI
with ``accelerator: gpu``, and the HF engine's own decoding loop on CUDA.

Skipped where no CUDA device is present. Runs are compared by their parameter updates: the strategies
must reach the single-device float32 parameters, the bf16 runs must move the weights the same way.
"""

from __future__ import annotations

import glob

import lightning as L
import pytest
import torch
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models.loading import load_policy
from lit_grpo.parallel import full_state_dict
from lit_grpo.types import SamplingParams
from tests.helpers import tiny_data, tiny_module, tiny_trainer
from tests.scale.train_tiny import DigitReward, ScriptedEngine

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

STEPS = 3


def _params(policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().cpu().clone() for k, v in full_state_dict(policy).items()}


class Capture(L.Callback):
    """The policy's device during training and its full parameters at the end of training (before
    Lightning's teardown moves the module back to the CPU)."""

    def __init__(self) -> None:
        self.devices: set[str] = set()
        self.params: dict[str, torch.Tensor] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.devices.add(next(pl_module.policy.parameters()).device.type)

    def on_train_end(self, trainer, pl_module) -> None:
        self.params = _params(pl_module.policy)


def _fit(tmp_path, model_path, scripted: bool = True, strategy="auto", precision="32-true", callbacks=(),
         **kwargs):
    """``STEPS`` GRPO steps on one GPU; returns the module, the trainer and the parameters after training."""
    L.seed_everything(0)
    if scripted:  # the same completions whatever the numerics: runs differ only in their updates
        kwargs = {"engine": ScriptedEngine(), "reward": DigitReward(), **kwargs}
    module = tiny_module(model_path, **kwargs)
    capture = Capture()
    trainer = tiny_trainer(tmp_path, max_steps=STEPS, accelerator="gpu", devices=1, strategy=strategy,
                           precision=precision, callbacks=[capture, *callbacks])
    trainer.fit(module, datamodule=tiny_data())
    assert trainer.global_step == STEPS
    assert capture.devices == {"cuda"}
    return module, trainer, capture.params


def _cosine(a: dict, b: dict, base: dict) -> float:
    da = torch.cat([(a[k] - base[k]).flatten() for k in base])
    db = torch.cat([(b[k] - base[k]).flatten() for k in base])
    return float(torch.nn.functional.cosine_similarity(da, db, dim=0))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, sft_model_path):
    """The float32 single-GPU run every other run is compared with."""
    before = _params(load_policy(sft_model_path))
    _, _, after = _fit(tmp_path_factory.mktemp("ref"), sft_model_path)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    return before, after


def test_hf_engine_on_cuda_matches_the_trainer(tmp_path, sft_model_path):
    _, trainer, _ = _fit(tmp_path, sft_model_path, scripted=False)
    metrics = trainer.callback_metrics
    print(f"cuda fp32 HF engine: logp_diff_mean={float(metrics['rollout/logp_diff_mean']):.2e} "
          f"max={float(metrics['rollout/logp_diff_max']):.2e}")
    assert float(metrics["rollout/logp_diff_mean"]) < 1e-3
    assert torch.isfinite(metrics["train/loss"])


def test_bf16_mixed_precision_computes_in_bf16_and_moves_weights_like_fp32(tmp_path, sft_model_path, reference):
    base, fp32 = reference
    dtypes = []

    class SeeLogits(L.Callback):
        def on_train_start(self, trainer, pl_module):
            head = pl_module.policy.get_output_embeddings()
            head.register_forward_hook(lambda mod, args, out: dtypes.append(out.dtype))

    module, _, after = _fit(tmp_path, sft_model_path, precision="bf16-mixed", callbacks=[SeeLogits()])
    assert all(p.dtype == torch.float32 for p in module.policy.parameters())  # float32 master weights
    assert torch.bfloat16 in dtypes  # the training forward ran under bf16 autocast
    cos = _cosine(after, fp32, base)
    print(f"bf16-mixed vs fp32 update cosine: {cos:.4f}")
    assert cos > 0.9


def test_bf16_weights_train(tmp_path, sft_model_path, reference):
    base, fp32 = reference
    module, trainer, after = _fit(tmp_path, sft_model_path, dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in module.policy.parameters())
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    cos = _cosine(after, fp32, base)
    print(f"bf16 weights vs fp32 update cosine: {cos:.4f}")
    assert cos > 0.5


def test_fsdp1_reaches_the_single_device_parameters(tmp_path, sft_model_path, reference):
    # the policy is its own FSDP1 root (lit_grpo.parallel.wrap_fsdp1), so the backward inside training_step
    # follows a finished forward; the whole LightningModule as root failed here with "Expects BACKWARD_PRE
    # or BACKWARD_POST state but got FORWARD"
    base, fp32 = reference
    _, _, after = _fit(tmp_path, sft_model_path, strategy=FSDPStrategy())
    worst = max(float((after[k] - fp32[k]).abs().max()) for k in fp32)
    print(f"FSDP1 vs single device: max |diff| = {worst:.2e}")
    assert worst < 1e-4


def test_fsdp2_reaches_the_single_device_parameters(tmp_path, sft_model_path, reference):
    base, fp32 = reference
    strategy = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1)
    _, _, after = _fit(tmp_path, sft_model_path, strategy=strategy)
    worst = max(float((after[k] - fp32[k]).abs().max()) for k in fp32)
    print(f"FSDP2 vs single device: max |diff| = {worst:.2e}")
    assert worst < 1e-4


def test_cli_quickstart_on_gpu_in_bf16(tmp_path, capsys):
    from lit_grpo.commands import main

    main(["fit", "--config", "configs/quickstart.yaml", "--trainer.accelerator=gpu", "--trainer.devices=1",
          "--trainer.precision=bf16-mixed", "--trainer.max_steps=4", "--trainer.val_check_interval=4",
          "--data.max_val_prompts=32", "--trainer.enable_progress_bar=false",
          f"--trainer.logger.init_args.save_dir={tmp_path}"])
    out = capsys.readouterr()
    assert "Held-out prompts" in out.out + out.err
    assert glob.glob(f"{tmp_path}/quickstart/version_*/events*")


def own_loop_checks(device: str, sampling: SamplingParams) -> None:
    """The own decoding loop's checks of tests/rollout/test_hf_decode.py on ``device``: without ``shrink`` the same
    samples as ``generate`` from the same seed and its log-probs within float32 rounding; with ``shrink`` each
    returned log-prob that of the trainer's teacher-forced forward."""
    from tests.rollout.test_hf_decode import GENERATES, _generate, _policy, logprob_tolerance

    policy, tokenizer = _policy(device=device)
    tolerance = logprob_tolerance(policy, sampling)
    reference = _generate(policy, tokenizer, sampling, n=16, decoder="generate")
    own = _generate(policy, tokenizer, sampling, n=16, decoder="own", **GENERATES)
    assert own.completion_ids.device.type == device
    assert torch.equal(own.completion_ids, reference.completion_ids)
    assert torch.equal(own.completion_mask, reference.completion_mask)
    torch.testing.assert_close(own.logprobs, reference.logprobs, rtol=0, atol=tolerance)
    shrunk = _generate(policy, tokenizer, sampling, n=16, decoder="own", shrink=True, sampler="multinomial")
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy, shrunk, temperature=sampling.temperature or 1.0)
    torch.testing.assert_close(logp * shrunk.completion_mask, shrunk.logprobs, rtol=0, atol=tolerance)
    print(f"own loop on {device}, t={sampling.temperature} top_p={sampling.top_p} top_k={sampling.top_k}: the same "
          f"samples as generate; max |log-prob - generate's| = {float((own.logprobs - reference.logprobs).abs().max()):.1e}, "
          f"shrinking, max |log-prob - the forward's| = "
          f"{float((logp * shrunk.completion_mask - shrunk.logprobs).abs().max()):.1e} (bound {tolerance:.1e})")


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=t, top_p=p, top_k=k, max_new_tokens=10)
                                      for t, p, k in [(0.0, 1.0, 0), (1.0, 1.0, 0), (0.7, 0.9, 7)]],
                         ids=lambda s: f"t{s.temperature}-p{s.top_p}-k{s.top_k}")
def test_the_own_decoding_loop_on_cuda_samples_as_generate_and_scores_as_the_trainer(sampling):
    own_loop_checks("cuda", sampling)
