"""Episodes per second with a tool that sleeps 0.5 s: one call after another (today's serial loop) against the
calls of different episodes running at once, and what isolating a tool costs per call.

    python bench/tool_concurrency.py --episodes 16 --reps 3 --before ../before \
        --json docs/results/agents/tool_concurrency.json --write docs/agents.md
    python bench/tool_concurrency.py --render --json docs/results/agents/tool_concurrency.json --write docs/agents.md

``--before`` names a checkout of the code before this change (``git worktree add ../before <commit>``), whose
serial loop is measured as well, in a child process. The policy is scripted (its turns cost nothing), so the
numbers are the environment's side of a rollout: each of the ``--episodes`` episodes (all in flight at once, as
the ``G`` episodes of a step's records are) calls the tool once, then answers. Modes:

- ``serial``: ``isolation: none`` with a sync tool, which runs each call in turn in the calling thread: the loop
  as it was before the rollout awaited the episodes' steps together;
- ``process``: the default, a sync tool in worker processes (``workers`` = episodes);
- ``async``: ``isolation: none`` with an ``async`` tool (``asyncio.sleep``), awaited together on the rollout's loop.

Each mode runs one rollout first (it starts the workers; its seconds are recorded as ``first_s``) and then
``--reps`` timed rollouts; the median gives episodes per second. The per-call costs time a calculator call inline
and isolated (warm workers), and a worker's start with ``forkserver`` and ``spawn``. The machine's CPU flags and
load average are recorded with the numbers; a loaded machine makes every mode slower, the sleeps dominate the
serial and concurrent rollouts alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from provenance import code_commit, code_env, command, write_block  # noqa: E402

BEGIN, END = "<!-- tool_concurrency.py:begin -->", "<!-- tool_concurrency.py:end -->"
DATA = ROOT / "docs" / "results" / "agents" / "tool_concurrency.json"
SLEEP_S = 0.5
TEMPLATE = ("{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}<eos>\n{% endfor %}"
            "{%- if add_generation_prompt %}<|assistant|>{% endif %}")


def nap(seconds: float) -> str:
    """Sleeps, then says so.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "rested"


async def anap(seconds: float) -> str:
    """Sleeps without blocking, then says so.

    Args:
        seconds: How long to sleep.
    """
    await asyncio.sleep(seconds)
    return "rested"


def scripted_engine(tokenizer, tool: str):
    """A policy whose first turn calls ``tool`` and whose second answers (a RolloutEngine over token ids)."""
    import torch

    from lit_grpo.rollout.base import RolloutEngine
    from lit_grpo.rollout.functional import completion_mask, pad_prompts
    from lit_grpo.types import Rollouts

    call = "<tool_call>" + json.dumps({"name": tool, "arguments": {"seconds": SLEEP_S}}) + "</tool_call><eos>"

    class Scripted(RolloutEngine):
        def bind(self, policy, tokenizer):
            pass

        def generate(self, prompts, n, sampling):
            raise NotImplementedError

        def generate_ids(self, prompt_ids, n, sampling):
            texts = [call if tokenizer.decode(p).count("<|assistant|>") == 1 else "42<eos>" for p in prompt_ids]
            rows = [tokenizer.encode(t, add_special_tokens=False) for t in texts for _ in range(n)]
            ids = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_token_id)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = torch.tensor(r)
            mask, truncated = completion_mask(ids, [tokenizer.eos_token_id])
            prompt, prompt_mask = pad_prompts(prompt_ids, tokenizer.pad_token_id)
            return Rollouts(prompt.repeat_interleave(n, 0), prompt_mask.repeat_interleave(n, 0), ids, mask,
                            torch.zeros(ids.shape), [""] * len(rows), truncated, n)

    return Scripted()


def rollout_seconds(env, tool: str, episodes: int) -> float:
    from lit_grpo.envs import run_episodes
    from lit_grpo.models.tiny import char_tokenizer
    from lit_grpo.types import SamplingParams

    tok = char_tokenizer()
    tok.chat_template = TEMPLATE
    records = [{"prompt": "Q", "reference": "42", "id": "0", "columns": {}}]
    start = time.perf_counter()
    out = run_episodes(scripted_engine(tok, tool), tok, records, env, n=episodes,
                       sampling=SamplingParams(max_new_tokens=200), max_turns=2)
    seconds = time.perf_counter() - start
    results = [m["content"] for ep in out.episodes for m in ep.messages if m["role"] == "tool"]
    assert results == ["rested"] * episodes and all(ep.done for ep in out.episodes), results
    return seconds


def measure_mode(mode: str, episodes: int, reps: int) -> dict:
    from lit_grpo.envs import ToolEnvironment

    tool = "anap" if mode == "async" else "nap"
    if mode == "before":  # the checkout before tools ran concurrently: no isolation, no workers
        env = ToolEnvironment(tools=[nap], timeout_s=30.0)
    else:
        isolation = "process" if mode == "process" else "none"
        env = ToolEnvironment(tools=[nap, anap], isolation=isolation, workers=episodes, timeout_s=30.0)
    first = rollout_seconds(env, tool, episodes)
    times = [rollout_seconds(env, tool, episodes) for _ in range(reps)]
    getattr(env, "close", lambda: None)()
    median = statistics.median(times)
    return {"mode": mode, "episodes": episodes, "first_s": round(first, 3), "seconds": [round(t, 3) for t in times],
            "episodes_per_s": round(episodes / median, 3)}


