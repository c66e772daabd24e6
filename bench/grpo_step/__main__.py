"""``python -m bench.grpo_step``: the benchmark's one command (:mod:`.run`)."""

from .run import main

main()
