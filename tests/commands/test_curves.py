"""``lit-grpo curves``, the weight-curve command: table values, PNG and TensorBoard figure, its error messages."""

import pytest

from lit_grpo import GRPO, SoftmaxGRPO
from lit_grpo.commands.curves import curves as main
from lit_grpo.commands.curves import estimator_from_spec as parse_estimator
from tests.callbacks.events import read_events


def test_table_png_and_tensorboard_figure(tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert (
        main(
            [
                "--estimators",
                "GRPO:std=population",
                "Sign",
                "MaxRL",
                "SoftmaxGRPO",
                "--group-size",
                "4",
                "--points",
                "20",
                "--out",
                str(out),
                "--logdir",
                str(tmp_path / "tb"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["Sign"].count(" 2.0000 ") == 7  # Sign weighs every pass rate by 2
    cells = [float(c) for c in rows["MaxRL"].split("|")[2:-1]]
    assert cells[1] == pytest.approx(2.71, abs=0.005) and cells[3] == pytest.approx(1.75)  # p = 0.1, 0.5
    grpo = [float(c) for c in rows["GRPO:std=population"].split("|")[2:-1]]
    assert grpo[1] == pytest.approx(1.6903, abs=1e-4) and grpo[5] == pytest.approx(1.6903, abs=1e-4)
    assert out.stat().st_size > 1000
    assert "estimator/weight_curve" in read_events(str(tmp_path / "tb")).Tags()["images"]


def test_estimator_specs_take_arguments_and_class_paths():
    est = parse_estimator("SoftmaxGRPO:tau=0.5")
    assert isinstance(est, SoftmaxGRPO) and est.tau == 0.5
    assert isinstance(parse_estimator("lit_grpo.estimators.GRPO:std=population,eps=1e-3"), GRPO)


def test_bad_names_and_arguments_say_how_to_fix_them(capsys):
    with pytest.raises(SystemExit, match="unknown AdvantageEstimator 'Nope'; choose one of DrGRPO, GPG, GRPO, .*OPO"):
        main(["--estimators", "Nope"])  # every registered estimator is named, none kept in a list by hand
    with pytest.raises(SystemExit, match="write key=value"):
        main(["--estimators", "GRPO:population"])
    with pytest.raises(SystemExit, match="--estimators GRPO:sdt=population: .*'sdt'"):
        main(["--estimators", "GRPO:sdt=population"])
    with pytest.raises(
        SystemExit, match="GRPO at --group-size 1: group size G=1 is below.*larger --group-size"
    ):
        main(["--estimators", "GRPO", "--group-size", "1"])


def test_estimators_that_couple_groups_are_refused_whatever_the_group_size():
    with pytest.raises(SystemExit, match="GPG.*whole batch"):
        main(["--estimators", "GPG", "--group-size", "8"])
