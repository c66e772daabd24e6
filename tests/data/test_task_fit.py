"""Every task through a few-step fit of the GRPO module on its fixture, with its default reward."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import lightning as L  # noqa: E402
import pytest  # noqa: E402
from task_fixtures import offline_datasets, write_aqua, write_gsm8k, write_math500, write_poetry  # noqa: E402

from lit_grpo.data import (  # noqa: E402
    GSM8K,
    MATH500,
    FileSource,
    MultipleChoice,
    PromptDataModule,
    ReferenceText,
    SyntheticArithmetic,
    SyntheticChoice,
)
from lit_grpo.models.tiny import build_tiny_model, char_tokenizer  # noqa: E402
from lit_grpo.module import GRPOModule  # noqa: E402
from lit_grpo.rewards import Format, MathVerify, WeightedSum  # noqa: E402
from lit_grpo.settings import Sampling  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    # one token per character: the "think" style's instructions make prompts of ~380 tokens
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", max_positions=1024))


def local_jsonl(root):
    root.mkdir()
    lines = [f'{{"q": "Add {a} and {a}.", "a": "{2 * a}", "level": {a % 3}}}' for a in range(8)]
    (root / "train.jsonl").write_text("\n".join(lines) + "\n")
    (root / "val.jsonl").write_text("\n".join(lines[:2]) + "\n")
    return FileSource(train=str(root / "train.jsonl"), val=str(root / "val.jsonl"), prompt_field="q",
                      answer_field="a", template="{q}", extra_fields=["level"], style="think")  # fmt: skip


TASKS = {  # each with its default reward; the local file with correctness + format
    "gsm8k": lambda d: GSM8K(path=write_gsm8k(d)),
    "math500": lambda d: MATH500(path=write_math500(d), val_size=2),
    "aqua": lambda d: MultipleChoice(path=write_aqua(d), style="think"),
    "poetry": lambda d: ReferenceText(
        path=write_poetry(d),
        prompt_field="poem name",
        answer_field="content",
        template="A poem titled {poem name}:",
        val_size=2,
    ),
    "arithmetic": lambda d: SyntheticArithmetic(num_train=8, num_val=2, num_test=0, max_operand=9),
    "choice": lambda d: SyntheticChoice(num_train=8, num_val=2, num_test=0, num_choices=3, max_operand=9),
    "jsonl": local_jsonl,
}


def reward_for(source):
    if hasattr(source, "default_reward"):
        return source.default_reward()
    return WeightedSum([MathVerify(), Format()], weights=[1.0, 0.1])


def fit(source, model, reward):
    module = GRPOModule(model=model, reward=reward, group_size=2, sampling=Sampling(max_new_tokens=8))
    dm = PromptDataModule(source, prompts_per_step=2, val_batch_size=2)
    trainer = L.Trainer(max_steps=2, enable_checkpointing=False, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=1, val_check_interval=2,
                        check_val_every_n_epoch=None, accelerator="cpu")  # fmt: skip
    trainer.fit(module, datamodule=dm)
    return trainer


@pytest.mark.parametrize("task", list(TASKS))
def test_task_fits_a_few_steps(task, tiny_model, tmp_path, monkeypatch):
    offline_datasets(tmp_path, monkeypatch)
    source = TASKS[task](tmp_path / task)
    trainer = fit(source, tiny_model, reward_for(source))
    metrics = trainer.callback_metrics
    assert trainer.global_step == 2
    assert "val/accuracy" in metrics and "rollout/reward_mean" in metrics
    # the references all parse and nothing failed: garbage completions score, they do not error
    assert (
        metrics["reward/unscorable"] == 0
        and metrics["reward/errors"] == 0
        and metrics["reward/timeouts"] == 0
    )


def test_chat_style_uses_the_policys_chat_template(tmp_path):
    model = build_tiny_model(tmp_path / "chat-model")
    tok = char_tokenizer()
    tok.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] "
    tok.save_pretrained(model)
    source = SyntheticArithmetic(num_train=4, num_val=2, num_test=0, max_operand=9, style="chat")
    seen = []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.extend(batch.prompts)

    module = GRPOModule(model=str(model), reward=source.default_reward(), group_size=2,
                        sampling=Sampling(max_new_tokens=4))
    trainer = L.Trainer(max_steps=1, enable_checkpointing=False, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=[Record()])  # fmt: skip
    trainer.fit(module, datamodule=PromptDataModule(source, prompts_per_step=2))
    assert len(seen) == 2 and all(p.startswith("[user] ") and p.endswith("=\n[assistant] ") for p in seen)
