"""The GRPO step benchmark: throughput of lit-grpo against TRL's GRPOTrainer, side by side; FLOP/s, memory and
scaling.

    bash bench/setup_trl_env.sh               # once: TRL in its own environment, bench/.venv-trl
    python -m bench.grpo_step --json docs/results/grpo_step.json --write docs/performance.md  # the report
    python -m bench.grpo_step --quick         # a 1-2 minute smoke run of every part
    python -m bench.grpo_step --parts scaling # one part (peak, compare, memory, scaling)

(from the repository root). The modules: :mod:`.run` (the command: plans, measuring processes, parts),
:mod:`.lit_worker` and :mod:`.trl_worker` (one measuring process each side), :mod:`.common` (what both share,
standard library only), :mod:`.workloads`, :mod:`.report` (FLOPs, paired estimates, tables), :mod:`.machine`
(the machine's state and the rule that refuses a busy one).

One GRPO step on both sides: P = 8 prompts x G = 8 completions of 16 new tokens sampled at temperature 1 by
each side's Hugging Face decoding (lit-grpo's own loop, which draws ``generate``'s samples from a seed; TRL's
``generate``), a reward that is always 0, token-mean clipped loss without KL, one forward/backward and one
AdamW step; fp32, or bf16 autocast (Lightning ``bf16-mixed``, TRL ``bf16=True``). The character-level Qwen2
models of ``lit_grpo.models.tiny`` (``small`` ~3M, ``medium`` ~19M parameters) are saved once with
``save_pretrained`` and loaded by both trainers. A random model earns no reward, so every advantage is 0;
neither side skips such batches, so every phase runs at full cost.

Every measurement is a fresh process (:mod:`.lit_worker`, :mod:`.trl_worker`) that runs warm-up steps and then
timed ones; the two trainers alternate (A B A B ...) so drifting background load hits both alike. Reported:
medians over all timed steps, with the range of the per-process medians, and the ratio of each A/B pair with
the median and range of those, and the paired estimate: the geometric mean of the pairs' ratios with its 95% t
interval (on the log ratios), of tokens/s and of step time; tokens/s = completion tokens of a step (EOS
included) / wall time between the ends of consecutive steps. Both sides take the same prompts in the same
order (TRL reads them unshuffled in lit-grpo's order) and reseed torch with the same seed before each step's
generation. The sampled completions still differ: the two sides' logits differ in rounding (lit-grpo prefills
each prompt once per group, TRL every row) and, once the policies have been updated by different code, in
value, so the per-step rewards, and with them the work a step needs, are not paired.

The machine's state (load, free memory, the largest other processes) is recorded at the start, the end and
before every measuring process; a run that writes results refuses a busy machine (``--allow-busy``
overrides; the rule is in :mod:`.machine`).

Parts: ``peak`` (square fp32 and bf16 matmuls on the same threads), ``compare`` (lit-grpo vs TRL, both
sizes and precisions, with the training phase's FLOP/s against the peak), ``memory`` (peak RSS of steps
of a model with a 151,936-token vocabulary), ``scaling`` (lit-grpo step time against G, P and size).

The realistic parts run real workloads with real rewards (:mod:`.workloads`), each side at its own settings:
lit-grpo at its defaults (its engine's options are not set here, so a run measures whatever they are, and
records them; ``zero`` and ``quickstart`` pin ``generate``'s draws, as their published runs drew: see
:func:`.workloads.engine_options`), with its defaults for what it may skip (zero-advantage elision and the
shared-prefix training forward, both exact; TRL trains every row); every record holds the CPU's flags
(:data:`.machine.CPU_FLAGS`) and the dtype each side ran (``--precision``, fp32 by default, the same on both
sides):

    python -m bench.grpo_step --parts realistic,tta --json docs/results/grpo_step_realistic.json \
        --write docs/performance.md

``realistic``: (a) ``real``: SmolLM2-135M-Instruct (``lit-grpo models fetch smollm2-135m-instruct``), chat
prompts "What is a + b? Answer with the number only.", ``LastNumber``, P = 8 x G = 8, 32 new tokens, full
fine-tune, fp32; (b) ``quickstart``: ``tiny-arith-sft`` on two-digit addition, ``ExactMatch``, P = 16 x G = 8,
6 new tokens, lr 1e-4; (c) ``lora``: (a) with the real quickstart's adapters (LoRA r16, alpha 32 on every
projection, lr 3e-4; TRL through ``peft``), the workload its users run. ``--workloads`` measures some of them,
and a run of ``tta`` alone is written into a block (and a JSON) of its own (:func:`.run.block_name`):

    python -m bench.grpo_step --parts tta --workloads quickstart \
        --json docs/results/grpo_step_realistic-tta_quickstart.json --write docs/performance.md

At least 10 timed steps a process (``plan()``). Alongside throughput: the training tokens each side ran
forward and backward against the useful ones (the rows of groups whose rewards differ, each prompt once),
as FLOPs; and the roofline: per phase (generation, training) and for the whole step, the useful FLOPs
(:func:`.report.useful_flops`), their rate and its share of the matmul peak measured in the same run
(before and after the workloads, the larger).

``tta``: wall-clock training time (evaluations excluded) for
each trainer to reach a held-out accuracy from the same start, evaluated by the same code
(:class:`.workloads.HeldOut`), 5 seeds a side, alternating, and per seed the paired ratio TRL / lit-grpo
with its geometric mean and 95% t interval: ``quickstart`` to greedy accuracy 0.70 (evaluated every 25
steps); ``lora`` to sampled accuracy (4 completions a prompt, a fixed evaluation seed) 0.10 above the
starting policy's (every 5 steps, at most 60). ``--workloads`` picks them here too."""
