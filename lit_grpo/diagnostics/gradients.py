"""Per-completion gradient contributions and the spectrum of their matrix (METHODS.md section 3).

Row ``i`` of the matrix is ``A_i * grad sum_t log pi(y_i,t)`` over a chosen set of ``nn.Linear``
layers. All rows come from one batched forward and one backward: a forward hook keeps each chosen
layer's input ``x [N, S, in]`` and output, ``torch.autograd.grad`` gives the output gradients
``delta [N, S, out]`` (completions do not interact in a forward pass), and the per-completion
weight gradient is ``sum_s delta_s x_s^T``. Nothing touches ``.grad``.

Rows can be projected to ``d'`` dimensions by a fixed Gaussian matrix ``N(0, 1/d')`` that is drawn
in chunks of ``chunk_size`` rows, each from its own seed, so it is never held whole. Singular values
come from products with the rows a column chunk at a time (:func:`singular_values`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from lit_grpo.checks import require
from lit_grpo.diagnostics.rank import spectrum_summary
from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.rollout.functional import select_rows, slice_rows
from lit_grpo.types import Rollouts

#: Rows of the projection matrix drawn at once.
CHUNK_SIZE = 1 << 16


@dataclass
class LinearTarget:
    """An ``nn.Linear`` whose weight (and/or bias) gradient goes into the matrix."""

    name: str
    module: nn.Linear
    weight: bool = True
    bias: bool = False

    @property
    def numel(self) -> int:
        m = self.module
        return (m.weight.numel() if self.weight else 0) + (
            m.bias.numel() if self.bias and m.bias is not None else 0
        )


def select_linear_targets(
    model: nn.Module, patterns: Sequence[str] | None = None, lora: bool = False
) -> tuple[list[LinearTarget], list[str]]:
    """The ``nn.Linear`` layers whose trainable parameters are chosen.

    Args:
        model: The policy.
        patterns: Regular expressions searched in parameter names (``layers\\.0\\.mlp``, ``down_proj``);
            ``None`` chooses every Linear weight.
        lora: Choose the LoRA layers (module names containing ``lora_``) instead.

    Returns:
        ``(targets, left_out)``: the targets, and the names of parameters a pattern matched that are
        not counted (not in an ``nn.Linear``, frozen, or a weight tied to an embedding, whose
        gradient through the Linear alone would be partial).
    """
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    regexes = [re.compile(p) for p in patterns or []]
    targets, covered = [], set()
    for mod_name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        wname, bname = f"{mod_name}.weight", f"{mod_name}.bias"
        if lora:
            w, b = "lora_" in mod_name, False
        elif regexes:
            w = any(r.search(wname) for r in regexes)
            b = module.bias is not None and any(r.search(bname) for r in regexes)
        else:
            w, b = True, False
        w = w and module.weight.requires_grad and id(module.weight) not in tied
        b = b and module.bias is not None and module.bias.requires_grad
        if w or b:
            targets.append(LinearTarget(mod_name, module, w, b))
            covered.update([wname] if w else [])
            covered.update([bname] if b else [])
    left_out = [
        n for n, _ in model.named_parameters() if any(r.search(n) for r in regexes) and n not in covered
    ]
    return targets, left_out


def linear_sample_grads(x: Tensor, delta: Tensor, weight: bool = True, bias: bool = False) -> Tensor:
    """Per-sample gradients of a Linear layer: ``x [N, ..., in]``, ``delta [N, ..., out]`` -> ``[N, D]``.

    ``D = out * in`` for the weight (row-major, as ``weight.flatten()``) plus ``out`` for the bias.
    """
    n = x.shape[0]
    x = x.reshape(n, -1, x.shape[-1])  # [N, S, in]
    delta = delta.reshape(n, -1, delta.shape[-1]).to(x.dtype)  # [N, S, out]
    parts = []
    if weight:
        parts.append(torch.einsum("nso,nsi->noi", delta, x).reshape(n, -1))  # [N, out * in]
    if bias:
        parts.append(delta.sum(1))  # [N, out]
    return torch.cat(parts, dim=1)


def per_completion_gradients(
    policy: nn.Module,
    rollouts: Rollouts,
    coefficients: Tensor,
    targets: Sequence[LinearTarget],
    temperature: float = 1.0,
) -> list[Tensor]:
    """Rows ``c_i * grad sum_t log pi(y_i,t)`` per target: a list of ``[N, D_target]`` float32 tensors.

    Args:
        policy: The causal LM.
        rollouts: ``N`` completions.
        coefficients: ``[N]`` per-completion factors, e.g. the advantages.
        targets: From :func:`select_linear_targets`.
        temperature: Of the log-prob forward, as in training.
    """
    require(bool(targets), "per_completion_gradients needs at least one LinearTarget")
    captured: list[list[tuple[Tensor, Tensor]]] = [[] for _ in targets]

    def hook(store):
        return lambda module, args, output: store.append((args[0].detach(), output))

    handles = [
        t.module.register_forward_hook(hook(store)) for t, store in zip(targets, captured, strict=True)
    ]
    try:
        with torch.enable_grad():
            logp, _ = sequence_logprobs(policy, rollouts, temperature)  # [N, T]
    finally:
        for handle in handles:
            handle.remove()
    coef = coefficients.to(device=logp.device, dtype=logp.dtype)  # [N]
    objective = (logp * rollouts.sampled_mask * coef[:, None]).sum()  # an episode: its sampled tokens
    outputs = [y for store in captured for _, y in store if y.requires_grad]
    grads = torch.autograd.grad(objective, outputs, allow_unused=True) if outputs else ()
    deltas = iter(grads)
    rows = []
    for target, store in zip(targets, captured, strict=True):
        total = None
        for x, y in store:  # a layer called more than once adds up its calls
            delta = next(deltas) if y.requires_grad else None
            delta = torch.zeros_like(y) if delta is None else delta
            part = linear_sample_grads(x, delta, target.weight, target.bias)
            total = part if total is None else total + part
        require(total is not None, f"layer {target.name!r} was not called in the policy's forward")
        rows.append(total.float())
    return rows


def _chunk_seed(seed: int, stream: int, chunk: int) -> int:
    return ((seed * 1_000_003 + stream) * 1_000_003 + chunk) % (1 << 63)


def project_rows(
    rows: Tensor, dim_out: int, seed: int, stream: int = 0, chunk_size: int = CHUNK_SIZE
) -> Tensor:
    """``rows [n, D] @ R [D, dim_out]`` with a fixed Gaussian ``R`` (entries ``N(0, 1/dim_out)``).

    ``R`` is drawn ``chunk_size`` rows at a time from CPU generators seeded by ``(seed, stream,
    chunk)``, so memory stays at one chunk and the same arguments always give the same ``R``. Use
    one ``stream`` per parameter block: the blocks together project the full flattened gradient.
    """
    require(dim_out >= 1, f"projection dim must be >= 1, got {dim_out}")
    out = torch.zeros(rows.shape[0], dim_out, dtype=torch.float32, device=rows.device)  # [n, d']
    gen = torch.Generator()
    for chunk, start in enumerate(range(0, rows.shape[1], chunk_size)):
        stop = min(start + chunk_size, rows.shape[1])
        gen.manual_seed(_chunk_seed(seed, stream, chunk))
        r = torch.randn(stop - start, dim_out, generator=gen) / math.sqrt(dim_out)  # [chunk, d']
        out += rows[:, start:stop].float() @ r.to(rows.device)
    return out


def singular_values(rows: Tensor, chunk_size: int = CHUNK_SIZE) -> Tensor:
    """Singular values of a wide matrix ``rows [n, D]`` (``n`` small), float64, descending: ``[min(n, D)]``.

    Two float32 products a column chunk at a time: the Gram matrix ``M M^T`` gives the left singular
    vectors ``u_j`` (``eigh`` in float64), then ``sigma_j = ||u_j^T M||``. Each ``sigma_j`` is then
    accurate to about ``eps_float32 * ||M||_F``, where the square roots of the Gram matrix's eigenvalues
    would only be accurate to ``sqrt(eps) * ||M||`` (enough to lift a rank-2 matrix's effective rank).
    """
    n, d = rows.shape
    if d <= n:
        if not bool(torch.isfinite(rows).all()):
            return torch.full((min(n, d),), torch.nan, dtype=torch.float64, device=rows.device)
        return torch.linalg.svdvals(rows.double())
    m = rows.float()
    gram = torch.zeros(n, n, dtype=torch.float64, device=rows.device)
    for start in range(0, d, chunk_size):
        block = m[:, start : start + chunk_size]
        gram += (block @ block.T).double()
    if not bool(torch.isfinite(gram).all()):
        return torch.full((n,), torch.nan, dtype=torch.float64, device=rows.device)
    _, u = torch.linalg.eigh((gram + gram.T) / 2)  # [n, n], columns orthonormal
    u = u.to(m.dtype)
    squares = torch.zeros(n, dtype=torch.float64, device=rows.device)
    for start in range(0, d, chunk_size):
        squares += torch.linalg.vector_norm(u.T @ m[:, start : start + chunk_size], dim=1).double().square()
    return squares.sqrt().sort(descending=True).values  # NaN where the rows were not finite


def rows_spectrum_summary(rows: Tensor) -> dict[str, float] | None:
    """:func:`~lit_grpo.diagnostics.rank.spectrum_summary` of ``rows [n, D]`` via :func:`singular_values`.

    ``None`` for an all-zero or non-finite matrix (a fully degenerate batch): skip and count it.
    """
    if rows.numel() == 0:
        return None
    sigma = singular_values(rows)  # [min(n, D)]
    if not bool(torch.isfinite(sigma).all()) or float(sigma.sum()) == 0.0:
        return None
    return spectrum_summary(torch.diag(sigma))  # a diagonal matrix has exactly these singular values


def take_rows(rollouts: Rollouts, rows: Sequence[int] | Tensor) -> Rollouts:
    """Completions ``rows`` of ``rollouts``, trimmed to their longest prompt and completion."""
    picked = select_rows(rollouts, rows)
    return slice_rows(picked, 0, len(picked))


def centroid_span_residual(rows: Tensor, correct: Tensor, update: Tensor) -> float:
    """Relative distance of ``update [D]`` from the span of the class centroids of ``rows [G, D]``.

    With binary rewards and an estimator that gives one advantage to every correct completion of a
    group and one to every wrong one, the group's update is ``K A+ c+ + (G - K) A- c-``: it lies in
    the span of the centroids ``c+`` (correct rows) and ``c-`` (wrong rows), the rank-2 picture.
    Returns ``||u - proj(u)|| / ||u||`` (0 for a zero update).
    """
    correct = correct.bool()
    basis = [rows[mask].double().mean(0) for mask in (correct, ~correct) if bool(mask.any())]
    u = update.double()
    norm = u.norm()
    if norm == 0:
        return 0.0
    b = torch.stack(basis, dim=1)  # [D, <=2]
    coef = torch.linalg.lstsq(b, u.unsqueeze(1)).solution  # [<=2, 1]
    return ((u - (b @ coef).squeeze(1)).norm() / norm).item()


def group_gradient_norms(
    policy: nn.Module,
    rollouts: Rollouts,
    coefficients: Tensor,
    group_size: int,
    targets: Sequence[LinearTarget],
    temperature: float = 1.0,
    micro_batch_size: int | None = None,
) -> Tensor:
    """Norm of each group's gradient contribution ``|| sum_{i in group} c_i grad sum_t log pi(y_i,t) ||``.

    The exact gradient budget of a prompt (METHODS.md section 3) over the ``targets``' parameters.
    Completions are group-major (completion ``i`` belongs to group ``i // group_size``); those with
    ``c_i = 0`` contribute nothing and are not computed. The per-completion rows of
    :func:`per_completion_gradients` are summed per group a micro-batch at a time, so memory stays at
    ``groups x D`` plus one micro-batch of rows.

    Returns:
        ``[N / group_size]`` float64 norms.
    """
    n = coefficients.numel()
    require(n % group_size == 0, f"{n} completions are not whole groups of {group_size}")
    groups = n // group_size
    rows = coefficients.reshape(-1).nonzero().flatten().tolist()
    sums = [torch.zeros(groups, t.numel, dtype=torch.float32) for t in targets]  # [P, D_t] each
    step = micro_batch_size or max(len(rows), 1)
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        blocks = per_completion_gradients(
            policy, take_rows(rollouts, part), coefficients.reshape(-1)[part], targets, temperature
        )  # [m, D_t] each
        index = torch.tensor([i // group_size for i in part])
        for acc, block in zip(sums, blocks, strict=True):
            acc.index_add_(0, index, block.detach().cpu())
    squares = sum(acc.double().square().sum(-1) for acc in sums)  # [P]
    return squares.sqrt() if isinstance(squares, Tensor) else torch.zeros(groups, dtype=torch.float64)


def gradient_row_blocks(
    policy: nn.Module,
    rollouts: Rollouts,
    coefficients: Tensor,
    targets: Sequence[LinearTarget],
    temperature: float = 1.0,
    projection_dim: int | None = None,
    seed: int = 0,
    micro_batch_size: int | None = None,
) -> Iterator[tuple[int, Tensor]]:
    """The rows ``c_i * grad sum_t log pi(y_i,t)`` of ``rollouts`` a micro-batch at a time.

    Yields ``(start, rows [n_mb, D])`` for completions ``start .. start + n_mb``, the target blocks
    concatenated (``D`` = their parameters) or projected to ``D = projection_dim`` with
    :func:`project_rows` (one stream per target), detached. A caller that only needs products of the
    rows with a few coefficient vectors (``A [E, N] @ rows``) accumulates them block by block and never
    holds the whole ``[N, D]`` matrix.
    """
    step = micro_batch_size or max(len(rollouts), 1)
    for start in range(0, len(rollouts), step):
        stop = min(start + step, len(rollouts))
        mb = take_rows(rollouts, list(range(start, stop)))
        blocks = per_completion_gradients(policy, mb, coefficients[start:stop], targets, temperature)
        if projection_dim is not None:
            blocks = [sum(project_rows(b, projection_dim, seed, stream=j) for j, b in enumerate(blocks))]
        yield start, torch.cat(blocks, dim=1).detach()


def row_dim(targets: Sequence[LinearTarget], projection_dim: int | None = None) -> int:
    """Columns ``D`` of the rows :func:`gradient_row_blocks` yields for ``targets``."""
    return projection_dim if projection_dim is not None else sum(t.numel for t in targets)
