"""HeldOutReport prints each held-out number with its 95% interval, and the change's from per-prompt pairs."""

import math
from types import SimpleNamespace

import torch

from lit_grpo.callbacks import HeldOutReport
from lit_grpo.callbacks.heldout import half_width


def test_half_width_is_1_96_standard_errors():
    half = torch.tensor([0.0, 1.0]).repeat(100)  # p = 0.5, n = 200: the widest a 0/1 mean gets
    assert math.isclose(half_width(half), 1.96 * math.sqrt(0.25 * 200 / 199) / math.sqrt(200), rel_tol=1e-9)
    assert half_width(torch.ones(50)) == 0.0
    assert math.isnan(half_width(torch.ones(1)))


def test_the_report_prints_intervals_and_the_paired_change(capsys):
    before = {"accuracy": torch.zeros(200), "reward_mean": torch.tensor([0.0, 1.0]).repeat(100)}
    after = {"accuracy": torch.cat([torch.ones(40), torch.zeros(160)]), "reward_mean": torch.ones(200)}
    report = HeldOutReport()

    def evaluate(trainer, module, when=""):
        report.values[when] = (before, after)[when == "after"]
        return {name: v.mean().item() for name, v in report.values[when].items()}

    report.evaluate = evaluate
    trainer = SimpleNamespace(loggers=[], global_step=3)
    report.on_train_start(trainer, None)
    report.on_train_end(trainer, None)
    lines = capsys.readouterr().out.splitlines()
    accuracy = next(line for line in lines if "accuracy" in line and "before" in line)
    # after: 40 of 200 right, sd sqrt(0.2 * 0.8 * 200 / 199); the change's sd is the same (before all 0)
    half = 1.96 * math.sqrt(0.16 * 200 / 199) / math.sqrt(200)
    assert accuracy.split() == ["accuracy", "before", "0.000", "after", "0.200", "(95%:", "+-0.000,",
                                f"+-{half:.3f};", "change", "+0.200", f"+-{half:.3f};", "n=200)"]
    sampled = next(line for line in lines if line.lstrip().startswith("reward_mean"))
    assert "before 0.500   after 1.000   (95%: +-0.069, +-0.000; change +0.500 +-0.069; n=200)" in sampled


def test_a_resumed_report_prints_no_change_interval(capsys):
    report = HeldOutReport()
    report.load_state_dict({"before": {"accuracy": 0.25}})  # scored before the restart: no per-prompt values

    def evaluate(trainer, module, when=""):
        report.values[when] = {"accuracy": torch.ones(10)}
        return {"accuracy": 1.0}

    report.evaluate = evaluate
    report.on_train_end(SimpleNamespace(loggers=[], global_step=3), None)
    assert "before 0.250   after 1.000   (95%: +-0.000; n=10)" in capsys.readouterr().out
