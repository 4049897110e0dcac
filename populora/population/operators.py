"""LoRA weight-space evolution operators: rank-keeping mutations and crossovers.

An adapter is a PEFT state dict. Each adapted module has ``lora_A.weight`` (r x d_in) and
``lora_B.weight`` (d_out x r), and contributes ``dW = B @ A`` (the shared scaling is ignored:
all members use one LoRA config). Keys may carry an adapter name
(``...lora_A.default.weight``). Other keys (biases, embedding LoRA, ...) are copied from the
first parent unchanged.

SVD without forming dW: thin QR of both factors, ``B = Q_B R_B`` and ``A^T = Q_A R_A``; the
r x r core ``C = R_B R_A^T = U_c S V_c^T`` gives ``dW = (Q_B U_c) S (Q_A V_c)^T``. This costs
O((d_in + d_out) r^2) per module, and modules of equal shape are processed as one batch.

Factor balance. An operator defines the child's ``dW``; its factorization is free (``A -> c A``,
``B -> B / c`` leaves ``dW`` unchanged) and it decides how the child trains. A trained adapter is
far from balanced: A keeps its init scale (PEFT's Kaiming rows, nearly orthogonal at LoRA's
shapes), B grows from 0 and carries the singular values. Refactoring with ``sqrt(S)`` on both
sides (the textbook choice) moves weight from A into B, so ``||A|| / ||B||`` per module falls to
~0.08 of the parent's on SmolLM2's shapes, and the child's gradient steps, proportional to the
other factor, shrink with it: such children trained ~10x slower in the second study. So:

* SVD-based operators refactor like the parent: ``A = scale * V^T`` (rows of the parent's RMS row
  norm, along the singular directions), ``B = U diag(S) / scale`` (:func:`isometric_coefficients`);
* every child is then rescaled per module, ``A -> c A``, ``B -> B / c``, so that its
  ``||A|| / ||B||`` equals its parent's (a crossover: the parents' geometric mean), unless it is
  within ``BALANCE_RTOL`` already (:func:`rebalance`). ``dW`` is unchanged by this step.

Dead components. A LoRA component with ``B[:, j] = 0`` and ``A[j] = 0`` can never be trained
again (each factor's gradient is proportional to the other). With the factorization above a
component whose singular value is 0 (e.g. masked) keeps an A row of the parent's scale and a zero
B column: same product, still trainable, like PEFT's own init. A module whose parent has
``dW == 0`` exactly (``B == 0``, fresh PEFT init) is left as it is by the SVD-based operators:
there is no function to perturb.

All arithmetic is fp32 on the tensors' device; results are cast back to the original dtype.
Randomness comes only from a ``torch.Generator`` seeded by :func:`make_child`, consumed in a
fixed order (shape groups sorted by module name), so a (parents, operator, seed, hyper)
tuple always gives the same child on a given device.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

StateDict = dict[str, torch.Tensor]
Factors = tuple[torch.Tensor, torch.Tensor]  # (A [g, r, d_in], B [g, d_out, r]), fp32, stacked

_LORA_KEY = re.compile(r"^(?P<prefix>.*)\.lora_(?P<ab>[AB])(?P<adapter>\.[^.]+)?\.weight$")
BALANCE_RTOL = 0.05  # a child whose per-module ||A|| / ||B|| is this close to its target is left as made


@dataclass(frozen=True)
class LoraModule:
    name: str
    a_key: str
    b_key: str


def lora_modules(sd: StateDict) -> list[LoraModule]:
    """Pair ``lora_A``/``lora_B`` keys into modules, sorted by module name."""
    found: dict[str, dict[str, str]] = {}
    for key in sd:
        m = _LORA_KEY.match(key)
        if m:
            found.setdefault(m["prefix"] + (m["adapter"] or ""), {})[m["ab"]] = key
    modules = []
    for name in sorted(found):
        pair = found[name]
        if set(pair) != {"A", "B"}:
            raise ValueError(f"LoRA module {name!r} lacks lora_{'B' if 'A' in pair else 'A'}")
        a, b = sd[pair["A"]], sd[pair["B"]]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
            raise ValueError(f"{name}: A {tuple(a.shape)} and B {tuple(b.shape)} do not form B @ A")
        modules.append(LoraModule(name, pair["A"], pair["B"]))
    if not modules:
        raise ValueError("no LoRA modules (lora_A/lora_B weights) in state dict")
    return modules


# ---------------------------------------------------------------- batched linear algebra


@dataclass(frozen=True)
class LowRankSVD:
    """``B @ A = (q_b @ u_c) diag(s) (q_a @ v_c)^T`` with orthonormal ``q_*`` and small cores.

    Shapes (batched over leading dims): ``q_b [m, k1]``, ``u_c [k1, r]``, ``s [r]``,
    ``q_a [n, k2]``, ``v_c [k2, r]``. Operators edit the r x r cores and ``s`` only, so the
    one full-size product per factor happens in :func:`assemble`.
    """

    q_b: torch.Tensor
    u_c: torch.Tensor
    s: torch.Tensor
    q_a: torch.Tensor
    v_c: torch.Tensor


def lowrank_svd(B: torch.Tensor, A: torch.Tensor) -> LowRankSVD:
    """SVD of ``B @ A`` via thin QR of each factor and an SVD of the small core ``R_B R_A^T``.

    S is descending. If ``min(m, n) < r`` the missing singular triplets are zero-padded.
    """
    r = A.shape[-2]
    q_b, r_b = torch.linalg.qr(B)
    q_a, r_a = torch.linalg.qr(A.mT)
    u_c, s, vh_c = torch.linalg.svd(r_b @ r_a.mT, full_matrices=False)
    v_c = vh_c.mT
    if s.shape[-1] < r:
        pad = r - s.shape[-1]
        u_c, v_c, s = (torch.nn.functional.pad(x, (0, pad)) for x in (u_c, v_c, s))
    return LowRankSVD(q_b, u_c, s, q_a, v_c)


def factored_svd(B: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dense-basis form of :func:`lowrank_svd`: ``U [.., m, r], S [.., r], V [.., n, r]``.

    >>> B, A = torch.randn(5, 2, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    >>> U, S, V = factored_svd(B, A)
    >>> torch.allclose(U @ torch.diag(S) @ V.T, B @ A), torch.allclose(S, torch.linalg.svdvals(B @ A)[:2])
    (True, True)
    """
    d = lowrank_svd(B, A)
    return d.q_b @ d.u_c, d.s, d.q_a @ d.v_c


