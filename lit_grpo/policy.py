"""Loading a policy and its tokenizer, its log-prob forward, and the base LightningModule for held-out scoring."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import torch
from lightning import LightningModule
from lightning.pytorch.strategies import FSDPStrategy
from torch import Tensor, nn
from torchmetrics import MeanMetric

from lit_grpo.lora import LoraSettings, apply_lora, base_model, is_peft, meta_copy
from lit_grpo.loss import chunked_head_logprobs, token_entropy, token_logprobs
from lit_grpo.models.sources import resolve_model
from lit_grpo.parallel import is_fsdp1, is_sharded, shard_policy, wrap_fsdp1
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import call_reward
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.hf import HFGenerateEngine
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams

DType = Literal["float32", "bfloat16", "float16"]


def _looks_local(name: str) -> bool:
    """A path rather than a hub id (``org/name``)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.path.exists(name)


def load_tokenizer(model: str):
    """The tokenizer of a hub id or local directory, with a clear error when it cannot be found."""
    from transformers import AutoTokenizer

    model = resolve_model(model)  # a packaged model or a .gguf file: its converted directory
    _check_model_path(model)
    try:
        return AutoTokenizer.from_pretrained(model)
    except OSError as err:
        raise OSError(_not_found_message(model)) from err


def load_policy(model: str, dtype: DType = "float32", from_scratch: bool = False, seed: int = 0) -> nn.Module:
    """A causal LM from a hub id or local directory; ``from_scratch`` initialises its config randomly."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = resolve_model(model)  # a packaged model or a .gguf file: its converted directory
    _check_model_path(model)
    torch_dtype = getattr(torch, dtype)
    try:
        if from_scratch:
            torch.manual_seed(seed)
            config = AutoConfig.from_pretrained(model)
            return AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        return AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
    except OSError as err:
        raise OSError(_not_found_message(model)) from err


def _check_model_path(model: str) -> None:
    if _looks_local(model) and not Path(model).expanduser().is_dir():
        raise FileNotFoundError(
            f"model={model!r}: no such directory. Give a local directory saved with save_pretrained() "
            "or a Hugging Face hub id (available offline in the hub cache)."
        )


def _not_found_message(model: str) -> str:
    return (
        f"model={model!r} could not be loaded: it is neither a local model directory nor a hub id present in "
        "the local cache (HF_HUB_OFFLINE may be set). Download it first or point model to a local directory."
    )


#: Largest logits tensor (elements) :func:`sequence_logprobs` materialises at once. Above it the LM head
#: runs over chunks of completion positions, each recomputed in the backward pass, so memory does not grow
#: with ``N * T * V`` (2**24 elements: 64 MiB of float32; ``math.inf``: always the whole ``[N, T, V]``).
MAX_LOGITS_ELEMENTS: float = 2**24

#: Config attributes of models whose logits are more than ``lm_head(hidden)``; those keep the plain path.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                     "logits_scaling")


def sequence_logprobs(
    policy: nn.Module, rollouts: Rollouts, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-probs ``[N, T]`` of the completion tokens under ``policy`` (and their entropy when asked).

    Prompts are left padded and completions right padded, so position ids come from the attention mask.
    Only the ``T + 1`` last positions go through the LM head; when their logits would exceed
    :data:`MAX_LOGITS_ELEMENTS` the head runs over chunks of positions (:func:`chunked_head_logprobs`),
    with the same result.
    """
    ids = torch.cat([rollouts.prompt_ids, rollouts.completion_ids], dim=1)  # [N, Tp + T]
    attn = torch.cat([rollouts.prompt_mask, rollouts.completion_mask], dim=1).long()  # [N, Tp + T]
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    n, t = rollouts.completion_ids.shape
    model = base_model(policy)
    rows = None if is_sharded(policy) else _head_chunk_rows(model, n * t)
    if rows is not None:
        hidden = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=positions,
                                     use_cache=False).last_hidden_state[:, -(t + 1) : -1]  # [N, T, H]
        head = model.get_output_embeddings()
        return chunked_head_logprobs(head, hidden, rollouts.completion_ids, temperature, rows, with_entropy)
    logits = policy(input_ids=ids, attention_mask=attn, position_ids=positions, logits_to_keep=t + 1,
                    use_cache=False).logits
    logits = logits[:, :-1]  # [N, T, V]: position j predicts completion token j
    logp = token_logprobs(logits, rollouts.completion_ids, temperature)  # [N, T]
    entropy = token_entropy(logits.detach(), temperature) if with_entropy else None
    return logp, entropy


