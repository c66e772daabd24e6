"""Reading an experiment YAML (``experiments/*.yaml``) into :class:`~lit_grpo.lab.spec.Experiment`.

Everything is checked before any run starts: unknown keys, labels, files, estimator names and metric
names each fail with a message naming the key and the fix. ``quick=True`` applies the config's ``quick``
section (seeds, extra arguments, a subset of the sweep).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from lit_grpo import resources
from lit_grpo.checks import require
from lit_grpo.components import resolve
from lit_grpo.extras import extras_named
from lit_grpo.lab.registry import TEST_SPLIT_REPORT, check_metric, import_class
from lit_grpo.lab.spec import (
    DEFAULT_SEED_ARGS,
    Arm,
    Curve,
    CurveX,
    Experiment,
    Metric,
    Prepare,
    Profile,
    Reduce,
    Requirement,
    Resources,
    Select,
    Tests,
    Transform,
)

#: The trainer's estimator base class, read by its class path as a config names classes (the lab imports no
#: trainer module; lit_grpo.lab.registry reads the modules and callbacks the same way).
ESTIMATOR_BASE = "lit_grpo.estimators.AdvantageEstimator"
_LABEL = re.compile(r"[A-Za-z0-9_.+-]+")
_KEYS = {
    "name",
    "claim",
    "runtime",
    "base",
    "args",
    "arms",
    "seeds",
    "sweep",
    "prepare",
    "metrics",
    "curves",
    "profiles",
    "threads_per_run",
    "resources",
    "seed_args",
    "tests",
    "reference",
    "select",
    "test",
    "quick",
}
#: Metrics of lit_grpo.callbacks.TestSplitReport that log their prompt-sampling SE under ``<name>_se``.
_TEST_SE = re.compile(r"test/(before/)?(accuracy|reward_mean|skill|pass@\d+)")


def _fail(where: str, message: str) -> ValueError:
    return ValueError(f"{where}: {message}")


def _require(ok: object, where: str, message: str) -> None:
    """:func:`~lit_grpo.checks.require` with the key the message is about in front (``where: message``)."""
    require(bool(ok), f"{where}: {message}")


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    _require(
        isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value),
        where,
        f"expected a list of strings, got {value!r}",
    )
    return tuple(str(v) for v in value)


def _keys(data: Any, allowed: set[str], where: str) -> dict:
    _require(isinstance(data, dict), where, f"expected a mapping, got {data!r}")
    unknown = set(data) - allowed
    _require(not unknown, where, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    return data


def _label(label: Any, where: str) -> str:
    _require(
        isinstance(label, str) and _LABEL.fullmatch(label),
        where,
        f"label {label!r} must be letters, digits and _ . + - only (it names directories)",
    )
    return label


def _files(paths: tuple[str, ...], where: str, named_in: Path) -> tuple[str, ...]:
    """The config files an experiment names, found by :func:`lit_grpo.resources.resolve_in`: a built-in
    experiment's are the built-in configs; a user's are relative to the working directory, else to the
    experiment's folder, else built-in names."""
    found = []
    for p in paths:
        path = resources.resolve_in(p, named_in)
        _require(
            path is not None,
            where,
            f"config file {p!r} does not exist (relative to the working directory or to "
            f"{named_in.parent}) and is no built-in config (`lit-grpo configs list`)",
        )
        found.append(path)
    return tuple(found)


def _choice(value: Any, literal: Any, where: str) -> Any:
    _require(value in get_args(literal), where, f"{value!r} is not one of {list(get_args(literal))}")
    return value


def _check_estimator(name: str, where: str) -> None:
    """A ValueError unless ``name`` names an estimator as LightningCLI resolves it (short name or class
    path)."""
    base = import_class(ESTIMATOR_BASE)  # importing it registers every estimator
    require(base is not None, f"{where}: the estimators' base class {ESTIMATOR_BASE} cannot be imported")
    resolve(base, name, where)


def _overlay_estimators(paths: tuple[str, ...], where: str) -> None:
    """Check the estimator class paths named by LightningCLI overlay files."""
    for p in paths:
        model = (yaml.safe_load(Path(p).read_text()) or {}).get("model") or {}
        est = model.get("init_args", {}).get("estimator")
        name = est.get("class_path") if isinstance(est, dict) else est
        if name:
            _check_estimator(str(name), f"{where} ({p})")


