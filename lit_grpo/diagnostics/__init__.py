"""Diagnostics as pure functions: degeneracy, pass@k, spectral ranks, budgets, weight curves, gradient
fidelity.

Callbacks and commands read training outputs and call these; nothing here logs, parses arguments, writes
files or holds a model. (The statistics over seeds are :mod:`lit_grpo.lab.stats`.)
"""

from lit_grpo.diagnostics.budget import (
    BIN_LABELS,
    DIFFICULTY_BINS,
    advantage_budget,
    advantage_mass,
    bin_index,
    budget_shares,
    positive_negative_shares,
)
from lit_grpo.diagnostics.degeneracy import (
    EMASuccessTracker,
    degeneracy_summary,
    degenerate_groups,
    iid_degeneracy,
    per_prompt_iid_degeneracy,
    starved_fraction,
    unbiased_iid_degeneracy,
)
from lit_grpo.diagnostics.passk import pass_at_k, pass_at_k_curve, pass_at_k_ks, pass_at_k_per_prompt
from lit_grpo.diagnostics.rank import (
    effective_rank,
    energy_rank,
    random_projection,
    spectrum_summary,
    stable_rank,
)
from lit_grpo.diagnostics.weight_curve import (
    advantage_mass_by_k,
    binary_groups,
    plus_minus_advantages,
    weight_curve,
)

__all__ = [
    "BIN_LABELS",
    "DIFFICULTY_BINS",
    "EMASuccessTracker",
    "advantage_budget",
    "advantage_mass",
    "advantage_mass_by_k",
    "bin_index",
    "binary_groups",
    "budget_shares",
    "degeneracy_summary",
    "degenerate_groups",
    "effective_rank",
    "energy_rank",
    "iid_degeneracy",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_at_k_ks",
    "pass_at_k_per_prompt",
    "per_prompt_iid_degeneracy",
    "plus_minus_advantages",
    "positive_negative_shares",
    "random_projection",
    "spectrum_summary",
    "stable_rank",
    "starved_fraction",
    "unbiased_iid_degeneracy",
    "weight_curve",
]