def _head_chunk_rows(model: nn.Module, positions: int) -> int | None:
    """Positions per LM-head chunk when ``positions`` rows of logits would exceed :data:`MAX_LOGITS_ELEMENTS`
    and the logits are exactly ``lm_head(decoder(...))`` with the two callable apart; else None. The caller
    skips sharded policies (FSDP2 and FSDP1 root units gather the head's weights only inside the whole
    model's forward)."""
    head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
    if not isinstance(head, nn.Linear) or positions * head.out_features <= MAX_LOGITS_ELEMENTS:
        return None
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) is not None for name in _LOGIT_TRANSFORMS):
        return None
    if not callable(getattr(model, "get_decoder", None)):
        return None
    return max(1, int(MAX_LOGITS_ELEMENTS // head.out_features))


class PolicyModule(LightningModule):
    """A causal-LM policy with a rollout engine and a reward, scored on held-out prompts.

    Validation and test log ``val/accuracy`` (``test/accuracy``): the mean reward of greedy
    completions (the accuracy for binary rewards), and ``val/reward_mean``: the mean reward of
    ``val_samples`` sampled completions per prompt at the training temperature.

    Args:
        model: Hugging Face hub id or local directory of a causal LM and its tokenizer.
        reward: Reward function scoring completions against references.
        engine: Rollout engine (default: Hugging Face ``generate`` on the policy).
        dtype: Parameter dtype of the policy.
        from_scratch: Initialise the weights randomly from the model's config (for pre-training tiny models).
        temperature: Sampling temperature for rollouts (and the log-prob forward).
        top_p: Nucleus sampling threshold.
        top_k: Top-k sampling (0 = off).
        max_new_tokens: Longest completion.
        val_samples: Sampled completions per held-out prompt for ``val/reward_mean`` (0 = skip).
        seed: Seed for ``from_scratch`` initialisation.
        lora: Train LoRA adapters (peft) instead of all weights (null = full fine-tuning).
        gradient_checkpointing: Recompute each block's activations in the backward pass instead of
            storing them (less memory, about a third more compute); generation keeps its KV cache.
    """

    def __init__(
        self,
        model: str,
        reward: RewardFunction,
        engine: RolloutEngine | None = None,
        dtype: DType = "float32",
        from_scratch: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 64,
        val_samples: int = 1,
        seed: int = 0,
        lora: LoraSettings | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature={temperature} must be > 0 for training rollouts")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p={top_p} must be in (0, 1]")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
        self.model_name = model
        self.reward = reward
        self.engine = engine if engine is not None else HFGenerateEngine()
        self.dtype_name, self.from_scratch, self.seed = dtype, from_scratch, seed
        self.sampling = SamplingParams(temperature, top_p, top_k, max_new_tokens)
        self.val_samples = val_samples
        self.lora, self.gradient_checkpointing = lora, gradient_checkpointing
        self.policy: nn.Module | None = None
        self.tokenizer = None
        self.eval_metrics = nn.ModuleDict({
            "accuracy": MeanMetric(nan_strategy="ignore"), "reward_mean": MeanMetric(nan_strategy="ignore"),
        })

    # ---- setup -----------------------------------------------------------------------------------
    def configure_model(self) -> None:
        """Load the policy (with LoRA adapters and gradient checkpointing when set); under
        ``ModelParallelStrategy`` shard it with FSDP2 over the device mesh Lightning provides, under
        ``FSDPStrategy`` wrap it as its own FSDP1 root (:func:`~lit_grpo.parallel.wrap_fsdp1`)."""
        if self.policy is not None:
            sharded = self._shard(self.policy)
            if sharded is not self.policy:  # an FSDP1 wrapper: the engine generates through it
                self.policy = sharded
                self.engine.bind(self.policy, self.tokenizer)
            return
        self.tokenizer = load_tokenizer(self.model_name)
        policy = load_policy(self.model_name, self.dtype_name, self.from_scratch, self.seed)
        if self.gradient_checkpointing:
            enable_gradient_checkpointing(policy)
        if self.lora is not None:
            policy = apply_lora(policy, self.lora)
        self.policy = self._shard(policy.train())
        self.engine.bind(self.policy, self.tokenizer)

    def _shard(self, module: nn.Module) -> nn.Module:
        """``module`` sharded as the strategy asks: FSDP2 over the device mesh, an FSDP1 root, or as it is."""
        if self.device_mesh is not None:
            return shard_policy(module, self.device_mesh)
        if self._trainer is not None and isinstance(self._trainer.strategy, FSDPStrategy):
            return wrap_fsdp1(module, self._trainer.strategy)
        return module

    # ---- scoring ---------------------------------------------------------------------------------
    def score(self, batch: PromptBatch, rollouts: Rollouts):
        """Rewards ``[P, G]`` of group-major rollouts, with the reward's output for logging."""
        g = rollouts.group_size
        expanded = batch.repeat(g)
        out = call_reward(self.reward, rollouts.texts, expanded.references, **expanded.columns)
        return out.scores.float().view(len(batch), g), out

    @torch.no_grad()
    def evaluate_batch(self, batch: PromptBatch) -> dict[str, Tensor]:
        """Greedy reward ``[P]`` and, with ``val_samples > 0``, sampled reward ``[P, val_samples]``."""
        greedy = SamplingParams(0.0, max_new_tokens=self.sampling.max_new_tokens)
        result = {"accuracy": self.score(batch, self.engine.generate(batch.prompts, 1, greedy))[0][:, 0]}
        if self.val_samples > 0:
            sampled = self.engine.generate(batch.prompts, self.val_samples, self.sampling)
            result["reward_mean"] = self.score(batch, sampled)[0]
        return result

    def _eval_step(self, batch: PromptBatch, prefix: str) -> None:
        for name, values in self.evaluate_batch(batch).items():
            self.eval_metrics[name].update(values.to(self.device))
            self.log(f"{prefix}/{name}", self.eval_metrics[name], prog_bar=name == "accuracy",
                     batch_size=len(batch))

    def validation_step(self, batch: PromptBatch, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: PromptBatch, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def save_pretrained(self, path: str | Path, state_dict: dict[str, Tensor] | None = None) -> None:
        """Write the policy and tokenizer in Hugging Face format (loadable by ``model: <path>``); with LoRA
        the adapters in peft's format. ``state_dict``: the full weights, when the policy is sharded."""
        policy = self.policy
        if is_fsdp1(policy) and is_peft(policy):  # peft would not find the adapters by the wrapped names
            policy = meta_copy(policy)
        policy.save_pretrained(path, state_dict=state_dict)
        self.tokenizer.save_pretrained(path)


def enable_gradient_checkpointing(policy: nn.Module) -> None:
    """Activation checkpointing in every block (non-reentrant, so frozen inputs need no grad hooks).

    The training forward then runs without a KV cache; generation asks for the cache explicitly.
    """
    model = base_model(policy)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
