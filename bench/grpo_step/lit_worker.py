"""The lit-grpo measuring process: GRPO steps of ``GRPOModule`` through ``lightning.Trainer``.

    python -m bench.grpo_step.lit_worker --model DIR --steps 6 --warmup 2 [--precision bf16] [--full-logits]

Same settings as :mod:`.trl_worker` (see the package's docstring): the HF generate engine at its defaults
(so a run measures whatever they are), or with ``generate``'s draws on ``zero``, where both sides sample the
same tokens (:func:`.workloads.engine_options`), its settings reported as ``engine``,
the prompts and reward of ``--workload`` (:mod:`.workloads`; torch reseeded with ``step_seed`` at the start
of every step, the digest of each step's prompts reported as ``step_prompts``) with ``filter_degenerate``
off (no batch is skipped); on the ``zero`` workload ``elide_zero_advantage`` off (every completion is
trained, as TRL does; ``--module-options`` may turn it on), elsewhere the module's defaults. Token-mean
loss, ``beta=0``, ``num_iterations=1``, AdamW at a constant learning rate, clipping at 1,
``precision="bf16-mixed"`` for ``--precision bf16``; on the ``lora`` workload the adapters of
:data:`.workloads.LORA`. Phase times are the module's own ``perf/*`` metrics; ``step_s`` is the wall time
between the ends of consecutive steps. ``--full-logits`` restores the previous log-prob paths (the training
forward's whole ``[N, T, V]`` logits, and generation keeping every step's logits) for the memory
comparison. Prints one ``RESULT {json}`` line."""

from __future__ import annotations

import argparse
import json
import math

from .common import PHASES, StepClock, add_worker_args, emit, group_counts, rss_mib

#: The ``HFGenerateEngine`` options a run records
ENGINE_SETTINGS = ("decoder", "shrink", "sampler", "shared_prefill", "use_cache", "batch_size", "merge_lora")


def full_logits_engine():
    """The HF engine as it was: ``output_logits=True`` keeps ``[n, V]`` logits for every new token."""
    import torch

    from lit_grpo.logprobs import token_logprobs
    from lit_grpo.rollout.hf import HFGenerateEngine

    class FullLogitsEngine(HFGenerateEngine):
        def _generate(self, ids, mask, rows, sampling):
            ids, mask = ids[rows], mask[rows]  # every row's prompt prefilled with it, as before
            out = self.policy.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=None,
                max_new_tokens=sampling.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.eos_ids() or None,
                use_cache=self.use_cache,
                return_dict_in_generate=True,
                output_logits=True,
            )
            new = out.sequences[:, ids.shape[1] :]  # [n, T]
            logits = torch.stack(out.logits, dim=1)  # [n, T, V]
            return new, token_logprobs(logits, new, temperature=sampling.temperature)

    return FullLogitsEngine()


def engine(workload: str, full_logits: bool = False):
    """The engine of the lit-grpo side on ``workload``: ``HFGenerateEngine`` with the workload's options
    (:func:`.workloads.engine_options`), or :func:`full_logits_engine`."""
    from lit_grpo.rollout import HFGenerateEngine

    from .workloads import engine_options

    return full_logits_engine() if full_logits else HFGenerateEngine(**engine_options(workload))


def engine_settings(engine) -> dict:
    """What the engine that ran was set to (the report prints them): its decoder, ``shrink``, ``sampler``
    and the other options a user may set."""
    return {key: getattr(engine, key, None) for key in ENGINE_SETTINGS}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_worker_args(parser)
    parser.add_argument("--full-logits", action="store_true", help="the previous, [N, T, V] log-prob paths")
    parser.add_argument("--module-options", default="", help="extra GRPOModule arguments as JSON, settings "
                        "groups nested: {\"batching\": {\"shared_prefix\": false}}")
    args = parser.parse_args()

    import lightning as L
    import torch

    from lit_grpo import GRPOModule, PromptDataModule, logprobs
    from lit_grpo.lora import LoraSettings
    from lit_grpo.settings import Algorithm, Batching, Optim, Sampling

    from .workloads import LORA, WORKLOADS, held_out, reward, source

    torch.set_num_threads(args.threads)
    clock = StepClock()
    held = held_out(args)

    class Collect(L.Callback):
        def on_train_start(self, trainer, pl_module):
            held.start(pl_module.policy)

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 0:
                clock.begin()  # the first step's time excludes the trainer's setup
            clock.start_step(args.seed, batch.prompts)  # the step's generation starts from here

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            metrics = trainer.callback_metrics
            clock.set_phases({p: float(metrics.get(f"perf/{p}", 0.0)) for p in PHASES})
            stats = outputs["rollout"]
            prompt_lens = stats.rollouts.prompt_mask.sum(1).tolist()  # [N]
            trained = None  # the rows run forward and backward: all, unless the module elides some
            if pl_module._elides():
                trained = (stats.advantages.reshape(-1) != 0).tolist()
            clock.add_tokens(int(stats.lengths.sum()), int(sum(prompt_lens)))
            clock.add_counts(group_counts(stats.rewards.reshape(-1).tolist(), prompt_lens,
                                          stats.lengths.tolist(), stats.group_size, trained,
                                          prompt_once=pl_module.batching.shared_prefix))
            clock.end_step()
            step = len(clock.steps)  # steps so far (batch_idx restarts at every epoch)
            if held.due(step):
                if held.after(step, sum(s["step_s"] for s in clock.steps), pl_module.policy):
                    trainer.should_stop = True
                clock.begin()  # the evaluation is not training time

    if args.full_logits:
        logprobs.MAX_LOGITS_ELEMENTS = math.inf
    L.seed_everything(args.seed, verbose=False)
    options = json.loads(args.module_options) if args.module_options else {}  # {"batching": {...}, ...}
    given = dict(options)
    batching = {"elide_zero_advantage": args.workload != "zero", **given.pop("batching", {})}
    module = GRPOModule(
        model=args.model,
        reward=reward(args.workload),
        group_size=args.group,
        engine=engine(args.workload, args.full_logits),
        sampling=Sampling(temperature=1.0, max_new_tokens=args.new_tokens, val_samples=0),
        optim=Optim(lr=args.lr, max_grad_norm=1.0),
        algorithm=Algorithm(num_iterations=1, aggregation="token-mean", filter_degenerate=False),
        batching=Batching(**batching),
        lora=LoraSettings(**LORA) if WORKLOADS[args.workload].lora else None,
        **given,
    )
    module.configure_model()
    load_rss = rss_mib()
    data = PromptDataModule(source(args.workload, args.model), prompts_per_step=args.prompts, seed=args.seed)
    trainer = L.Trainer(
        max_steps=args.warmup + args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        callbacks=[Collect()],
        precision="bf16-mixed" if args.precision == "bf16" else "32-true",
    )
    trainer.fit(module, datamodule=data)
    emit(
        clock,
        args,
        runner="lit-grpo",
        params=sum(p.numel() for p in module.policy.parameters()),
        trainable=sum(p.numel() for p in module.policy.parameters() if p.requires_grad),
        load_rss_mib=load_rss,
        torch=torch.__version__,
        options=options,
        engine=engine_settings(module.engine),
        dtype=str(next(module.policy.parameters()).dtype).removeprefix("torch."),
        autocast="bf16" if args.precision == "bf16" else None,
        evals=held.evals,
        target=held.target,
    )


if __name__ == "__main__":
    main()