def callback_paths(configs: tuple[str, ...], args: tuple[str, ...]) -> tuple[str, ...]:
    """Class paths of the callbacks that LightningCLI config files and ``--trainer.callbacks`` arguments
    name."""
    entries: list[Any] = []
    for p in configs:
        trainer = (yaml.safe_load(Path(p).read_text()) or {}).get("trainer") or {}
        entries += _as_list(trainer.get("callbacks") if isinstance(trainer, dict) else None)
    for arg in args:
        key, _, value = arg.partition("=")
        if key in ("--trainer.callbacks", "--trainer.callbacks+"):
            try:
                entries += _as_list(yaml.safe_load(value))
            except yaml.YAMLError:
                continue
    paths = [e.get("class_path") if isinstance(e, dict) else e for e in entries]
    return tuple(dict.fromkeys(p for p in paths if isinstance(p, str) and "." in p))


def needed_extras(configs: tuple[str, ...], args: tuple[str, ...]) -> tuple[str, ...]:
    """The optional extras (:mod:`lit_grpo.extras`) that the classes named in LightningCLI config files (their
    values, not their comments) and in command-line arguments need, sorted."""
    texts = list(args)
    for p in configs:
        texts += _strings(yaml.safe_load(Path(p).read_text()))
    return tuple(sorted(extras_named(texts)))


