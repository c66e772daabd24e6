"""The peer's measuring process: GRPO steps of Hugging Face TRL's ``GRPOTrainer``.

Run by the benchmark in TRL's own environment (``bench/setup_trl_env.sh`` creates ``bench/.venv-trl``); TRL is
not a dependency of lit-grpo. By hand, from the repository root:

    bench/.venv-trl/bin/python -m bench.grpo_step.trl_worker --model DIR --steps 6 --warmup 2

Settings match the lit-grpo side of the benchmark: one optimizer step = ``P`` prompts x ``G`` completions
generated in one batch with ``transformers`` ``generate`` (no vLLM), temperature 1, no KL (``beta=0``), one
update per batch (``num_iterations=1``), token-mean loss over the batch (``loss_type="dapo"``: the masked
token losses summed and divided by the batch's completion tokens), the prompts and reward of ``--workload``
(:mod:`.workloads`, the same code as the lit-grpo side; the prompts in the order lit-grpo draws them,
unshuffled, and torch reseeded with ``step_seed`` before each step's generation), TRL's default optimizer
(fused AdamW, as lit-grpo's) at a constant learning rate, gradient clipping at 1, no gradient checkpointing
(TRL's default turns it on; lit-grpo's is off), ``bf16`` autocast only for ``--precision bf16``, on the
``lora`` workload ``peft`` adapters with the settings of :data:`.workloads.LORA` (``peft_config``), no logging
or saving during the run. Everything else at TRL's defaults; the settings that ran are reported
(``trl_settings``).

Per phase, on the same clock as the lit-grpo runner: ``generate_s`` (TRL's generation call),
``score_s`` (the reward function), ``forward_s`` (the loss forward), ``backward_s``,
``optimizer_s`` (``optimizer.step``) and ``step_s``: wall time between the ends of consecutive
optimizer steps. Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import tempfile

from .common import StepClock, add_worker_args, emit, group_counts, rss_mib

#: The ``GRPOConfig`` fields a run records, beside those it sets
TRL_SETTINGS = ("loss_type", "beta", "num_iterations", "scale_rewards", "gradient_checkpointing", "bf16",
                "fp16", "use_vllm", "optim", "learning_rate", "max_grad_norm", "temperature", "top_p",
                "top_k", "max_completion_length", "num_generations", "per_device_train_batch_size")


def plain(value):
    """``value`` as JSON can hold it: a number, string, bool or None as it is, anything else (an enum) as
    text."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_worker_args(parser)
    args = parser.parse_args()

    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from .workloads import LORA, WORKLOADS, held_out, reward, train_order

    torch.set_num_threads(args.threads)
    clock = StepClock()
    held = held_out(args)
    scorer = reward(args.workload)
    last: dict[str, list] = {}  # the current step's rows: prompt and completion lengths, rewards

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_single_turn(self, *a, **kw):
            with clock("generate_s"):
                return super()._generate_single_turn(*a, **kw)

        def _compute_loss(self, *a, **kw):
            with clock("forward_s"):
                return super()._compute_loss(*a, **kw)

    class StepEnd(TrainerCallback):
        def on_pre_optimizer_step(self, *a, **kw):
            clock.start("optimizer_s")

        def on_optimizer_step(self, *a, **kw):
            clock.stop("optimizer_s")

        def on_train_begin(self, args_, state, control, **kw):
            held.start(kw["model"])

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 0:
                clock.begin()  # the first step's time excludes the trainer's setup

        def on_step_end(self, args_, state, control, **kw):
            clock.add_counts(group_counts(last["rewards"], last["prompt_lens"], last["completion_lens"],
                                          args.group))
            clock.end_step()
            if held.due(state.global_step):
                if held.after(state.global_step, sum(s["step_s"] for s in clock.steps), kw["model"]):
                    control.should_training_stop = True
                clock.begin()  # the evaluation is not training time

    def workload_reward(completions, reference, **kwargs):
        with clock("score_s"):
            scores = scorer(list(completions), list(reference)).scores.tolist()
        last["rewards"] = scores
        return scores

    total_steps = args.warmup + args.steps
    records = train_order(args.workload, args.model, args.prompts, total_steps, args.seed)  # lit-grpo's order
    dataset = Dataset.from_list([{"prompt": r["prompt"], "reference": r["reference"]} for r in records])
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=args.prompts * args.group,
            gradient_accumulation_steps=1,
            num_generations=args.group,
            max_completion_length=args.new_tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            num_iterations=1,
            shuffle_dataset=False,  # the records are already in lit-grpo's order
            loss_type="dapo",
            scale_rewards="group",
            use_vllm=False,
            learning_rate=args.lr,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            gradient_checkpointing=False,
            bf16=args.precision == "bf16",
            fp16=False,
            use_cpu=args.device == "cpu",
            max_steps=total_steps,
            seed=args.seed,
            data_seed=args.seed,
            logging_steps=10**9,
            logging_strategy="no",
            save_strategy="no",
            eval_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
            log_completions=False,
        )
        peft_config = None
        if WORKLOADS[args.workload].lora:
            from peft import LoraConfig

            peft_config = LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                                     target_modules=LORA["target_modules"], task_type="CAUSAL_LM")
        trainer = TimedGRPOTrainer(
            model=model,
            reward_funcs=workload_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[StepEnd()],
            peft_config=peft_config,
        )
        backward = trainer.accelerator.backward

        def timed_backward(loss, **kw):
            with clock("backward_s"):
                return backward(loss, **kw)

        trainer.accelerator.backward = timed_backward
        original_generate = trainer._generate

        def counted_generate(prompts_):
            clock.start_step(args.seed, [str(p) for p in prompts_])  # as lit-grpo's runner at its step start
            result = original_generate(prompts_)
            # completion tokens (EOS included) and prompt tokens
            last["prompt_lens"] = [len(ids) for ids in result[0]]
            last["completion_lens"] = [len(ids) for ids in result[1]]
            clock.add_tokens(sum(last["completion_lens"]), sum(last["prompt_lens"]))
            return result

        trainer._generate = counted_generate
        params = sum(p.numel() for p in trainer.model.parameters())
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        load_rss = rss_mib()
        trainer.train()
    emit(
        clock,
        args,
        runner="trl",
        params=params,
        trainable=trainable,
        load_rss_mib=load_rss,
        trl=trl.__version__,
        transformers=transformers.__version__,
        torch=torch.__version__,
        trl_settings={key: plain(getattr(config, key, None)) for key in TRL_SETTINGS},
        dtype=str(model.dtype).removeprefix("torch."),
        autocast="bf16" if config.bf16 else None,
        evals=held.evals,
        target=held.target,
    )


if __name__ == "__main__":
    main()
