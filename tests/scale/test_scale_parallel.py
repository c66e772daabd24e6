"""Two CPU processes (gloo) against one process on the same global batch: DDP, FSDP2, FSDP2 + LoRA
(with gradient checkpointing, against a reference without it), FSDP1 (Lightning's ``FSDPStrategy``) and
FSDP1 + LoRA (with gradient checkpointing too).

One ``torchrun --nproc_per_node 2`` job (tests/scale/train_tiny.py) trains the committed tiny policy
for 4 optimizer steps (2 rollout batches, ``num_iterations=2``, ``beta=0.05``) under each strategy with
scripted, rank-independent rollouts and a reward that varies within groups. The one-process reference
draws, at every step, the prompts of both ranks together. Tolerance: parameters within
``atol=1e-5, rtol=1e-4`` (observed differences are ~1e-6: float summation order differs across ranks);
logged metrics within a relative 1e-4.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from tests.scale import train_tiny

pytestmark = pytest.mark.slow

SCRIPT = Path(train_tiny.__file__)
STEPS = 4


@pytest.fixture(scope="module")
def parallel_runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("parallel")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPT.parents[2])}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(SCRIPT),
        "parallel",
        str(out),
        "--steps",
        str(STEPS),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return out


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    train_tiny.run_single(out / "full", STEPS, merged_ranks=2)
    train_tiny.run_single(out / "lora", STEPS, merged_ranks=2, lora=True)
    train_tiny.run_single(out / "elide", STEPS, merged_ranks=2, **train_tiny.ELIDE)
    train_tiny.run_single(out / "async1", STEPS, merged_ranks=2, engine="async1")
    return out


def _norm(tensors: dict) -> float:
    return float(torch.sqrt(sum(t.double().square().sum() for t in tensors.values())))


def _metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("run", "reference"),
    [("ddp", "full"), ("fsdp2", "full"), ("fsdp2_lora", "lora"), ("fsdp1", "full"), ("fsdp1_lora", "lora"),
     ("ddp_async1", "async1")],  # each rank its own producer, one step behind
)
def test_two_processes_match_one_process_on_the_global_batch(parallel_runs, references, run, reference):
    assert_matches_reference(parallel_runs / run, references / reference, lora=reference == "lora")


def assert_matches_reference(folder: Path, reference: Path, lora: bool = False) -> None:
    """A 2-rank run's parameters and logged metrics (``folder``) equal the one-process run of the global batch
    (``reference``), which moved the weights, within the tolerances of the module docstring."""
    ours, theirs = torch.load(folder / "params.pt"), torch.load(reference / "params.pt")
    assert ours.keys() == theirs.keys()
    initial = train_tiny.module(lora=lora)
    initial.configure_model()
    moved = [k for k, v in initial.policy.state_dict().items() if not torch.equal(v, theirs[k])]
    assert moved, "the reference did not train"
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], atol=1e-5, rtol=1e-4, msg=k)
    mine, ref = _metrics(folder), _metrics(reference)
    assert [m["step"] for m in mine] == [m["step"] for m in ref] == [2, 4]
    for a, b in zip(mine, ref, strict=True):
        assert a.keys() == b.keys()
        for k in a:  # reduced across ranks: the global batch's values
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k


@pytest.mark.parametrize("run", ["fsdp2_hf", "fsdp1_hf"])
def test_sharded_generation_keeps_the_ranks_in_step(parallel_runs, run):
    """Sampled generation on sharded weights: ranks finish at different lengths, generate stays synchronised
    (FSDP1 in bf16 mixed precision: the blocks compute in bf16 while the gathered root weights are float32)."""
    rows = _metrics(parallel_runs / run)
    assert [r["step"] for r in rows] == [2]
    assert all(torch.isfinite(torch.tensor(v)) for r in rows for v in r.values())


@pytest.mark.parametrize("run", ["ddp", "fsdp2"])
def test_resumed_at_world_size_2_equals_the_uninterrupted_run(parallel_runs, tmp_path, run):
    """The 2-rank checkpoint at step 4 resumed at 2 ranks for 2 more steps, against one process that trains
    6 steps without a stop on the same global batches: the data position, optimizer and seeds carry over."""
    uninterrupted = train_tiny.run_single(tmp_path / "full", STEPS + 2, merged_ranks=2)
    assert uninterrupted.global_step == STEPS + 2
    ours, theirs = torch.load(parallel_runs / f"{run}_resumed" / "params.pt"), torch.load(tmp_path / "full" / "params.pt")
    for k in theirs:
        torch.testing.assert_close(ours[k], theirs[k], atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.parametrize("run", ["fsdp2", "fsdp1"])
def test_checkpoint_saved_at_world_size_2_loads_at_world_size_1(parallel_runs, tmp_path, run):
    saved = torch.load(parallel_runs / run / "params.pt")
    seen = {}

    class Capture(L.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.update({k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()})

    grpo = train_tiny.module()
    fit = train_tiny.trainer(tmp_path, STEPS + 2, callbacks=[Capture()])
    data = train_tiny.PromptDataModule(train_tiny.source(), prompts_per_step=2)
    fit.fit(grpo, datamodule=data, ckpt_path=str(parallel_runs / run / "ckpt" / "last.ckpt"))
    assert fit.global_step == STEPS + 2  # one more rollout batch of 2 optimizer steps
    for k, v in saved.items():
        assert torch.equal(seen[k], v), k


@pytest.mark.parametrize("run", ["fsdp2", "fsdp1"])
def test_sharded_export_loads_in_transformers_and_peft(parallel_runs, run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    full = AutoModelForCausalLM.from_pretrained(parallel_runs / run / "export")
    saved = torch.load(parallel_runs / run / "params.pt")
    for k, v in full.state_dict().items():
        assert torch.equal(v, saved[k]), k
    base = AutoModelForCausalLM.from_pretrained(train_tiny.MODEL)
    lora = PeftModel.from_pretrained(base, parallel_runs / f"{run}_lora" / "export")
    saved = torch.load(parallel_runs / f"{run}_lora" / "params.pt")
    adapters = {k: v for k, v in lora.state_dict().items() if "lora_" in k}
    assert adapters and all(torch.equal(v, saved[k]) for k, v in adapters.items())


@pytest.mark.parametrize("run", ["fsdp2_lora", "fsdp1_lora"])
def test_sharded_weight_sync_streams_the_merged_weights(parallel_runs, run):
    """What the vLLM engine receives from the sharded LoRA policy: the trained adapters merged into the base
    weights, under the base model's names, gathered whole."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(train_tiny.MODEL)
    merged = PeftModel.from_pretrained(base, parallel_runs / run / "export").merge_and_unload().state_dict()
    streamed = torch.load(parallel_runs / run / "streamed.pt")
    assert streamed.keys() == merged.keys()
    for k, v in merged.items():
        torch.testing.assert_close(streamed[k], v, atol=1e-6, rtol=1e-5, msg=k)


