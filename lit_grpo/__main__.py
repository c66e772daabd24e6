"""``python -m lit_grpo``: the ``lit-grpo`` command (:mod:`lit_grpo.commands`)."""

from lit_grpo.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
