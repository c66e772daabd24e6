"""Any Lightning logger as the run's logger: scalars go to each, and CompletionSamples writes its table the way
each keeps tables (CSV rows, an MLflow table artifact, a W&B table, TensorBoard text); a logger with no tables is
told so once in the log. MLflow and W&B run offline (a local file store, offline mode) where installed."""

from __future__ import annotations

import csv
import importlib.util
import json
import logging

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger, Logger

from lit_grpo.callbacks import CompletionSamples
from lit_grpo.callbacks.samples import COLUMNS
from tests.helpers import tiny_data, tiny_module, tiny_trainer


def _fit(tmp_path, model, logger, steps=2):
    L.seed_everything(0)
    trainer = tiny_trainer(tmp_path, max_steps=steps, logger=logger, log_every_n_steps=1,
                           callbacks=[CompletionSamples(every_n_steps=1, num_prompts=2, num_completions=3)])
    trainer.fit(tiny_module(model), datamodule=tiny_data())
    return trainer


def test_a_csv_logger_gets_the_scalars_and_the_samples_as_rows(tmp_path, sft_model_path):
    logger = CSVLogger(tmp_path, name="csv")
    _fit(tmp_path, sft_model_path, logger)
    with open(f"{logger.log_dir}/metrics.csv") as f:
        metrics = list(csv.DictReader(f))
    assert any(r.get("rollout/reward_mean") for r in metrics)
    with open(f"{logger.log_dir}/samples_completions.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", *COLUMNS]
    assert [int(r[0]) for r in rows[1:]] == [0] * 6 + [1] * 6  # 2 prompts x 3 completions, at each step
    assert all(r[4] for r in rows[1:]) and {r[8] for r in rows[1:]} <= {"True", "False"}


class NoTables(Logger):
    """A logger that keeps scalars only."""

    def __init__(self):
        super().__init__()
        self.metrics = []

    name, version = "none", 0

    def log_metrics(self, metrics, step=None):
        self.metrics.append(metrics)

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def test_a_logger_without_tables_gets_the_scalars_and_a_word_in_the_log(tmp_path, sft_model_path, caplog):
    logger = NoTables()
    with caplog.at_level(logging.WARNING, logger="lit_grpo.callbacks._logging"):
        _fit(tmp_path, sft_model_path, logger)
    assert any("rollout/reward_mean" in m for m in logger.metrics)
    said = [r.getMessage() for r in caplog.records if "keeps no tables" in r.getMessage()]
    assert len(said) == 1 and "NoTables keeps no tables: samples/completions" in said[0]


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs mlflow: pip install 'lit-grpo[mlflow]'")
def test_an_mlflow_logger_in_a_local_store_gets_the_scalars_and_a_table_artifact(tmp_path, sft_model_path,
                                                                                 monkeypatch):
    from lightning.pytorch.loggers import MLFlowLogger

    # MLflow 3 keeps the file store for those who ask (its database store needs SQLAlchemy, not in the extra)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    logger = MLFlowLogger(experiment_name="lit-grpo", tracking_uri=f"file:{tmp_path / 'mlruns'}")
    _fit(tmp_path, sft_model_path, logger)
    client = logger.experiment
    assert client.get_metric_history(logger.run_id, "rollout/reward_mean")
    local = client.download_artifacts(logger.run_id, "samples/completions/step_1.json", str(tmp_path / "dl"))
    table = json.loads(open(local).read())
    assert table["columns"] == list(COLUMNS) and len(table["data"]) == 6


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="needs wandb: pip install 'lit-grpo[wandb]'")
def test_a_wandb_logger_offline_gets_the_scalars_and_a_table(tmp_path, sft_model_path, monkeypatch):
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = WandbLogger(project="lit-grpo", save_dir=str(tmp_path), offline=True)
    _fit(tmp_path, sft_model_path, logger)
    run_dir = logger.experiment.dir
    logger.experiment.finish()
    tables = sorted((tmp_path / "wandb").rglob("completions_*.table.json"))
    assert len(tables) == 2, run_dir  # one a step
    table = json.loads(tables[-1].read_text())
    assert table["columns"] == list(COLUMNS) and len(table["data"]) == 6
