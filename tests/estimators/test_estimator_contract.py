"""The contract every estimator lit_grpo.estimators registers keeps, and its export by name."""

import ast
import importlib
import inspect
import math
import pkgutil
from pathlib import Path

import pytest
import torch
from jsonargparse import ArgumentParser

import lit_grpo.estimators as estimators
from lit_grpo.components import subclasses
from lit_grpo.estimators import REGISTRY, AdvantageEstimator

CLASSES = list(REGISTRY.values())


def _rewards() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    r = (torch.rand(4, 6, generator=gen) < 0.5).float()  # [P, G]
    r[0, 1] = 0.75  # exact in every floating dtype
    r[1, 2] = math.nan
    r[2] = math.nan  # an all-unscorable group
    r[3] = torch.tensor([1.0, 0, 0, 1, 1, 0])
    return r


#: Completion lengths ``[P, G]`` in tokens, passed to every estimator as the training step does.
LENGTHS = torch.tensor([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8], [9, 7, 9, 3, 2, 3], [8, 4, 6, 2, 6, 4]])


def test_every_module_of_the_package_is_registered_and_resolvable():
    helpers = {"base", "functional"}  # the interface and the maths
    for info in pkgutil.iter_modules(estimators.__path__):
        if info.name in helpers:
            continue
        module = importlib.import_module(f"lit_grpo.estimators.{info.name}")
        defined = [c for c in CLASSES if c.__module__ == module.__name__]
        assert defined, f"lit_grpo/estimators/{info.name}.py defines no registered estimator"
    assert len(CLASSES) >= 2 and sorted(estimators.__all__) == sorted(["AdvantageEstimator", *REGISTRY])
    # LightningCLI's short names resolve to the same classes
    found = subclasses(AdvantageEstimator)
    assert all(found[name] is cls for name, cls in REGISTRY.items())


def _listed(init: Path) -> tuple[set[str], set[str]]:
    """The names a package's ``__init__.py`` imports by name, and the names its literal ``__all__`` lists."""
    tree = ast.parse(init.read_text())
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    listed = {elt.value for node in tree.body if isinstance(node, ast.Assign)
              and any(getattr(t, "id", None) == "__all__" for t in node.targets)
              for elt in node.value.elts if isinstance(elt, ast.Constant)}
    return imported, listed


def test_every_registered_class_is_exported_by_name():
    # the component packages export what they register (one rule: estimators and losses alike); the package's
    # face is written out, not added at run time, so that grep and editors find lit_grpo.Sign: a new estimator,
    # loss or importance correction fails here until lit_grpo/__init__.py imports and lists it
    import lit_grpo
    import lit_grpo.losses

    for package in (estimators, lit_grpo.losses):
        assert all(getattr(package, name) is cls for name, cls in package.REGISTRY.items())
        assert set(package.REGISTRY) <= set(package.__all__)
    registered = {**REGISTRY, **lit_grpo.losses.REGISTRY}
    imported, listed = _listed(Path(lit_grpo.__file__))
    assert not hasattr(lit_grpo, "__getattr__")  # no name is made up on first use
    for name, cls in registered.items():
        assert name in imported and name in listed, f"lit_grpo/__init__.py must import and list {name}"
        assert getattr(lit_grpo, name) is cls
    assert set(lit_grpo.__all__) == listed and all(hasattr(lit_grpo, name) for name in lit_grpo.__all__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_output_contract(cls):
    estimator = cls()
    rewards = _rewards().requires_grad_()
    before = rewards.detach().clone()
    adv = estimator(rewards, lengths=LENGTHS)
    assert adv.shape == rewards.shape
    assert adv.dtype == torch.float32
    assert adv.isfinite().all()
    assert not adv.requires_grad and adv.grad_fn is None
    torch.testing.assert_close(rewards.detach(), before, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(adv, estimator(rewards, lengths=LENGTHS))
    assert torch.equal(adv[2], torch.zeros(6))  # all-unscorable group
    assert adv[1, 2] == 0  # unscorable completion


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_groups_are_independent_and_p_equal_one_works(cls):
    estimator, rewards = cls(), _rewards()
    rows = torch.cat([estimator(row[None], lengths=lens[None]) for row, lens in zip(rewards, LENGTHS, strict=True)])
    if not estimator.couples_groups:
        assert torch.equal(estimator(rewards, lengths=LENGTHS), rows)
        return
    # a batch-coupled estimator scales each group by a positive number taken from the batch
    together = estimator(rewards, lengths=LENGTHS)
    assert (together != 0).sum() >= 6  # groups 0 and 3 vary
    for alone, joint in zip(rows, together, strict=True):
        assert torch.equal(alone == 0, joint == 0) and torch.equal(alone > 0, joint > 0)
        ratio = joint[alone != 0] / alone[alone != 0]
        torch.testing.assert_close(ratio, ratio[:1].expand_as(ratio))


#: Two mixed groups and a constant one: a group's advantages change with the batch if anything couples them.
COUPLING = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 1]])


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_couples_groups_is_declared_exactly_when_a_group_depends_on_the_batch(cls):
    estimator, lengths = cls(), torch.tensor([[2, 5, 3, 4]]).expand(3, 4)
    together = estimator(COUPLING, lengths=lengths)
    alone = torch.cat([estimator(row[None], lengths=lengths[:1]) for row in COUPLING])
    assert isinstance(estimator.couples_groups, bool)
    assert estimator.couples_groups == (not torch.allclose(together, alone, rtol=0, atol=1e-6))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_needs_lengths_is_declared_exactly_when_the_lengths_matter(cls):
    estimator, rewards = cls(), _rewards()
    assert isinstance(cls.needs_lengths, bool)
    if cls.needs_lengths:
        with pytest.raises(ValueError, match="lengths"):
            estimator(rewards)
        assert not torch.equal(estimator(rewards, lengths=LENGTHS), estimator(rewards, lengths=LENGTHS.flip(-1)))
    else:
        assert torch.equal(estimator(rewards), estimator(rewards, lengths=LENGTHS))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_completions_within_a_group_are_exchangeable(cls):
    estimator, rewards = cls(), _rewards()
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(estimator(rewards[:, perm], lengths=LENGTHS[:, perm]),
                               estimator(rewards, lengths=LENGTHS)[:, perm])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_any_floating_dtype_gives_float32(cls, dtype):
    rewards = _rewards()
    adv = cls()(rewards.to(dtype), lengths=LENGTHS)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, cls()(rewards, lengths=LENGTHS))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_constructor_is_a_typed_config_schema(cls):
    for param in inspect.signature(cls).parameters.values():
        assert param.annotation is not inspect.Parameter.empty, param.name
        assert param.default is not inspect.Parameter.empty, param.name
    estimator = cls()
    assert isinstance(estimator.min_group_size, int) and estimator.min_group_size >= 1
    assert repr(estimator).startswith(f"{cls.__name__}(")
    assert cls.__doc__ and "arXiv" in cls.__doc__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_buildable_from_a_config_by_short_name(cls):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--estimator", type=AdvantageEstimator)
    config = parser.parse_args([f"--estimator={cls.__name__}"])
    assert type(parser.instantiate(config).estimator) is cls