def row_scale(A: torch.Tensor) -> torch.Tensor:
    """RMS row norm of each A in a batch ``[g, r, d_in] -> [g]`` (scale for dead components)."""
    return torch.linalg.vector_norm(A, dim=(-2, -1)) / math.sqrt(A.shape[-2])


def isometric_coefficients(S: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-component column scales ``(a, b)`` for ``A = (V a)^T``, ``B = U b``, the parent's shape.

    Every A row gets the parent's RMS row norm ``scale`` (a ``[g]`` batch), B carries ``S / scale``:
    the product is ``U diag(S) V^T`` and the factors are as (un)balanced as a trained adapter's. A
    component with ``S = 0`` keeps its A row and a zero B column, so it stays trainable.
    """
    a = scale[..., None].expand_as(S)
    return a, S.clamp_min(0.0) / a


def refactor(U: torch.Tensor, S: torch.Tensor, V: torch.Tensor, scale: torch.Tensor) -> Factors:
    """Factors ``A = (V a)^T``, ``B = U b`` of ``U diag(S) V^T`` (:func:`isometric_coefficients`)."""
    a, b = isometric_coefficients(S, scale)
    return (V * a[..., None, :]).mT, U * b[..., None, :]


def assemble(terms: Sequence[LowRankSVD], S: torch.Tensor, scale: torch.Tensor) -> Factors:
    """Factors of ``sum_i U_i diag(S) V_i^T`` where ``U_i = q_b u_c`` etc.; ``terms[i].s`` is unused.

    Each term's cores carry the columns it contributes (others zeroed), so a child mixing two
    parents' singular triplets costs one small-by-tall product per factor and parent.
    """
    a, b = isometric_coefficients(S, scale)
    first, rest = terms[0], terms[1:]
    B = first.q_b @ (first.u_c * b[..., None, :])
    A = first.q_a @ (first.v_c * a[..., None, :])
    for t in rest:  # fused multiply-add: no extra full-size temporaries
        B.baddbmm_(t.q_b, t.u_c * b[..., None, :])
        A.baddbmm_(t.q_a, t.v_c * a[..., None, :])
    return A.mT, B


def factor_ratio(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``||A||_F / ||B||_F`` per stacked module (``inf`` where B is 0: an untrained module)."""
    return torch.linalg.vector_norm(A, dim=(-2, -1)) / torch.linalg.vector_norm(B, dim=(-2, -1))


def target_ratio(parents: Sequence[Factors]) -> torch.Tensor:
    """The balance a child should have: its parent's ``||A|| / ||B||``, or the parents' geometric
    mean (``nan`` where some parent's module is untrained or zero: nothing to match)."""
    logs = torch.stack([factor_ratio(A, B).log() for A, B in parents])
    return logs.mean(dim=0).exp().where(torch.isfinite(logs).all(dim=0), torch.full_like(logs[0], float("nan")))


def rebalance(child: Factors, target: torch.Tensor) -> Factors:
    """Rescale ``A -> c A``, ``B -> B / c`` per module so ``||A|| / ||B||`` equals ``target``
    (``dW`` unchanged); modules already within ``BALANCE_RTOL``, or with no finite target or ratio,
    are left exactly as they are."""
    A, B = child
    ratio = factor_ratio(A, B)
    c = (target / ratio).sqrt()
    move = torch.isfinite(c) & (c > 0) & ((ratio / target - 1).abs() > BALANCE_RTOL)
    if not bool(move.any()):
        return A, B
    c = torch.where(move, c, torch.ones_like(c))[:, None, None]
    return A * c, B / c


def align(child: Factors, reference: Factors) -> Factors:
    """Rotate each module's factors, ``A -> R A``, ``B -> B R^T`` with ``R`` orthogonal (r x r), to lie
    as close as they can to ``reference``'s (least ``||R A - A_ref||^2 + ||B R^T - B_ref||^2``:
    ``R = V U^T`` from the SVD ``U S V^T`` of ``A A_ref^T + B^T B_ref``).

    ``dW = B A``, ``||A||`` and ``||B||`` (so the balance) are unchanged. Why: a child carries its
    first parent's AdamW moments, which are per weight. A refactored child's A rows are its singular
    directions, not its parent's rows, so those moments pushed it along coordinates that no longer
    mean what they meant: in the 2T-2S learning-study run of issue 47 an `svd_split` child's first
    step was as long as its sibling's (2.44 against 2.48) but almost orthogonal to its own ``dW``
    (cosine 0.04 against 0.81), so its ``sum ||B A||_F`` grew 0.54 where its sibling's grew 2.13.

    >>> A = torch.randn(1, 3, 7, dtype=torch.float64); B = torch.randn(1, 5, 3, dtype=torch.float64)
    >>> Q = torch.linalg.qr(torch.randn(1, 3, 3, dtype=torch.float64))[0]
    >>> A2, B2 = align((Q @ A, B @ Q.mT), (A, B))   # the same factors in other coordinates: recovered
    >>> torch.allclose(A2, A), torch.allclose(B2, B)
    (True, True)
    """
    A, B = child
    U, _, Vh = torch.linalg.svd(A @ reference[0].mT + B.mT @ reference[1])
    R = (U @ Vh).mT
    # a module the operator left as the reference had it stays bit for bit (R would be I up to rounding)
    same = ((A == reference[0]).flatten(1).all(dim=1) & (B == reference[1]).flatten(1).all(dim=1))[:, None, None]
    return torch.where(same, A, R @ A), torch.where(same, B, B @ R.mT)


def keep_zero_modules(old: Factors, new: Factors, zero: torch.Tensor) -> Factors:
    """Where ``zero[g]`` (dW is exactly 0: S == 0 only when R_B == 0, i.e. B == 0), keep the old factors."""
    if not bool(zero.any()):
        return new
    return (torch.where(zero[:, None, None], old[0], new[0]), torch.where(zero[:, None, None], old[1], new[1]))


def near_orthogonal(g: int, r: int, eps: float, gen: torch.Generator, device) -> torch.Tensor:
    """Random rotations close to I: QR of ``I + eps skew(M)``, signs fixed so Q -> I as eps -> 0."""
    m = torch.randn((g, r, r), generator=gen, device=device)
    q, rr = torch.linalg.qr(torch.eye(r, device=device) + eps * 0.5 * (m - m.mT))
    return q * torch.sign(torch.diagonal(rr, dim1=-2, dim2=-1))[..., None, :]


def factor_noise(x: torch.Tensor, eps: float, gen: torch.Generator) -> torch.Tensor:
    """``eps * std(x) * N(0, 1)`` per stacked tensor; std falls back to 1/sqrt(last dim) if ~0."""
    std = x.std(dim=(-2, -1), keepdim=True) if x[0].numel() > 1 else torch.zeros_like(x[:, :1, :1])
    std = torch.where(std > 1e-8, std, torch.full_like(std, 1.0 / math.sqrt(x.shape[-1])))
    return torch.randn(x.shape, generator=gen, device=x.device).mul_(eps * std)


# ---------------------------------------------------------------- plumbing


def _check_compatible(parents: Sequence[StateDict]) -> list[LoraModule]:
    modules = lora_modules(parents[0])
    for i, p in enumerate(parents[1:], start=1):
        if p.keys() != parents[0].keys():
            raise ValueError(f"parent {i} has different keys from parent 0")
        for key, t in p.items():
            if t.shape != parents[0][key].shape:
                raise ValueError(
                    f"parent {i}: {key} has shape {tuple(t.shape)}, parent 0 has {tuple(parents[0][key].shape)}"
                )
    return modules


def _apply(
    parents: Sequence[StateDict], fn: Callable[[list[int], list[Factors]], Factors], *, refactors: bool = False
) -> StateDict:
    """Run ``fn(module_indices, [(A, B) per parent])`` on each group of same-shape modules, then
    give each child module its parents' factor balance (:func:`rebalance`); an operator that
    ``refactors`` (builds new factors from a ``dW``) also gets them rotated into its first parent's
    coordinates (:func:`align`), whose moments the child carries.

    The stacked fp32 tensors handed to ``fn`` are fresh copies, so ``fn`` may modify them.
    """
    modules = _check_compatible(parents)
    first = parents[0]
    groups: dict[tuple, list[int]] = {}
    for i, m in enumerate(modules):
        a, b = first[m.a_key], first[m.b_key]
        groups.setdefault((tuple(a.shape), tuple(b.shape), a.dtype, b.dtype, str(a.device)), []).append(i)
    lora_keys = {k for m in modules for k in (m.a_key, m.b_key)}
    child = {k: v.clone() for k, v in first.items() if k not in lora_keys}
    for idx in groups.values():  # insertion order = sorted module names: deterministic
        stacked = [
            (
                torch.stack([p[modules[i].a_key] for i in idx]).float(),
                torch.stack([p[modules[i].b_key] for i in idx]).float(),
            )
            for p in parents
        ]
        target = target_ratio(stacked)  # before fn: fn may modify the copies in place
        reference = (stacked[0][0].clone(), stacked[0][1].clone()) if refactors else None
        made = fn(idx, stacked)  # (A, B), or (A, B, target) where a module copies one parent's balance
        A, B = rebalance(made[:2], made[2] if len(made) == 3 else target)
        if reference is not None:
            A, B = align((A, B), reference)
        for j, i in enumerate(idx):
            m = modules[i]
            child[m.a_key] = A[j].to(dtype=first[m.a_key].dtype, copy=True)
            child[m.b_key] = B[j].to(dtype=first[m.b_key].dtype, copy=True)
    return {k: child[k] for k in first}  # keep the parent's key order


def _device(sd: StateDict) -> torch.device:
    return next(iter(sd.values())).device


# ---------------------------------------------------------------- mutations


def svd_scale_rotate(sd: StateDict, gen: torch.Generator, eps: float = 0.1) -> StateDict:
    """Scale singular values by ``exp(eps z)`` and rotate both singular bases by ~I + eps skew(M)."""

    def fn(idx, parents):
        ((A, B),) = parents
        d = lowrank_svd(B, A)
        g, r = d.s.shape
        S = d.s * torch.exp(eps * torch.randn((g, r), generator=gen, device=A.device))
        # rotating U = q_b u_c by R is rotating the small core: q_b (u_c R)
        u_c = d.u_c @ near_orthogonal(g, r, eps, gen, A.device)
        v_c = d.v_c @ near_orthogonal(g, r, eps, gen, A.device)
        child = assemble([LowRankSVD(d.q_b, u_c, S, d.q_a, v_c)], S, row_scale(A))
        return keep_zero_modules((A, B), child, d.s.amax(dim=-1) == 0)

    return _apply([sd], fn, refactors=True)


def gaussian_subset(sd: StateDict, gen: torch.Generator, eps: float = 0.1, fraction: float = 0.33) -> StateDict:
    """Add ``eps std(W) N(0,1)`` to both factors of ``max(1, round(fraction n))`` random modules."""
    n = len(lora_modules(sd))
    chosen = torch.zeros(n, dtype=torch.bool)
    chosen[torch.randperm(n, generator=gen, device=_device(sd)).cpu()[: max(1, round(fraction * n))]] = True

    def fn(idx, parents):
        ((A, B),) = parents
        sel = chosen[idx].to(A.device)
        if not bool(sel.any()):
            return A, B
        A[sel] += factor_noise(A[sel], eps, gen)
        B[sel] += factor_noise(B[sel], eps, gen)
        return A, B

    return _apply([sd], fn)


def gaussian_all(sd: StateDict, gen: torch.Generator, eps: float = 0.15) -> StateDict:
    """Add ``eps std(W) N(0,1)`` to every factor of every module."""

    def fn(idx, parents):
        ((A, B),) = parents  # private fp32 copies made by _apply: safe to update in place
        return A.add_(factor_noise(A, eps, gen)), B.add_(factor_noise(B, eps, gen))

    return _apply([sd], fn)


def mask_components(sd: StateDict, gen: torch.Generator, rho: float = 0.3) -> StateDict:
    """Zero ``ceil(rho r)`` random singular values per module and refactor (shapes unchanged)."""
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")

    def fn(idx, parents):
        ((A, B),) = parents
        d = lowrank_svd(B, A)
        g, r = d.s.shape
        drop = torch.rand((g, r), generator=gen, device=A.device).argsort(dim=-1)[:, : math.ceil(rho * r)]
        S = d.s.scatter(-1, drop, 0.0)
        return keep_zero_modules((A, B), assemble([d], S, row_scale(A)), d.s.amax(dim=-1) == 0)

    return _apply([sd], fn, refactors=True)


def neftune(sd: StateDict, gen: torch.Generator, alpha: float = 0.5) -> StateDict:
    """NEFTune-style: add uniform noise ``U(-b, b)``, ``b = alpha / sqrt(d_in r)``, to every A (input) factor.

    NEFTune scales embedding noise by ``alpha / sqrt(L d)``; here the "sequence" is the rank. A
    PEFT-initialised A row has std ``1 / sqrt(3 d_in)``, so the noise is ``alpha / sqrt(r)`` of it
    (0.18 at r = 8 with the default 0.5, about gaussian_all's 0.15). B is untouched, so an untrained
    module (``B = 0``) keeps ``dW = 0`` and a trained one moves by ``B @ noise``.
    """
    if alpha < 0:
        raise ValueError(f"neftune alpha must be >= 0, got {alpha}")

    def fn(idx, parents):
        ((A, B),) = parents
        bound = alpha / math.sqrt(A.shape[-1] * A.shape[-2])
        return A.add_(torch.rand(A.shape, generator=gen, device=A.device).mul_(2 * bound).sub_(bound)), B

    return _apply([sd], fn)


# ---------------------------------------------------------------- crossovers


def layerwise(parents: Sequence[StateDict], gen: torch.Generator, fitness=None) -> StateDict:
    """Each module copies both factors from one uniformly chosen parent (dW stays coherent)."""

    def fn(idx, ps):
        device = ps[0][0].device
        pick = torch.randint(len(ps), (len(idx),), generator=gen, device=device)
        rows = torch.arange(len(idx), device=device)
        A, B = torch.stack([p[0] for p in ps])[pick, rows], torch.stack([p[1] for p in ps])[pick, rows]
        return A, B, factor_ratio(A, B)  # a copied module keeps its own parent's balance: left as it is

    return _apply(parents, fn)


def svd_split(parents: Sequence[StateDict], gen: torch.Generator, fitness=None) -> StateDict:
    """Per module, top-k singular triplets of parent 1 and triplets k..r-1 of parent 2, k ~ U{1..r-1}."""
    if len(parents) != 2:
        raise ValueError("svd_split needs exactly 2 parents")

    def fn(idx, ps):
        (A1, B1), (A2, B2) = ps
        r = A1.shape[-2]
        if r < 2:
            raise ValueError("svd_split needs LoRA rank >= 2")
        d1, d2 = lowrank_svd(B1, A1), lowrank_svd(B2, A2)
        k = torch.randint(1, r, (len(idx), 1), generator=gen, device=A1.device)
        first = (torch.arange(r, device=A1.device)[None, :] < k).float()  # [g, r] column owner
        S = first * d1.s + (1 - first) * d2.s
        terms = [
            LowRankSVD(d.q_b, d.u_c * w[:, None, :], S, d.q_a, d.v_c * w[:, None, :])
            for d, w in ((d1, first), (d2, 1 - first))
        ]
        child = assemble(terms, S, 0.5 * (row_scale(A1) + row_scale(A2)))
        return keep_zero_modules((A1, B1), child, (d1.s.amax(dim=-1) == 0) & (d2.s.amax(dim=-1) == 0))

    return _apply(parents, fn, refactors=True)


def _truncate(Bs: Sequence[torch.Tensor], As: Sequence[torch.Tensor], rank: int, scale: torch.Tensor) -> Factors:
    """Best rank-``rank`` factors of ``sum_i Bs[i] @ As[i]`` (Eckart-Young, via the stacked factors)."""
    d = lowrank_svd(torch.cat(list(Bs), -1), torch.cat(list(As), -2))
    top = LowRankSVD(d.q_b, d.u_c[..., :rank], d.s[..., :rank], d.q_a, d.v_c[..., :rank])
    return assemble([top], top.s, scale)


def dare(parents: Sequence[StateDict], gen: torch.Generator, fitness=None, p: float = 0.3) -> StateDict:
    """DARE: drop each factor entry with probability p, rescale by 1/(1-p), average the parents' ``dW``.

    Each parent's dropped ``B' A'`` is an unbiased estimate of its ``dW`` (independent masks); the
    child is the best rank-r approximation of their mean. The mean is taken over products, not
    factors: members start from different PEFT inits, so their A factors are not aligned and a
    factor average would add cross terms ``B_1 A_2`` as large as the real ones. Random: identical
    parents do not give the parent back (p = 0 does, up to the factorization). Both factors are
    dropped, so a term of B @ A survives with probability (1-p)^2; hence a milder default p than
    DARE's 0.9.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dare drop probability must be in [0, 1), got {p}")

    def dropped(x):
        # in-place mask arithmetic: this runs over ~40 M entries per parent at 7B scale
        return torch.rand(x.shape, generator=gen, device=x.device).ge_(p).mul_(x).mul_(1.0 / (1.0 - p))

    def fn(idx, ps):
        n = len(ps)
        Bs, As = zip(*[(dropped(B) / n, dropped(A)) for A, B in ps])
        scale = torch.stack([row_scale(A) for A, _ in ps]).mean(dim=0)
        child = _truncate(Bs, As, ps[0][0].shape[-2], scale)
        untrained = torch.stack([B.flatten(1).abs().amax(dim=1) == 0 for _, B in ps]).all(dim=0)
        return keep_zero_modules(ps[0], child, untrained)

    return _apply(parents, fn, refactors=True)


def fitness_weights(fitness: Sequence[float] | None, n: int, temperature: float) -> list[float]:
    """Softmax of z-scored fitness over ``temperature`` (equal weights without fitness or spread).

    >>> [round(w, 2) for w in fitness_weights([2.0, 1.0], 2, 1.0)]
    [0.88, 0.12]
    """
    if fitness is None:
        return [1.0 / n] * n
    f = torch.tensor([float(x) for x in fitness], dtype=torch.float64)
    spread = f.std(unbiased=False)
    z = (f - f.mean()) / spread if spread > 0 else torch.zeros_like(f)
    return torch.softmax(z / temperature, dim=0).tolist()


def fitness_weighted(
    parents: Sequence[StateDict], gen: torch.Generator, fitness: Sequence[float] | None = None, temperature: float = 1.0
) -> StateDict:
    """The parents' ``dW`` averaged with fitness weights (softmax of z-scored fitness), best rank r.

    Two parents that differ weigh 0.88 and 0.12 at ``temperature`` 1 (z-scores of two values are
    +-1, whatever the gap: the ranking decides, as in LR's ES-style crossover); without
    fitness (or equal fitness) it is the plain mean of the parents' ``dW``. Deterministic.
    """
    if temperature <= 0:
        raise ValueError(f"fitness_weighted temperature must be > 0, got {temperature}")
    weights = fitness_weights(fitness, len(parents), temperature)

    def fn(idx, ps):
        Bs = [w * B for w, (_, B) in zip(weights, ps)]
        scale = torch.stack([row_scale(A) for A, _ in ps]).mean(dim=0)
        child = _truncate(Bs, [A for A, _ in ps], ps[0][0].shape[-2], scale)
        untrained = torch.stack([B.flatten(1).abs().amax(dim=1) == 0 for _, B in ps]).all(dim=0)
        return keep_zero_modules(ps[0], child, untrained)

    return _apply(parents, fn, refactors=True)


def extrapolate(
    parents: Sequence[StateDict],
    gen: torch.Generator,
    fitness: Sequence[float] | None = None,
    eta_low: float = 1.0,
    eta_high: float = 1.5,
    space: str = "delta",
) -> StateDict:
    """Step past the fitter parent: ``P_other + eta (P_fit - P_other)``, eta ~ U[low, high] per module.

    Without ``fitness`` the first parent counts as the fitter. ``space="delta"`` (the default)
    applies it to dW and keeps the best rank-r approximation (dW-exact for identical parents;
    meaningful when the parents' factors are not aligned, as members with different PEFT inits'
    are not); ``space="factors"`` applies it to A and B separately (identical parents give the
    parent back exactly; for unaligned parents the product gains cross terms ``B_f A_o``).
    """
    if len(parents) != 2:
        raise ValueError("extrapolate needs exactly 2 parents")
    if space not in ("factors", "delta"):
        raise ValueError(f"space must be 'factors' or 'delta', got {space!r}")
    fit = 0 if fitness is None or fitness[0] >= fitness[1] else 1

    def fn(idx, ps):
        (Af, Bf), (Ao, Bo) = ps[fit], ps[1 - fit]
        eta = eta_low + (eta_high - eta_low) * torch.rand((len(idx), 1, 1), generator=gen, device=Af.device)
        if space == "factors":
            return Ao + eta * (Af - Ao), Bo + eta * (Bf - Bo)
        child = _truncate([eta * Bf, (1 - eta) * Bo], [Af, Ao], Af.shape[-2], 0.5 * (row_scale(Af) + row_scale(Ao)))
        return keep_zero_modules(
            (Af, Bf), child, (Bf.flatten(1).abs().amax(dim=1) == 0) & (Bo.flatten(1).abs().amax(dim=1) == 0)
        )

    return _apply(parents, fn, refactors=space == "delta")


# ---------------------------------------------------------------- registry

# (state dict, generator, **params) -> child; (parents, generator, fitness, **params) -> child
MUTATIONS: dict[str, Callable[..., StateDict]] = {
    "svd_scale_rotate": svd_scale_rotate,
    "gaussian_subset": gaussian_subset,
    "mask_components": mask_components,
    "gaussian_all": gaussian_all,
    "neftune": neftune,
}
CROSSOVERS: dict[str, Callable[..., StateDict]] = {
    "layerwise": layerwise,
    "svd_split": svd_split,
    "dare": dare,
    "extrapolate": extrapolate,
    "fitness_weighted": fitness_weighted,
}
# Number of parents each crossover accepts: (min, max); None = no upper bound.
CROSSOVER_ARITY = {
    "layerwise": (2, None),
    "svd_split": (2, 2),
    "dare": (2, None),
    "extrapolate": (2, 2),
    "fitness_weighted": (2, None),
}
# The numbering of lucidrains' PopuLoRA package (M1-M5 mutations, X1-X5 crossovers), which may copy the
# paper's appendix (unverified: ../shared/reference/populora-paper.md section 2.3); docs/design.md's table.
PAPER_NUMBERS = {
    "svd_scale_rotate": "M1",
    "gaussian_subset": "M2",
    "mask_components": "M3",
    "gaussian_all": "M4",
    "neftune": "M5",
    "dare": "X1",
    "layerwise": "X2",
    "svd_split": "X3",
    "extrapolate": "X4",
    "fitness_weighted": "X5",
}


def operator_defaults() -> dict[str, dict[str, object]]:
    """Default hyper-parameters of each registered operator, e.g. for params files and docs.

    >>> operator_defaults()["mask_components"]
    {'rho': 0.3}
    """
    out = {}
    for name, fn in {**MUTATIONS, **CROSSOVERS}.items():
        params = inspect.signature(fn).parameters.values()
        out[name] = {
            p.name: p.default for p in params if p.default is not inspect.Parameter.empty and p.name != "fitness"
        }
    return out


def make_child(
    parents: Sequence[StateDict],
    operator: str,
    seed: int,
    fitness: Sequence[float] | None = None,
    **hyper,
) -> StateDict:
    """Apply a registered operator: mutations take one parent, crossovers two (or more).

    ``fitness`` (one float per parent, higher is better) is used by ``extrapolate`` and ``fitness_weighted``.

    >>> a = {"m.lora_A.weight": torch.ones(2, 3), "m.lora_B.weight": torch.ones(4, 2)}
    >>> child = make_child([a], "gaussian_all", seed=0)
    >>> child["m.lora_A.weight"].shape, torch.equal(child["m.lora_B.weight"], a["m.lora_B.weight"])
    (torch.Size([2, 3]), False)
    """
    if not parents:
        raise ValueError("need at least one parent")
    gen = torch.Generator(device=_device(parents[0]))
    gen.manual_seed(int(seed))
    if operator in MUTATIONS:
        if len(parents) != 1:
            raise ValueError(f"mutation {operator!r} takes 1 parent, got {len(parents)}")
        return MUTATIONS[operator](parents[0], gen, **hyper)
    if operator in CROSSOVERS:
        low, high = CROSSOVER_ARITY[operator]
        if len(parents) < low or (high is not None and len(parents) > high):
            raise ValueError(f"crossover {operator!r} takes {low}..{high or 'n'} parents, got {len(parents)}")
        if fitness is not None and len(fitness) != len(parents):
            raise ValueError(f"{len(fitness)} fitness values for {len(parents)} parents")
        return CROSSOVERS[operator](parents, gen, fitness=fitness, **hyper)
    raise ValueError(f"unknown operator {operator!r}; known: {sorted(MUTATIONS) + sorted(CROSSOVERS)}")
