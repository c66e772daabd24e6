"""bench/real_quickstart_time.py: what it reads from a run, and docs/real_model.md's quickstart block and interval
arithmetic against the committed data and config (no model is run here)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import real_quickstart_time as bench  # noqa: E402

from lit_grpo.callbacks import HeldOutReport  # noqa: E402

DOC = ROOT / "docs" / "real_model.md"
CONFIG = yaml.safe_load((ROOT / "configs" / "real" / "quickstart.yaml").read_text())


def _report_lines(capsys) -> list[str]:
    """What HeldOutReport prints for 200 prompts (greedy 0.25 -> 0.75, sampled 0 -> 0.5)."""
    report = HeldOutReport()
    scores = {"before": {"accuracy": torch.tensor([0.0, 0.0, 0.0, 1.0]).repeat(50), "reward_mean": torch.zeros(200)},
              "after": {"accuracy": torch.tensor([0.0, 1.0, 1.0, 1.0]).repeat(50),
                        "reward_mean": torch.tensor([0.0, 1.0]).repeat(100)}}

    def evaluate(trainer, module, when=""):
        report.values[when] = scores[when]
        return {name: v.mean().item() for name, v in scores[when].items()}

    report.evaluate = evaluate
    trainer = SimpleNamespace(loggers=[], global_step=1)
    report.on_train_start(trainer, None)
    report.on_train_end(trainer, None)
    return capsys.readouterr().out.splitlines()


def test_it_reads_the_held_out_lines_as_the_report_prints_them(capsys):
    held = bench.parse_heldout(_report_lines(capsys))
    assert set(held) == {"accuracy", "reward_mean"}
    assert held["accuracy"]["before"] == 0.25 and held["accuracy"]["after"] == 0.75 and held["accuracy"]["n"] == 200
    assert held["accuracy"]["change"] == 0.5
    half = 1.96 * math.sqrt(0.25 * 0.75 * 200 / 199) / math.sqrt(200)
    assert held["accuracy"]["before_half"] == held["accuracy"]["after_half"] == round(half, 3)
    assert held["reward_mean"]["before_half"] == 0.0 and held["reward_mean"]["change"] == 0.5


def test_phases_run_from_start_to_exit_and_sum_to_the_wall_time():
    printed = [(10.0, "model.dtype=auto: bfloat16 (x)"), (14.0, "Trainable params: 4.9 M"),
               (95.0, "Held-out prompts (accuracy = greedy, reward_mean = sampled):")]
    steps = [(30.0, 6.0), (36.0, 6.0), (40.0, 4.0)]  # (event wall time, step seconds): the first began at 24
    got = bench.phases(0.0, printed, steps, 97.0)
    assert got == {"start": 10.0, "model": 4.0, "heldout_before": 10.0, "training": 16.0, "heldout_after": 55.0,
                   "exit": 2.0}
    assert sum(got.values()) == 97.0


def _block() -> str:
    doc = DOC.read_text()
    return doc[doc.index(bench.BEGIN) + len(bench.BEGIN) : doc.index(bench.END)]


def test_the_doc_block_is_rendered_from_the_results():
    assert _block() == bench.render(), "run python bench/real_quickstart_time.py --write docs/real_model.md"


def test_the_results_are_those_of_the_config_and_hold_together():
    import json

    for path in (bench.FULL, bench.FLOAT32):
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        native = data["cpu_flags"]["avx512_bf16"] or data["cpu_flags"]["amx_bf16"]
        given = bench.given_dtype(data.get("options", []))
        assert data["dtype"] == (given if given not in (None, "auto") else "bfloat16" if native else "float32")
        assert abs(sum(data["phases_s"].values()) - data["wall_s"]) <= 0.1 * len(bench.PHASES)
        assert {part["n"] for part in data["heldout"].values()} == {_held_out_prompts()}
        assert data["steps"] == (data["max_steps"] or CONFIG["trainer"]["max_steps"])


def test_the_dtype_an_option_sets_is_read_in_either_form():
    assert bench.given_dtype(["--model.dtype=float32"]) == "float32"
    assert bench.given_dtype(["--trainer.max_steps=3", "--model.dtype", "bfloat16"]) == "bfloat16"
    assert bench.given_dtype(["--model.dtype=float32", "--model.dtype", "bfloat16"]) == "bfloat16"  # the last
    assert bench.given_dtype(["--model.dtypes=x", "--trainer.max_steps=3"]) is None
    assert bench.given_dtype(["--model.dtype"]) is None  # no value: the CLI itself says so


def _held_out_prompts() -> int:
    report = next(c for c in CONFIG["trainer"]["callbacks"] if c["class_path"].endswith("HeldOutReport"))
    return report["init_args"]["max_prompts"]


def test_the_held_out_size_resolves_ten_points_and_the_doc_says_so():
    n = _held_out_prompts()
    change = 1.96 * math.sqrt(0.5 / n)  # the change of two 0/1 means, per-prompt variance at most 0.5
    assert change <= 0.10 and n <= CONFIG["data"]["source"]["init_args"]["num_val"]
    text = " ".join(DOC.read_text().split())
    smallest = math.ceil(0.5 * (1.96 / 0.10) ** 2)
    assert f"first {n} of the 500 validation prompts" in text
    assert f"i.e. {smallest} prompts; with {n} each accuracy is within +-{0.98 / math.sqrt(n):.3f} and the change " \
           f"within +-{change:.3f} at worst" in text
    at_start = 1.96 * math.sqrt(0.07 * 0.93 / n)
    assert f"at the starting policy's sampled 0.07 the interval is +-{at_start:.3f}" in text


def test_the_config_uses_auto_dtype_and_the_exact_fast_decoder():
    init = CONFIG["model"]["init_args"]
    assert init["dtype"] == "auto"
    assert "engine" not in init  # the engine's defaults are its fastest exact settings
    from lit_grpo.rollout import HFGenerateEngine

    engine = HFGenerateEngine()
    assert (engine.decoder, engine.shrink, engine.sampler) == ("own", True, "inverse_cdf")
    assert re.search(r"model\.dtype=auto: bfloat16 \(the CPU has\s+avx512_bf16: native bf16 matmul\)",
                     DOC.read_text())


def test_the_doc_compares_the_two_dtypes_by_their_data():
    import json

    bf16, f32 = (json.loads(path.read_text()) for path in (bench.FULL, bench.FLOAT32))
    text = " ".join(DOC.read_text().split())
    assert (f"from {f32['phases_s']['training']:.0f} to {bf16['phases_s']['training']:.0f} s against float32 and the "
            f"whole command from {f32['wall_s'] / 60:.1f} to {bf16['wall_s'] / 60:.1f} minutes, at "
            f"{bf16['peak_rss_gib']:.1f} GiB peak memory against {f32['peak_rss_gib']:.1f}") in text
    assert (f"({bf16['heldout']['reward_mean']['after']:.3f} and {f32['heldout']['reward_mean']['after']:.3f}, each "
            f"+-{max(bf16['heldout']['reward_mean']['after_half'], f32['heldout']['reward_mean']['after_half']):.2f})"
            ) in text