def measure_before(code: Path, episodes: int, reps: int) -> dict:
    """The serial mode measured with the ``lit_grpo`` of the checkout ``code`` (in a child process)."""
    env = code_env(code, TOKENIZERS_PARALLELISM="false")
    out = subprocess.run([sys.executable, __file__, "--before-only", "--episodes", str(episodes), "--reps",
                          str(reps)], env=env, capture_output=True, text=True, check=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "code": code_commit(code)}


def call_costs(calls: int) -> dict:
    """Seconds per calculator call inline and isolated (warm), and a worker's start by start method."""
    from lit_grpo.envs.calculator import calculator
    from lit_grpo.envs.isolation import WorkerPool

    start = time.perf_counter()
    for _ in range(calls):
        calculator("12*34")
    inline = (time.perf_counter() - start) / calls
    out = {"inline_call_ms": round(inline * 1e3, 4)}
    for method in ("forkserver", "spawn"):
        pool = WorkerPool({"calculator": calculator}, workers=1, start_method=method)
        pool.call("calculator", {"expression": "1"}, 60)  # the first start (forkserver: the server imports once)
        starts = []
        for _ in range(3):
            pool.close()
            begin = time.perf_counter()
            pool.call("calculator", {"expression": "1"}, 60)
            starts.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        for _ in range(calls):
            pool.call("calculator", {"expression": "12*34"}, 60)
        out[f"{method}_call_ms"] = round((time.perf_counter() - begin) / calls * 1e3, 4)
        out[f"{method}_worker_start_s"] = round(statistics.median(starts), 3)
        pool.close()
    return out


def machine() -> dict:
    flags = ""
    if Path("/proc/cpuinfo").exists():
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
        flags = " ".join(sorted(flags))
    import torch

    return {"cpus": os.cpu_count(), "cpu_flags": flags, "python": platform.python_version(),
            "torch": torch.__version__, "platform": platform.platform(terse=True)}


def render(data: dict) -> str:
    rows = {r["mode"]: r for r in data["rows"]}
    base = rows.get("before", rows["serial"])["episodes_per_s"]
    against = "vs before" if "before" in rows else "vs serial"
    n = rows["serial"]["episodes"]
    what = {"serial": "sync tool, `isolation: none` (one call after another, as before)",
            "process": f"sync tool, `isolation: process` (default), `workers: {n}`",
            "async": f"`async` tool, `isolation: none`, `workers: {n}`"}
    lines = [f"{n} episodes in flight, each calling a tool that sleeps {SLEEP_S:g} s once and then answering "
             "(scripted policy: the environment's side alone):", "",
             f"| tools run | episodes/s | {against} | first rollout (s, starts the workers) |", "|---|---|---|---|"]
    if "before" in rows:
        what["before"] = f"sync tool, the code before this change (`{rows['before']['code']}`)"
    for mode in ("before", "serial", "process", "async"):
        if mode in rows:
            r = rows[mode]
            lines.append(f"| {what[mode]} | {r['episodes_per_s']:.2f} | {r['episodes_per_s'] / base:.1f}x | "
                         f"{r['first_s']:.2f} |")
    c = data["costs"]
    m = data["machine"]
    lines += ["", f"Per call (a calculator call, warm workers): {c['inline_call_ms']:.3f} ms inline, "
              f"{c['forkserver_call_ms']:.2f} ms isolated (`forkserver`), {c['spawn_call_ms']:.2f} ms isolated "
              f"(`spawn`). A new worker (after a kill, or the first call of a pool): "
              f"{c['forkserver_worker_start_s']:.2f} s with `forkserver`, {c['spawn_worker_start_s']:.2f} s with "
              "`spawn` (which imports everything again), hence `forkserver` by default; the very first "
              f"`forkserver` worker of a process took {data['forkserver_first_s']:.1f} s (the server imports the "
              "tools' modules once).", "",
              f"Measured on {m['cpus']} CPU cores (load average {data['load_before']:.1f} before, "
              f"{data['load_after']:.1f} after; the machine was shared), Python {m['python']}, torch {m['torch']}, "
              f"code {data['code']}: `{data['command']}` ([data](results/agents/tool_concurrency.json), with "
              "the CPU flags)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300, help="calls timed for the per-call costs")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--write", type=Path, default=None, help="a markdown file with the tool_concurrency block")
    parser.add_argument("--render", action="store_true", help="render --json into --write without measuring")
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of the code before tools ran concurrently: its serial loop is measured too")
    parser.add_argument("--before-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.before_only:  # in a child whose lit_grpo is the --before checkout's
        print(json.dumps(measure_mode("before", args.episodes, args.reps)))
        return
    if args.render:
        data = json.loads(args.json.read_text())
    else:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        load_before = os.getloadavg()[0]
        from lit_grpo.envs.calculator import calculator
        from lit_grpo.envs.isolation import WorkerPool

        begin = time.perf_counter()  # the process's first forkserver worker: the server starts and imports
        pool = WorkerPool({"calculator": calculator}, workers=1)
        pool.call("calculator", {"expression": "1"}, 600)
        forkserver_first = time.perf_counter() - begin
        pool.close()
        rows = [measure_mode(mode, args.episodes, args.reps) for mode in ("serial", "process", "async")]
        if args.before is not None:
            rows.append(measure_before(args.before, args.episodes, args.reps))
        data = {"rows": rows, "costs": call_costs(args.calls), "forkserver_first_s": round(forkserver_first, 3),
                "machine": machine(), "load_before": round(load_before, 2),
                "load_after": round(os.getloadavg()[0], 2), "code": code_commit(),
                "command": command("bench/tool_concurrency.py", sys.argv[1:])}
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(render(data))
    if args.write:
        write_block(args.write, BEGIN, END, "\n" + render(data))


if __name__ == "__main__":
    main()
