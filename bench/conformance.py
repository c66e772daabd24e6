"""Conformance with the peers: golden rewards, masks and log-probs through each peer's own functions and
through the lit-grpo config documented as its equivalent; advantages, token weights, losses and their
gradients compared numerically.

Runs in the peers' environment (``bash bench/setup_peers_env.sh`` creates ``bench/.venv-peers`` with TRL,
verl's ``core_algos`` and OpenRLHF's ``models.loss``; none is a dependency of lit-grpo):

    bench/.venv-peers/bin/python bench/conformance.py               # run, write the reference and the table
    bench/.venv-peers/bin/python bench/conformance.py --verify      # run, compare with the committed reference
    bench/.venv-peers/bin/python bench/conformance.py --check-imports

Writes ``bench/conformance_reference.json`` (each case's peer numbers and lit-grpo's, with the peer versions
that produced them; ``tests/bench/test_conformance.py`` checks lit-grpo's side against it in the main environment)
and the table of ``docs/conformance.md`` between its markers. The cases (golden data, peer settings, the
lit-grpo equivalents) are in ``bench/conformance_cases.py``.

TRL is driven through a real ``GRPOTrainer`` on the committed tiny policy: the generation is replaced by
the golden completions and the reward function returns the golden rewards, so the advantages are those of
``_generate_and_score_completions``; the loss is ``_compute_loss`` with the per-token log-probs replaced by
the golden ones. verl's ``verl.trainer.ppo.core_algos`` and OpenRLHF's ``openrlhf.models.loss`` are imported
without their packages' ``__init__`` (which imports their GPU stack) and called directly.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import math
import site
import sys
import tempfile
import traceback
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conformance_cases import (  # noqa: E402,E501
    CASES,
    LENGTHS,
    TOLERANCE,
    Case,
    G,
    N,
    P,
    T,
    lit_side,
    logprobs,
    mask,
    max_difference,
    rewards,
)

REFERENCE = HERE / "conformance_reference.json"
DOC = HERE.parent / "docs" / "conformance.md"
BEGIN, END = "<!-- conformance table: begin -->", "<!-- conformance table: end -->"
MODEL = HERE.parent / "assets" / "tiny-arith-sft"


def _import_without_init(package: str, module: str):
    """Import ``module`` of ``package`` without running the package's (and its parents') ``__init__``."""
    root = Path(site.getsitepackages()[0])
    parts = module.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__path__ = [str(root / name.replace(".", "/"))]
            sys.modules[name] = stub
    return importlib.import_module(module)


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# ---- TRL ----------------------------------------------------------------------------------------------


class TRL:
    """GRPOTrainer on the tiny policy, generation and log-probs replaced by the golden ones."""

    def __init__(self) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(MODEL)
        bad = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        self.token = next(i for i in range(3, 100) if i not in bad)
        self.trainers: dict[str, object] = {}

    def trainer(self, setting: dict, golden: list[float] | None = None):
        from datasets import Dataset
        from transformers import AutoModelForCausalLM
        from trl import GRPOConfig, GRPOTrainer

        state = {"rewards": golden}

        def golden_reward(completions, **kwargs):
            return [None if math.isnan(r) else r for r in state["rewards"]]

        options = {"loss_type": "dapo", "scale_rewards": "group", "beta": 0.0, **setting}
        if options["loss_type"] == "luspo":
            options.setdefault("importance_sampling_level", "sequence")
        config = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=N, num_generations=G,
                            max_completion_length=T, use_cpu=True, report_to="none", logging_strategy="no",
                            save_strategy="no", disable_tqdm=True, **options)  # fmt: skip
        model = AutoModelForCausalLM.from_pretrained(MODEL)
        trainer = GRPOTrainer(model=model, reward_funcs=golden_reward, args=config,
                              train_dataset=Dataset.from_list([{"prompt": "1+1="}] * N), processing_class=self.tokenizer)  # fmt: skip
        trainer.current_gradient_accumulation_steps = 1
        trainer.model.train()
        token = self.token

        def golden_generate(prompts):
            completions = [[token] * n for n in LENGTHS]
            return [[token, token]] * len(prompts), completions, None, ["x" * n for n in LENGTHS], None, {}, None, None

        trainer._generate = golden_generate
        return trainer, state

    def inputs(self) -> dict:
        m = mask()
        ids = torch.full((N, T), self.token) * m
        return {"prompt_ids": torch.full((N, 2), self.token), "prompt_mask": torch.ones(N, 2, dtype=torch.long),
                "completion_ids": ids, "completion_mask": m.long(), "num_items_in_batch": m.sum()}  # fmt: skip

    def loss(self, trainer, logp: torch.Tensor, inputs: dict) -> torch.Tensor:
        trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros(N, T), None)
        return trainer._compute_loss(trainer.model, inputs)

    def run(self, case: Case) -> dict[str, list]:
        out: dict[str, list] = {}
        trainer, state = self.trainer(case.setting)
        m, lp = mask(), logprobs()
        if "advantages" in case.quantities:
            state["rewards"] = rewards(case.golden).reshape(-1).tolist()
            prompts = [{"prompt": f"prompt {i // G}"} for i in range(N)]
            out["advantages"] = trainer._generate_and_score_completions(prompts)["advantages"].tolist()
        if "weights" in case.quantities:  # every advantage 1, on-policy: -d loss / d logp is the token weight
            logp = lp["logp"].clone().requires_grad_(True)
            inputs = {**self.inputs(), "advantages": torch.ones(N), "ref_per_token_logps": lp["logp"].clone()}
            self.loss(trainer, logp, inputs).backward()
            out["weights"] = (-logp.grad * m).tolist()
        if "loss" in case.quantities:
            logp = lp["logp"].clone().requires_grad_(True)
            inputs = {**self.inputs(), "advantages": lp["advantages"], "old_per_token_logps": lp["old"],
                      "ref_per_token_logps": lp["ref"]}  # fmt: skip
            loss = self.loss(trainer, logp, inputs)
            loss.backward()
            out["loss"], out["grad"] = [loss.item()], (logp.grad * m).tolist()
        return out


# ---- verl ---------------------------------------------------------------------------------------------


class Verl:
    def __init__(self) -> None:
        self.core = _import_without_init("verl", "verl.trainer.ppo.core_algos")
        self.config_cls = _import_without_init("verl", "verl.workers.config").ActorConfig

    def config(self, setting: dict):
        options = {k: setting[k] for k in ("clip_ratio_high", "clip_ratio_c") if k in setting}
        return self.config_cls(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1, rollout_n=1,
                               **options)  # fmt: skip

    def run(self, case: Case) -> dict[str, list]:
        import numpy as np
        from omegaconf import OmegaConf

        out: dict[str, list] = {}
        m, lp = mask().float(), logprobs()
        if "advantages" in case.quantities:
            scores = torch.zeros(N, T)
            scores[torch.arange(N), torch.tensor(LENGTHS) - 1] = rewards(case.golden).reshape(-1)  # at the last token
            index = np.array([f"prompt {i // G}" for i in range(N)], dtype=object)
            opts = {k: v for k, v in case.setting.items() if k != "adv_estimator"}
            config = OmegaConf.create({"norm_adv_by_std_in_grpo": opts.get("norm_adv_by_std_in_grpo", True)})
            fn = self.core.get_adv_estimator_fn(case.setting["adv_estimator"])
            kwargs = {"norm_adv_by_std_in_grpo": opts["norm_adv_by_std_in_grpo"]} if "grpo" == case.setting[
                "adv_estimator"].removesuffix("_vectorized") else {}
            adv, _ = fn(token_level_rewards=scores, response_mask=m, index=index, config=config, **kwargs)
            out["advantages"] = adv[:, 0].tolist()  # every completion has a first token
        if "weights" in case.quantities:
            loss_mat = torch.zeros(N, T, requires_grad=True)
            self.core.agg_loss(loss_mat, m, case.setting["loss_agg_mode"]).backward()
            out["weights"] = (loss_mat.grad * m).tolist()
        if "loss" in case.quantities:
            logp = lp["logp"].clone().requires_grad_(True)
            adv = lp["advantages"][:, None].expand(N, T) * m
            fn = self.core.get_policy_loss_fn(case.setting["policy_loss"])
            loss, _ = fn(old_log_prob=lp["old"], log_prob=logp, advantages=adv, response_mask=m,
                         loss_agg_mode=case.setting["loss_agg_mode"], config=self.config(case.setting))  # fmt: skip
            loss.backward()
            out["loss"], out["grad"] = [loss.item()], (logp.grad * m).tolist()
        if "kl" in case.quantities:
            out["kl"] = (self.core.kl_penalty(lp["logp"], lp["ref"], case.setting["kl_penalty"]) * m).tolist()
        return out


# ---- OpenRLHF -----------------------------------------------------------------------------------------


class OpenRLHF:
    def __init__(self) -> None:
        self.loss_module = _import_without_init("openrlhf", "openrlhf.models.loss")
        self.utils = _import_without_init("openrlhf", "openrlhf.models.utils")

    def run(self, case: Case) -> dict[str, list]:
        out: dict[str, list] = {}
        m, lp = mask().float(), logprobs()
        s = case.setting
        if "weights" in case.quantities:
            loss_mat = torch.zeros(N, T, requires_grad=True)
            self.loss_module.aggregate_loss(loss_mat, m, token_level_loss=s["token_level_loss"]).backward()
            out["weights"] = (loss_mat.grad * m).tolist()
        if "loss" in case.quantities:
            fn = self.loss_module.PolicyLoss(clip_eps_low=0.2, clip_eps_high=s.get("clip_eps_high", 0.2),
                                             dual_clip=s.get("dual_clip"), token_level_loss=s.get("token_level_loss", True),
                                             policy_loss_type=s.get("policy_loss_type", "ppo"))  # fmt: skip
            logp = lp["logp"].clone().requires_grad_(True)
            adv = lp["advantages"][:, None].expand(N, T) * m
            loss = fn(logp, lp["old"], adv, action_mask=m)[0]
            loss.backward()
            out["loss"], out["grad"] = [loss.item()], (logp.grad * m).tolist()
        if "kl" in case.quantities:
            kl = self.utils.compute_approx_kl(lp["logp"], lp["ref"], kl_estimator=s["kl_estimator"])
            out["kl"] = (kl * m).tolist()
        return out


PEERS = {"trl": (TRL, "trl"), "verl": (Verl, "verl"), "openrlhf": (OpenRLHF, "openrlhf")}


# ---- comparison and outputs ---------------------------------------------------------------------------


def compare(peer: dict[str, list], lit: dict[str, list]) -> dict[str, float]:
    """Per quantity the largest absolute difference (the loss's gradient under ``grad``)."""
    return {k: max_difference(peer[k], lit[k]) for k in peer if k in lit}


def status(case: Case, diffs: dict[str, float], error: str | None = None) -> str:
    if error:
        return f"not run: {error}"
    if case.lit is None:
        return "no lit-grpo equivalent yet"
    worst = max(diffs.values(), default=0.0)
    if worst <= TOLERANCE:
        return "equal within 1e-6"
    parts = ", ".join(f"{k} {v:.3g}" for k, v in diffs.items() if not v <= TOLERANCE)
    return f"differs: max abs difference {parts}"


def run_cases(only: set[str] | None = None) -> dict:
    runners: dict[str, object] = {}
    errors: dict[str, str] = {}
    results = {}
    for case in CASES:
        if only and case.peer not in only:
            continue
        if case.peer not in runners and case.peer not in errors:
            try:
                runners[case.peer] = PEERS[case.peer][0]()
            except Exception as exc:  # a peer that does not import is reported, not fatal
                errors[case.peer] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        entry: dict = {"peer": case.peer, "setting": case.setting, "lit": case.lit, "note": case.note}
        if case.peer in errors:
            entry["error"] = errors[case.peer]
        else:
            try:
                entry["peer_values"] = runners[case.peer].run(case)
            except Exception as exc:
                traceback.print_exc()
                entry["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        if case.lit is not None:
            entry["lit_values"] = lit_side(case)
        diffs = compare(entry.get("peer_values", {}), entry.get("lit_values", {}))
        entry["max_difference"] = diffs
        entry["status"] = status(case, diffs, entry.get("error"))
        results[case.id] = entry
        print(f"{case.id:75s} {entry['status']}", flush=True)
    return results


def table(results: dict, versions: dict[str, str]) -> str:
    lines = ["| peer setting | lit-grpo config | compared | result | why |", "|---|---|---|---|---|"]
    for case in CASES:
        r = results.get(case.id)
        if r is None:
            continue
        peer = f"{case.peer} {versions[case.peer]}: `{case.id.split('/', 1)[1]}`"
        lit = f"`{case.lit}`" if case.lit else "—"
        compared = ", ".join(case.quantities) + (f" ({case.golden} rewards)" if "advantages" in case.quantities else "")
        lines.append(f"| {peer} | {lit} | {compared} | {r['status']} | {case.note} |")
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    DOC.write_text(doc[:start] + "\n" + text + "\n" + doc[end:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verify", action="store_true", help="compare the peers' numbers with the committed reference")
    p.add_argument("--check-imports", action="store_true", help="import each peer's modules and stop")
    p.add_argument("--peer", action="append", choices=sorted(PEERS), help="run these peers only")
    args = p.parse_args()
    torch.set_num_threads(1)
    versions = {name: version(dist) for name, (_, dist) in PEERS.items()}
    if args.check_imports:
        for name, (cls, _) in PEERS.items():
            try:
                cls()
                print(f"{name} {versions[name]}: imports")
            except Exception as exc:
                print(f"{name} {versions[name]}: does not import: {type(exc).__name__}: {exc}")
        return 0
    results = run_cases(set(args.peer) if args.peer else None)
    if args.verify:
        saved = json.loads(REFERENCE.read_text())["cases"]
        bad = [cid for cid, r in results.items() if "peer_values" in r and cid in saved and
               any(max_difference(v, saved[cid]["peer_values"][k]) > TOLERANCE for k, v in r["peer_values"].items())]  # fmt: skip
        bad += [cid for cid, r in results.items() if "error" in r]  # a peer that no longer runs
        print("the peers' numbers match the committed reference" if not bad else f"changed or not run: {bad}")
        return 1 if bad else 0
    payload = {"produced_by": "bench/conformance.py", "peer_versions": versions,
               "torch": torch.__version__, "tolerance": TOLERANCE, "golden": {"P": P, "G": G, "T": T},
               "cases": results}  # fmt: skip
    cases = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in payload.pop("cases").items())
    head = json.dumps(payload, indent=1)[:-2]  # one case a line: reviewable diffs
    REFERENCE.write_text(f'{head},\n "cases": {{\n{cases}\n }}\n}}\n')
    write_doc(table(results, versions))
    print(f"wrote {REFERENCE} and the table of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