def _strings(value: Any) -> list[str]:
    """Every string value of a parsed YAML document, at any depth."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _arm(label: str, data: Any, where: str, named_in: Path) -> Arm:
    data = _keys(data or {}, {"config", "estimator", "init_args", "args"}, where)
    configs = _files(_strs(data.get("config"), f"{where}.config"), f"{where}.config", named_in)
    _overlay_estimators(configs, where)
    estimator = data.get("estimator")
    if estimator is not None:
        _check_estimator(str(estimator), f"{where}.estimator")
    init_args = data.get("init_args") or {}
    _require(
        not init_args or estimator is not None,
        f"{where}.init_args",
        "needs `estimator` (the class they are passed to)",
    )
    return Arm(
        _label(label, where), configs, estimator, dict(init_args), _strs(data.get("args"), f"{where}.args")
    )


def _metric(data: Any, where: str, callbacks: tuple[str, ...]) -> Metric:
    data = {"name": data} if isinstance(data, str) else data
    allowed = {"name", "reduce", "tail", "transform", "chance", "test_against", "label", "primary",
               "equivalence", "prompts", "se", "minus"}  # fmt: skip
    data = _keys(data, allowed, where)
    _require("name" in data, where, "needs `name`, a logged metric such as val/accuracy")
    name = str(data["name"])
    check_metric(name, where, callbacks)
    minus = data.get("minus")
    if minus is not None:
        check_metric(str(minus), f"{where}.minus", callbacks)
        _require(data.get("transform", "none") == "none", where, "`minus` and `transform` cannot be combined")
    se = data.get("se")
    if se is None and minus is None and _TEST_SE.fullmatch(name):
        se = f"{name}_se"  # lit_grpo.callbacks.TestSplitReport logs it beside the metric
    if se is not None:
        check_metric(str(se), f"{where}.se", callbacks)
    prompts = data.get("prompts")
    _require(
        prompts is None or (isinstance(prompts, int) and prompts >= 1),
        f"{where}.prompts",
        f"{prompts!r} must be the number of held-out prompts (an integer >= 1)",
    )
    m = Metric(
        name,
        _choice(data.get("reduce", "last"), Reduce, f"{where}.reduce"),
        float(data.get("tail", 0.2)),
        _choice(data.get("transform", "none"), Transform, f"{where}.transform"),
        data.get("chance"),
        data.get("test_against"),
        data.get("label"),
        bool(data.get("primary", False)),
        _equivalence(data.get("equivalence"), f"{where}.equivalence"),
        prompts,
        None if se is None else str(se),
        None if minus is None else str(minus),
    )
    _require(0 < m.tail <= 1, f"{where}.tail", f"{m.tail} must lie in (0, 1]")
    _require(
        m.transform == "none" or (isinstance(m.chance, (int, float)) and 0 < m.chance < 1),
        f"{where}.chance",
        f"transform {m.transform} needs chance in (0, 1) (1/k for k options)",
    )
    return m


def _equivalence(data: Any, where: str) -> tuple[float, float] | None:
    if data is None:
        return None
    data = _keys(data, {"target", "margin"}, where)
    _require(
        isinstance(data.get("target"), (int, float)) and isinstance(data.get("margin"), (int, float)),
        where,
        f"needs numbers `target` and `margin` (e.g. {{target: 2, margin: 0.5}}), got {data}",
    )
    _require(data["margin"] > 0, f"{where}.margin", f"{data['margin']} must be > 0")
    return float(data["target"]), float(data["margin"])


def _select(data: Any, quick: dict | None, sweep, where: str, callbacks: tuple[str, ...]) -> Select | None:
    if data is None:
        return None
    data = _keys(data, {"axis", "metric", "seeds", "mode"}, where)
    axis = data.get("axis")
    axes = [a for a, _ in sweep]
    _require(
        axis in axes,
        f"{where}.axis",
        f"{axis!r} must be one of the sweep axes {axes} (its values are the candidates)",
    )
    _require(
        "metric" in data,
        where,
        "needs `metric`, e.g. {name: val/reward_mean, reduce: last} (on the validation split)",
    )
    seeds = (quick or {}).get("seeds") or data.get("seeds")
    _require(
        seeds and all(isinstance(s, int) for s in seeds) and len(set(seeds)) == len(seeds),
        f"{where}.seeds",
        f"{seeds} must be distinct integers (seeds of the selection stage)",
    )
    return Select(
        str(axis),
        _metric(data["metric"], f"{where}.metric", callbacks),
        tuple(seeds),
        _choice(data.get("mode", "max"), Literal["max", "min"], f"{where}.mode"),
    )


def _test(data: Any, quick: dict | None, where: str) -> dict | None:
    if data is None:
        return None
    report = import_class(TEST_SPLIT_REPORT)
    _require(
        report is not None, where, f"needs the callback {TEST_SPLIT_REPORT}, which cannot be imported here"
    )
    allowed = set(inspect.signature(report.__init__).parameters) - {"self"}
    merged = {**_keys(data, allowed, where), **_keys(quick or {}, allowed, f"{where} (quick)")}
    try:
        report(**merged)
    except (TypeError, ValueError) as err:
        raise _fail(where, str(err)) from None
    return merged


def _curve(data: Any, where: str, callbacks: tuple[str, ...]) -> Curve:
    data = _keys(data, {"metrics", "smooth", "title", "x"}, where)
    metrics = _strs(data.get("metrics"), f"{where}.metrics")
    for m in metrics:
        check_metric(m, f"{where}.metrics", callbacks)
    smooth = int(data.get("smooth", 1))
    _require(metrics and smooth >= 1, where, "needs at least one metric and smooth >= 1")
    x = _choice(data.get("x", "step"), CurveX, f"{where}.x")
    return Curve(metrics, smooth, str(data.get("title", "")), x)


def _profile(data: Any, where: str, callbacks: tuple[str, ...]) -> Profile:
    data = _keys(data, {"metrics", "x", "reduce", "xlabel", "log2", "title", "baseline"}, where)
    metrics = _strs(data.get("metrics"), f"{where}.metrics")
    baseline = _strs(data.get("baseline"), f"{where}.baseline")
    for m in metrics + baseline:
        check_metric(m, f"{where}.metrics", callbacks)
    _require(
        not baseline or len(baseline) == len(metrics),
        f"{where}.baseline",
        f"needs one metric per metric ({len(metrics)}), got {len(baseline)}",
    )
    x = tuple(float(v) for v in data.get("x") or [])
    _require(
        metrics and len(x) == len(metrics),
        where,
        f"x ({len(x)} values) must give one position per metric ({len(metrics)})",
    )
    reduces = tuple(_choice(r, Reduce, f"{where}.reduce") for r in _strs(data.get("reduce", "last"), where))
    xlabel, title = str(data.get("xlabel", "")), str(data.get("title", ""))
    return Profile(metrics, x, reduces, xlabel, bool(data.get("log2", False)), title, baseline)


def _sweep(data: Any, keep: dict, where: str):
    axes = []
    for axis, values in _keys(data or {}, set(data or {}), where).items():
        _label(axis, f"{where}.{axis}")
        values = _keys(values, set(values or {}), f"{where}.{axis}")
        chosen = keep.get(axis)
        _require(
            chosen is None or not set(map(str, chosen)) - set(map(str, values)),
            f"quick.sweep.{axis}",
            f"{chosen} names labels not in {list(values)}",
        )
        items = tuple(
            (_label(str(lbl), f"{where}.{axis}"), _strs(a, f"{where}.{axis}.{lbl}"))
            for lbl, a in values.items()
            if chosen is None or str(lbl) in map(str, chosen)
        )
        _require(items, f"{where}.{axis}", "needs at least one value")
        axes.append((axis, items))
    return tuple(axes)


def _prepare(data: Any, where: str, named_in: Path) -> tuple[Prepare, ...]:
    steps = []
    for name, step in _keys(data or {}, set(data or {}), where).items():
        step = _keys(step, {"command", "quick_args", "require"}, f"{where}.{name}")
        command = _strs(step.get("command"), f"{where}.{name}.command")
        _require(
            command and command[0] in ("fit", "validate", "test") and any("{output}" in c for c in command),
            f"{where}.{name}.command",
            "must be lit-grpo arguments starting with fit/validate/test and "
            "containing {output} (the directory it writes, e.g. SavePretrained's dirpath)",
        )
        command, configs = _config_args(command, named_in)
        requirement = _requirement(step.get("require"), f"{where}.{name}.require", command, configs)
        steps.append(Prepare(_label(name, f"{where}.{name}"), command, _strs(step.get("quick_args"), where),
                             requirement, configs))
    return tuple(steps)


def _requirement(
    data: Any, where: str, command: tuple[str, ...], configs: tuple[str, ...]
) -> Requirement | None:
    """``require: {name: val/accuracy, reduce: max, min: 0.35}``: a bound on a metric the step logs."""
    if data is None:
        return None
    data = _keys(data, {"name", "reduce", "min", "max"}, where)
    bounds = {}
    for key in ("min", "max"):
        value = data.pop(key, None)
        _require(
            value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)),
            f"{where}.{key}",
            f"{value!r} must be a number",
        )
        bounds[key] = None if value is None else float(value)
    _require(
        bounds["min"] is not None or bounds["max"] is not None,
        where,
        "needs `min` and/or `max`, the bounds the metric must reach (e.g. min: 0.35)",
    )
    callbacks = callback_paths(configs, command)  # a metric of a callback the step names counts
    return Requirement(_metric(data, where, callbacks), bounds["min"], bounds["max"])


def _resources(data: Any, threads: int, where: str) -> Resources:
    """``resources: {cpus: 2, gpus: 1, memory_gb: 16}``: what one run needs (cpus default to
    threads_per_run)."""
    data = _keys(data or {}, {"cpus", "gpus", "memory_gb"}, where)
    for key, low in (("cpus", 1), ("gpus", 0), ("memory_gb", 0)):
        value = data.get(key)
        _require(
            value is None
            or (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= low),
            f"{where}.{key}",
            f"{value!r} must be a number >= {low}",
        )
    _require(
        isinstance(data.get("cpus", 1), int),
        f"{where}.cpus",
        f"{data.get('cpus')!r} must be a whole number of CPUs",
    )
    return Resources(data.get("cpus", threads), data.get("gpus", 0), data.get("memory_gb"))


def _config_args(args: tuple[str, ...], named_in: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``args`` with the file of each ``--config`` found as :func:`_files` finds them (a path found nowhere is
    left as it is: the command reports it when it runs), and the files found."""
    out, found = list(args), []
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key == "--config" and eq:
            at, name, prefix = i, value, "--config="
        elif arg == "--config" and i + 1 < len(args):
            at, name, prefix = i + 1, args[i + 1], ""
        else:
            continue
        path = resources.resolve_in(name, named_in)
        out[at] = prefix + (path or name)
        found += [path] if path else []
    return tuple(out), tuple(found)