def test_filter_degenerate_keeps_the_ranks_in_step(parallel_runs):
    """Each rank refills on its own, then all keep the fewest groups any rank has: same counts every step."""
    folder = parallel_runs / "fsdp2_filter"
    counts = [[int(x) for x in (folder / f"groups.rank{r}.txt").read_text().split()] for r in (0, 1)]
    assert len(counts[0]) == len(counts[1]) == 2 and counts[0] == counts[1]
    assert [r["step"] for r in _metrics(folder)] == [1, 2]


@pytest.mark.parametrize("run", ["ddp_elide", "fsdp2_elide"])
def test_a_rank_with_nothing_to_train_keeps_in_step(parallel_runs, references, run):
    """Zero-advantage elision when every advantage of rank 1 is 0: it trains one zero-advantage row per
    mini-batch to join the gradient collectives (and runs as many frozen forwards as rank 0), and the update is
    the one-process update of the global batch, which elides rank 1's rows too.

    The weights are held as in tests/module/test_elision.py, not elementwise to 1e-5: rank 1's zero-advantage
    rows leave many gradients at the level of float noise (~1e-9), and Adam divides such a gradient by its own
    size, so its last bits move the weight by up to a whole step. The change over the run agrees within 1e-3 of
    its norm (a wrong gradient moves many weights), and no weight is further off than two trajectories can get
    apart: with bias correction |m_hat / sqrt(v_hat)| <= sqrt(sum_i a_i^2 / b_i) ~ 1.01 over the first 4 steps
    (a_i, b_i the normalised weights of the two moments; betas 0.9, 0.999), so each step moves a weight by at
    most 1.01 lr and two runs differ by at most 2 * 1.01 * lr per step."""
    ours, theirs = torch.load(parallel_runs / run / "params.pt"), torch.load(references / "elide" / "params.pt")
    initial = train_tiny.module()
    initial.configure_model()
    start = {k: v.detach() for k, v in initial.policy.state_dict().items()}
    assert ours.keys() == theirs.keys() and any(not torch.equal(v, start[k]) for k, v in theirs.items())
    lr = train_tiny.module().optim.lr
    for k in theirs:
        torch.testing.assert_close(ours[k], theirs[k], atol=2 * 1.01 * lr * STEPS, rtol=0, msg=k)
    change = {k: ours[k] - start[k] for k in theirs}
    reference_change = {k: theirs[k] - start[k] for k in theirs}
    assert _norm({k: change[k] - reference_change[k] for k in theirs}) < 1e-3 * _norm(reference_change)
    rows, ref = _metrics(parallel_runs / run), _metrics(references / "elide")
    assert [r["step"] for r in rows] == [r["step"] for r in ref] == [2, 4]
    for mine, one in zip(rows, ref, strict=True):  # rank 1 trains one of its rows per micro-batch of rank 0's: 1-3
        assert one["perf/elided_frac"] >= 0.5 and 1 / 16 <= one["perf/elided_frac"] - mine["perf/elided_frac"] <= 3 / 16
