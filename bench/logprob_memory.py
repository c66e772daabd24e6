"""Peak accelerator memory of the log-prob paths at a 151,936-token vocabulary: chunked vs whole logits.

    python bench/logprob_memory.py            # needs a CUDA device; prints one JSON object

The ``small`` tiny model with Qwen2's vocabulary size (``bench/grpo_step``), 64 completions of 16
tokens. Measured with ``torch.cuda.max_memory_allocated`` above what was allocated before each call:

- ``train_*``: ``sequence_logprobs`` forward with entropy plus backward, with the LM head in chunks
  (the default) and with ``MAX_LOGITS_ELEMENTS = inf`` (the whole ``[N, T, V]`` logits, as before);
- ``generate_*``: the HF engine's ``generate`` path reading each step's sampled log-prob from the model's
  calls (:data:`PER_STEP`), and the previous engine keeping every step's logits (``output_logits=True``);
- ``max_abs_diff_*``: the two training paths' log-probs and entropies, and their largest relative gradient
  difference (fp32 and bf16 autocast).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.grpo_step


#: The ``per_step`` arm's engine as the published run (2026-11-29) had it: ``generate``, log-probs read by
#: hooks, every row prefilled (as the ``full_logits`` arm): before the own loop and shared prefill existed
PER_STEP = {"decoder": "generate", "shared_prefill": False}


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            "bench/logprob_memory.py needs a CUDA device; on the CPU use python -m bench.grpo_step "
            "--parts memory (peak RSS of whole steps)"
        )
    from bench.grpo_step.lit_worker import full_logits_engine
    from bench.grpo_step.run import build_large_vocab_model
    from lit_grpo import logprobs as logprobs_mod
    from lit_grpo.logprobs import sequence_logprobs
    from lit_grpo.models.loading import load_policy, load_tokenizer
    from lit_grpo.rollout import HFGenerateEngine
    from lit_grpo.types import SamplingParams

    path = str(build_large_vocab_model(Path(tempfile.mkdtemp()) / "small-150k"))
    policy, tokenizer = load_policy(path).cuda(), load_tokenizer(path)
    prompts = [f"{i}+{7 * i % 100}=" for i in range(8)]
    sampling = SamplingParams(1.0, max_new_tokens=16)
    out: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}

    def peak_mib(fn) -> tuple[float, object]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20, result

    for name, engine in (("per_step", HFGenerateEngine(**PER_STEP)), ("full_logits", full_logits_engine())):
        engine.bind(policy, tokenizer)
        torch.manual_seed(0)
        out[f"generate_{name}_MiB"], rollouts = peak_mib(lambda e=engine: e.generate(prompts, 8, sampling))

    def train():
        logp, entropy = sequence_logprobs(policy, rollouts, 1.0, with_entropy=True)
        (logp * rollouts.completion_mask).sum().backward()
        return logp.detach(), entropy, [p.grad.clone() for p in policy.parameters()]

    for precision in ("fp32", "bf16"):
        results = {}
        for name, limit in (("chunked", 2**24), ("full_logits", math.inf)):
            logprobs_mod.MAX_LOGITS_ELEMENTS = limit
            policy.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
                mib, results[name] = peak_mib(train)
            out[f"train_{precision}_{name}_MiB"] = mib
        (a_lp, a_ent, a_grads), (b_lp, b_ent, b_grads) = results["chunked"], results["full_logits"]
        out[f"max_abs_diff_{precision}"] = {
            "logp": float((a_lp - b_lp).abs().max()),
            "entropy": float((a_ent - b_ent).abs().max()),
            "grad_rel": max(
                float((a - b).norm() / b.norm().clamp(min=1e-12))
                for a, b in zip(a_grads, b_grads, strict=True)
            ),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
