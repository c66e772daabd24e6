"""Callbacks and references for tests that check an update against a naive recomputation: the weights and
gradients of every optimizer step, the logged rows, a plain forward of a policy over rollouts."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import Logger

from lit_grpo.models.loading import load_policy


class MemoryLogger(Logger):
    """Keeps every ``log_metrics`` call as ``(step, metrics)``."""

    def __init__(self):
        super().__init__()
        self.rows = []

    @property
    def name(self):
        return "memory"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))


class Record(L.Callback):
    """The weights before training, each optimizer step's weights and gradients, each step's rollout stats."""

    def __init__(self):
        self.initial, self.steps, self.outputs = None, [], []

    def on_train_start(self, trainer, pl_module):
        self.initial = {k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.steps.append(({k: v.detach().clone() for k, v in pl_module.policy.state_dict().items()},
                           {k: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                            for k, p in pl_module.policy.named_parameters()}))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.outputs.append(outputs["rollout"])


def naive_logprobs(policy, rollouts):
    """Log-probs of the completion tokens by a plain forward (left-padded prompts, position ids from the mask)."""
    ids = torch.cat([rollouts.prompt_ids, rollouts.completion_ids], 1)
    attn = torch.cat([rollouts.prompt_mask, rollouts.completion_mask], 1).long()
    logits = policy(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
    t = rollouts.completion_ids.shape[1]
    logp = torch.log_softmax(logits[:, -t - 1 : -1].float(), -1)
    return logp.gather(-1, rollouts.completion_ids[..., None]).squeeze(-1)


def policy_at(model, state):
    policy = load_policy(model, "float32")
    policy.load_state_dict(state)
    return policy


def grads_of(loss, policy):
    params = dict(policy.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {k: g if g is not None else torch.zeros_like(p) for (k, p), g in zip(params.items(), grads, strict=True)}
