"""Conformance with the peers, checked without them: lit-grpo's side of every case of
``bench/conformance_cases.py`` against the peers' numbers recorded in ``bench/conformance_reference.json``
(produced by ``bench/conformance.py`` in the peers' environment, with the peer versions it names).

Rows recorded as equal must stay equal within 1e-6; rows recorded as different must differ exactly as
recorded (the difference is documented in docs/conformance.md), and the documented reasons are checked
where they are arithmetic. The peers themselves are not needed: the committed numbers are what is checked.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from conformance_cases import CASES, TOLERANCE, G, lit_side, max_difference  # noqa: E402

REFERENCE = json.loads((BENCH / "conformance_reference.json").read_text())
RECORDED = REFERENCE["cases"]


def test_the_reference_names_the_peer_versions_and_holds_every_case():
    assert REFERENCE["peer_versions"] == {"trl": "1.16.0", "verl": "0.9.1", "openrlhf": "0.11.2"}
    assert set(RECORDED) == {c.id for c in CASES}, "rerun bench/conformance.py after changing the cases"
    missing = [cid for cid, r in RECORDED.items() if "peer_values" not in r]
    assert not missing, f"cases the peers did not run when the reference was made: {missing}"


@pytest.mark.parametrize("case", [c for c in CASES if c.lit is not None], ids=lambda c: c.id)
def test_lit_grpo_matches_the_recorded_peer_numbers_as_documented(case):
    recorded = RECORDED[case.id]
    lit = lit_side(case)
    assert set(lit) == set(recorded["peer_values"])
    for key, values in lit.items():
        diff = max_difference(values, recorded["peer_values"][key])
        expected = recorded["max_difference"][key]
        if expected <= TOLERANCE:
            assert diff <= TOLERANCE, f"{case.id}: {key} now differs from the peer by {diff:.3g}"
        else:  # a documented difference: it must be the one recorded
            assert case.note, f"{case.id}: a difference without a documented reason"
            assert diff == pytest.approx(expected, abs=TOLERANCE), f"{case.id}: {key}"


def _pair(case_id: str) -> tuple[torch.Tensor, torch.Tensor]:
    case = next(c for c in CASES if c.id == case_id)
    return torch.tensor(lit_side(case)["advantages"]), torch.tensor(RECORDED[case_id]["peer_values"]["advantages"])


@pytest.mark.parametrize("case_id", ["trl/scale_rewards=group/scalar",
                                     "verl/adv_estimator=grpo,norm_adv_by_std_in_grpo=True/scalar"])  # fmt: skip
def test_the_float_noise_difference_is_confined_to_the_near_constant_group(case_id):
    lit, peer = _pair(case_id)
    noisy = slice(G, 2 * G)  # group 1: [0.5, 0.5, 0.5, 0.5000003]
    assert torch.equal(lit[noisy], torch.zeros(G))  # lit-grpo: a constant group
    assert peer[noisy].abs().max() > 1e-3  # the peer: its noise divided by std + eps
    rest = torch.cat([lit[:G], lit[2 * G :]]) - torch.cat([peer[:G], peer[2 * G :]])
    assert rest.abs().max() <= TOLERANCE


def test_verl_grpo_passk_is_lit_grpo_passatk_over_g_on_binary_rewards():
    lit, peer = _pair("verl/adv_estimator=grpo_passk,norm_adv_by_std_in_grpo=False/binary")
    assert torch.allclose(lit, G * peer, atol=TOLERANCE)


def test_verl_gpg_alpha_counts_nonzero_rewards():
    lit, peer = _pair("verl/adv_estimator=gpg/binary")
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    b, informative, nonzero = rewards.numel(), 2 * G, int((rewards != 0).sum())  # two groups vary
    assert torch.allclose(peer * (b / informative) / (b / nonzero), lit, atol=TOLERANCE)


def test_trl_kl_term_without_its_importance_weight_is_ppoclips():
    with_weight = RECORDED["trl/loss_type=dapo,beta=0.04"]["max_difference"]
    without = RECORDED["trl/loss_type=dapo,beta=0.04,use_bias_correction_kl=False"]["max_difference"]
    assert max(with_weight.values()) > 1e-4 and max(without.values()) <= TOLERANCE
    assert not math.isnan(max(without.values()))


PEERS_PYTHON = BENCH / ".venv-peers" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not PEERS_PYTHON.exists(), reason="no bench/.venv-peers (bash bench/setup_peers_env.sh): "
                    "the recorded peer numbers above are what is checked")  # fmt: skip
def test_the_installed_peers_still_give_the_recorded_numbers():
    import subprocess

    done = subprocess.run([str(PEERS_PYTHON), str(BENCH / "conformance.py"), "--verify"], capture_output=True,
                          text=True, timeout=600, cwd=BENCH.parent)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the peers' numbers match the committed reference" in done.stdout