def _source(path: str | Path) -> Path:
    """The experiment file: ``path`` itself, else the built-in experiment of that name (``passk``)."""
    try:
        return Path(resources.resolve(str(path), "experiments"))
    except resources.ConfigNotFoundError as err:
        raise FileNotFoundError(f"experiment config {str(path)!r} does not exist: {err}") from None


def _read(path: Path) -> dict:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {err}") from None
    return _keys(raw, _KEYS, str(path))


def _check_prepared(texts: list[str], names: set[str], where: str) -> None:
    for used in {u for t in texts for u in re.findall(r"\{prepared\.([^}]*)\}", t)}:
        _require(
            used in names, where, f"{{prepared.{used}}} is used but `prepare` defines only {sorted(names)}"
        )


def _quick_arms(arms: tuple[Arm, ...], chosen: Any, reference: Any, where: str) -> tuple[Arm, ...]:
    """The arms a smoke run keeps (``quick: {arms: [A, B]}``), in the experiment's order, the reference among
    them."""
    labels = [a.label for a in arms]
    _require(
        isinstance(chosen, list) and chosen and all(str(c) in labels for c in chosen),
        where,
        f"{chosen!r} must be a non-empty list of the arms {labels}",
    )
    _require(
        reference is None or str(reference) in map(str, chosen),
        where,
        f"{chosen} must include the reference arm {reference!r}",
    )
    return tuple(a for a in arms if a.label in map(str, chosen))


