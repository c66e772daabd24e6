"""lit-grpo: GRPO-family reinforcement learning from verifiable rewards on PyTorch Lightning.

The names below are imported on first use (PEP 562), so ``import lit_grpo.estimators`` (or the losses, the
log-prob maths, the diagnostics) loads neither Lightning nor the data package; ``lit_grpo.GRPOModule``
and ``class_path: lit_grpo.GRPOModule`` work as before. The estimators are exported by the names their package
registers (``lit_grpo.Sign`` is ``lit_grpo.estimators.Sign``), and so are the losses and importance corrections,
so no list here names them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "AdvantageEstimator": "lit_grpo.estimators",
    **dict.fromkeys(["PolicyLoss", "ImportanceCorrection"], "lit_grpo.losses"),
    **dict.fromkeys(
        ["RewardFunction", "ExactMatch", "MathVerify", "WeightedSum", "ChoiceLetter", "TextSimilarity", "Format",
         "RewardShaping", "OverlongPenalty", "LastNumber"],
        "lit_grpo.rewards",
    ),
    **dict.fromkeys(["AsyncRollouts", "RolloutEngine", "HFGenerateEngine"], "lit_grpo.rollout"),
    "LoraSettings": "lit_grpo.lora",
    **dict.fromkeys(
        ["PromptSource", "SyntheticArithmetic", "FileSource", "HubSource", "PromptDataModule", "GSM8K",
         "MATH500", "MultipleChoice", "ReferenceText", "SyntheticChoice", "SyntheticResidue", "PromptCurriculum",
         "WordProblems"],
        "lit_grpo.data",
    ),
    **dict.fromkeys(["ReasoningGymSource", "ReasoningGymScore"], "lit_grpo.data.reasoning_gym"),
    "PolicyModule": "lit_grpo.policy",
    "GRPOModule": "lit_grpo.module",
    "SFTModule": "lit_grpo.sft",
    **dict.fromkeys(["PromptBatch", "Rollouts", "RolloutStats", "RewardOutput", "SamplingParams"], "lit_grpo.types"),
}

#: Packages whose ``REGISTRY`` (class name -> component class) is exported too, imported on first use.
_REGISTRIES = ("lit_grpo.estimators", "lit_grpo.losses")


def _registered() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for package in _REGISTRIES:
        found.update(importlib.import_module(package).REGISTRY)
    return found


def __getattr__(name: str) -> Any:
    if name == "__all__":  # the registered names need their packages imported
        value: Any = [*_EXPORTS, *_registered()]
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name[:1].isupper() and name in (registered := _registered()):  # a class name, never a submodule's
        value = registered[name]
    else:
        raise AttributeError(f"module 'lit_grpo' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
