"""scripts/probe_policy.py: a starting policy's accuracy, all-wrong groups and pass@k before any RL."""

import importlib.util
import json
from pathlib import Path

import pytest

from lit_grpo.models.tiny import build_tiny_model, char_tokenizer

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "probe_policy.py"


def probe(argv):
    spec = importlib.util.spec_from_file_location("probe_policy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(argv)


def fit_args(model, *extra):
    return ["--model=lit_grpo.GRPOModule", f"--model.model={model}", "--model.reward=lit_grpo.ExactMatch",
            "--model.sampling.max_new_tokens=4", "--data.source=lit_grpo.SyntheticArithmetic",
            "--data.source.init_args.max_operand=9", "--data.source.init_args.num_train=8",
            "--data.source.init_args.num_val=6", "--data.source.init_args.num_test=0",
            "--data.prompts_per_step=4", "--trainer.logger=false", *extra]  # fmt: skip


@pytest.mark.parametrize("style", ["plain", "chat"])
def test_the_probe_prints_accuracy_groups_and_pass_at_k(tmp_path, monkeypatch, capsys, style):
    monkeypatch.chdir(tmp_path)
    model = build_tiny_model(tmp_path / "policy")
    tok = char_tokenizer()
    tok.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] "
    tok.save_pretrained(model)
    # a chat-style source names no tokenizer: the probe renders its prompts with the policy's template, as training does
    probe(["--samples", "4", "--group-size", "2", "--max-prompts", "5", "--json", "probe.json", "--",
           *fit_args(model, f"--data.source.init_args.style={style}")])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    saved = json.loads((tmp_path / "probe.json").read_text())  # the printed numbers, and how they were made
    assert (saved["split"], saved["prompts"], saved["samples"], saved["group_size"]) == ("val", 5, 4, 2)
    assert f"{saved['sampled_accuracy']:.3f}" == out[1].split()[-1] and list(saved["pass_at_k"]) == ["1", "4"]
    assert saved["fit_args"][-1] == f"--data.source.init_args.style={style}"
    per_prompt = saved["correct_per_prompt"]  # in the split's order, so that two probes pair by prompt
    assert len(per_prompt) == 5 and all(0 <= c <= 4 for c in per_prompt)
    assert sum(per_prompt) / 20 == pytest.approx(saved["sampled_accuracy"], abs=5e-5)  # rounded to 4 places
    assert saved["never_solved"] == pytest.approx(per_prompt.count(0) / 5, abs=5e-5)
    assert out[0] == "val split: 5 prompts x 4 samples"
    assert out[1].startswith("sampled accuracy ") and 0.0 <= float(out[1].split()[-1]) <= 1.0
    assert out[2].startswith("G = 2 groups: all wrong ")
    assert [line.split()[0] for line in out[4:]] == ["pass@1", "pass@4"]
    assert float(out[4].split()[-1]) <= float(out[5].split()[-1])  # pass@k does not fall with k


def test_fewer_samples_than_a_group_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        probe(["--samples", "2", "--group-size", "4", "--", *fit_args(tmp_path)])
    assert "--samples=2 must be at least --group-size=4" in capsys.readouterr().err


def test_a_bounded_answer_task_gets_its_accuracy_by_number_of_answers(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    model = build_tiny_model(tmp_path / "policy")
    args = fit_args(model, "--data.source=lit_grpo.data.SyntheticResidue", "--data.source.init_args.min_modulus=2",
                    "--data.source.init_args.max_modulus=3", "--data.source.init_args.num_val=12")  # fmt: skip
    probe(["--samples", "4", "--group-size", "2", "--", *args])
    out = capsys.readouterr().out.splitlines()
    by_k = [line for line in out if line.startswith("k = ")]
    assert [line.split(":")[0] for line in by_k] == ["k = 2", "k = 3"]
    assert "(chance 0.500," in by_k[0] and "(chance 0.333," in by_k[1]
    assert sum(int(line.split(", ")[-1].split()[0]) for line in by_k) == 12  # every prompt in one k
    overall = float(out[1].split()[-1])  # the per-k accuracies average back to the overall one
    weighted = sum(float(line.split("accuracy ")[1].split()[0]) * int(line.split(", ")[-1].split()[0]) for line in by_k)
    assert abs(weighted / 12 - overall) < 2e-3


def test_the_probe_reports_turns_and_tool_calls_of_episodes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    model = build_tiny_model(tmp_path / "policy")
    tok = char_tokenizer()
    tok.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] "
    tok.save_pretrained(model)
    # (the tiny policy's 256-token context has no room for a tool description: one-turn episodes)
    engine = ('--model.engine={"class_path": "lit_grpo.envs.EpisodeEngine", "init_args": {"max_turns": 2, '
              '"environment": {"class_path": "lit_grpo.envs.SingleTurn"}}}')
    probe(["--samples", "2", "--group-size", "2", "--max-prompts", "3", "--", *fit_args(model, engine)])
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("episodes: "))
    assert line.startswith("episodes: turns 1.00 per episode, tool calls 0.00 per episode, episodes with a call 0.000")