def load_experiment(path: str | Path, quick: bool = False) -> Experiment:
    """Read and check an experiment YAML; with ``quick``, apply its ``quick`` section (smoke size)."""
    where, source = str(path), _source(path)
    data = _read(source)
    q = _keys(
        data.get("quick") or {}, {"seeds", "args", "sweep", "select", "test", "arms"}, f"{where}: quick"
    )
    for key in ("name", "arms", "seeds", "metrics"):
        _require(data.get(key), where, f"`{key}` is required")
    seeds = q.get("seeds") if quick and q.get("seeds") else data["seeds"]
    _require(
        all(isinstance(s, int) for s in seeds) and len(set(seeds)) == len(seeds),
        f"{where}: seeds",
        f"{seeds} must be distinct integers",
    )
    prepared = _prepare(data.get("prepare"), f"{where}: prepare", source)
    args = _strs(data.get("args"), f"{where}: args") + (
        _strs(q.get("args"), f"{where}: quick.args") if quick else ()
    )
    sweep = _sweep(data.get("sweep"), (q.get("sweep") or {}) if quick else {}, f"{where}: sweep")
    texts = list(args) + [a for _, items in sweep for _, xs in items for a in xs]
    arms = tuple(
        _arm(str(k), v, f"{where}: arms.{k}", source)
        for k, v in _keys(data["arms"], set(data["arms"]), where).items()
    )
    if quick and q.get("arms"):
        arms = _quick_arms(arms, q["arms"], data.get("reference"), f"{where}: quick.arms")
    _check_prepared(texts + [a for arm in arms for a in arm.args], {p.name for p in prepared}, where)
    base = _files(_strs(data.get("base"), f"{where}: base"), f"{where}: base", source)
    callbacks = callback_paths(
        base + tuple(c for arm in arms for c in arm.configs),
        tuple(texts) + tuple(a for arm in arms for a in arm.args),
    )
    prepare_args = tuple(a for p in prepared for a in p.command)
    extras = needed_extras(
        base + tuple(c for arm in arms for c in arm.configs) + tuple(c for p in prepared for c in p.configs),
        tuple(texts) + tuple(a for arm in arms for a in arm.args) + prepare_args,
    )
    arm_labels = [a.label for a in arms]
    reference = data.get("reference")
    _require(
        reference is None or reference in arm_labels,
        f"{where}: reference",
        f"{reference!r} is not one of the arms {arm_labels}",
    )
    select_quick = _keys(q.get("select") or {}, {"seeds"}, f"{where}: quick.select") if quick else None
    test = _test(data.get("test"), q.get("test") if quick else None, f"{where}: test")
    if test is not None:  # the runner adds the test-split report to every final run
        callbacks = tuple(dict.fromkeys((*callbacks, TEST_SPLIT_REPORT)))
    select = _select(data.get("select"), select_quick, sweep, f"{where}: select", callbacks)
    chosen_by = list(select.seeds) if select is not None else []
    _require(not set(chosen_by) & set(seeds), f"{where}: select.seeds",
             f"{chosen_by} overlap the seeds {list(seeds)}: the final runs must not reuse the runs that "
             "chose their setting; use other seeds (e.g. 100, 101, ...)")
    threads = int(data.get("threads_per_run", 1))
    _require(threads >= 1, f"{where}: threads_per_run", f"{threads} must be >= 1")
    return Experiment(
        name=_label(str(data["name"]), f"{where}: name"),
        path=where,
        claim=str(data.get("claim", "")).strip(),
        base=base,
        arms=arms,
        seeds=tuple(seeds),
        metrics=tuple(_metric(m, f"{where}: metrics[{i}]", callbacks) for i, m in enumerate(data["metrics"])),
        args=args,
        sweep=sweep,
        prepare=prepared,
        curves=tuple(
            _curve(c, f"{where}: curves[{i}]", callbacks) for i, c in enumerate(data.get("curves") or [])
        ),
        profiles=tuple(
            _profile(p, f"{where}: profiles[{i}]", callbacks)
            for i, p in enumerate(data.get("profiles") or [])
        ),
        threads_per_run=threads,
        resources=_resources(data.get("resources"), threads, f"{where}: resources"),
        seed_args=_strs(data.get("seed_args"), where) or DEFAULT_SEED_ARGS,
        tests=_choice(data.get("tests", "arms"), Tests, f"{where}: tests"),
        reference=reference,
        select=select,
        test=test,
        runtime=str(data.get("runtime", "")).strip(),
        quick=quick,
        callbacks=callbacks,
        extras=extras,
    )
