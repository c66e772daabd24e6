"""One-sample tests of per-seed values against a fixed value (e.g. "the excess over the prediction is 0").

They live in :mod:`lit_grpo.diagnostics.stats` with the other tests; this module keeps the old import path.
"""

from lit_grpo.diagnostics.stats import MAX_EXACT_FLIPS, one_sample_t_test, sign_flip_test

__all__ = ["MAX_EXACT_FLIPS", "one_sample_t_test", "sign_flip_test"]
