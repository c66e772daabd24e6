"""A few-step fit with a TensorBoard logger, shared by the callback tests."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from tests.helpers import tiny_data, tiny_module, tiny_trainer


@pytest.fixture
def fit_run(tmp_path, sft_model_path):
    """``fit_run(callbacks, max_steps=3, val_check_interval=None, **module_kwargs)`` -> namespace.

    Trains the committed tiny policy on synthetic addition with a TensorBoard logger; returns the
    trainer, the module and the logger's directory.
    """

    def run(
        callbacks,
        max_steps: int = 3,
        val_check_interval: int | None = None,
        seed: int = 0,
        name: str = "run",
        **module_kwargs,
    ):
        L.seed_everything(seed)
        module = tiny_module(sft_model_path, **module_kwargs)
        logger = TensorBoardLogger(tmp_path, name=name)
        val = (
            {
                "limit_val_batches": 1,
                "val_check_interval": val_check_interval,
                "check_val_every_n_epoch": None,
            }
            if val_check_interval
            else {}
        )
        trainer = tiny_trainer(
            tmp_path,
            max_steps=max_steps,
            logger=logger,
            log_every_n_steps=1,
            callbacks=list(callbacks),
            num_sanity_val_steps=0,
            **val,
        )
        trainer.fit(module, datamodule=tiny_data())
        return SimpleNamespace(trainer=trainer, module=module, log_dir=logger.log_dir)

    return run
