import doctest
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.population import operators as ops
from populora.population.operators import CROSSOVERS, MUTATIONS, factored_svd, lora_modules, make_child, refactor

RANK = 4
# (module, d_in, d_out): mixed shapes so that several batched shape groups are exercised
SHAPES = [("q_proj", 12, 12), ("k_proj", 12, 6), ("v_proj", 12, 6), ("down_proj", 20, 12)]


def random_adapter(seed: int, layers: int = 2, dtype=torch.float32, zero_b: bool = False, rank: int = RANK):
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for layer in range(layers):
        for name, d_in, d_out in SHAPES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            sd[f"{prefix}.lora_A.weight"] = (torch.rand(rank, d_in, generator=g) - 0.5).to(dtype)
            b = torch.zeros(d_out, rank) if zero_b else 0.1 * torch.randn(d_out, rank, generator=g)
            sd[f"{prefix}.lora_B.weight"] = b.to(dtype)
    return sd


def delta(sd, module):
    return sd[module.b_key].float() @ sd[module.a_key].float()


def deltas(sd):
    return {m.name: delta(sd, m) for m in lora_modules(sd)}


def child_for(op, parents, seed=0, **hyper):
    return make_child(parents if op in CROSSOVERS else parents[:1], op, seed, fitness=None, **hyper)


ALL_OPS = sorted(MUTATIONS) + sorted(CROSSOVERS)


# ---------------------------------------------------------------- linear algebra


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    m=st.integers(1, 10),
    n=st.integers(1, 10),
    r=st.integers(1, 6),
    batch=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_factored_svd_matches_dense_svd(m, n, r, batch, seed):
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(batch, m, r, generator=g, dtype=torch.float64)
    A = torch.randn(batch, r, n, generator=g, dtype=torch.float64)
    U, S, V = factored_svd(B, A)
    assert U.shape == (batch, m, r) and S.shape == (batch, r) and V.shape == (batch, n, r)
    dense = torch.linalg.svdvals(B @ A)
    k = min(m, n, r)
    assert torch.allclose(S[:, :k], dense[:, :k], atol=1e-9)
    assert torch.all(S[:, k:] == 0)
    assert torch.allclose(U @ torch.diag_embed(S) @ V.mT, B @ A, atol=1e-9)
    eye = torch.eye(k, dtype=A.dtype).expand(batch, k, k)
    assert torch.allclose(U[..., :k].mT @ U[..., :k], eye, atol=1e-9)
    assert torch.allclose(V[..., :k].mT @ V[..., :k], eye, atol=1e-9)


def test_refactor_keeps_product_and_shapes_factors_like_the_parent():
    sd = random_adapter(0)
    m = lora_modules(sd)[0]
    A, B = sd[m.a_key][None], sd[m.b_key][None]
    U, S, V = factored_svd(B, A)
    A2, B2 = refactor(U, S, V, ops.row_scale(A))
    assert torch.allclose(B2 @ A2, B @ A, atol=1e-6)
    # every A row at the parent's RMS row norm, B's columns carry the singular values
    assert torch.allclose(A2.norm(dim=-1), ops.row_scale(A)[:, None].expand(1, RANK), rtol=1e-5)
    assert torch.allclose(B2.norm(dim=-2), S / ops.row_scale(A)[:, None], rtol=1e-5)


@pytest.mark.parametrize("tiny", [0.0, 1e-9])
def test_refactor_dead_components_stay_trainable(tiny):
    sd = random_adapter(1)
    m = lora_modules(sd)[0]
    A, B = sd[m.a_key][None], sd[m.b_key][None]
    U, S, V = factored_svd(B, A)
    S[:, 1] = tiny * S[:, 0]
    A2, B2 = refactor(U, S, V, ops.row_scale(A))
    assert torch.all(B2[..., 1].abs() <= tiny * S[0, 0] / ops.row_scale(A) + 1e-12)
    assert A2[0, 1].norm() == pytest.approx(ops.row_scale(A).item(), rel=1e-5)
    assert torch.allclose(B2 @ A2, U @ torch.diag_embed(S) @ V.mT, atol=1e-6)


def test_lora_modules_pairs_keys_with_adapter_names():
    sd = {
        "x.lora_A.default.weight": torch.zeros(2, 3),
        "x.lora_B.default.weight": torch.zeros(4, 2),
        "y.lora_A.weight": torch.zeros(2, 3),
        "y.lora_B.weight": torch.zeros(4, 2),
        "y.bias": torch.ones(4),
    }
    assert [m.name for m in lora_modules(sd)] == ["x.default", "y"]
    with pytest.raises(ValueError, match="lacks"):
        lora_modules({"x.lora_A.weight": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match="B @ A"):
        lora_modules({"x.lora_A.weight": torch.zeros(2, 3), "x.lora_B.weight": torch.zeros(4, 3)})


# ---------------------------------------------------------------- generic operator properties


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ALL_OPS)
def test_shapes_dtypes_keys_kept_and_child_differs(op, dtype):
    p1, p2 = random_adapter(1, dtype=dtype), random_adapter(2, dtype=dtype)
    p1["extra.bias"] = torch.arange(3.0)  # non-LoRA keys ride along from the first parent
    p2["extra.bias"] = torch.arange(3.0) + 1
    child = child_for(op, [p1, p2])
    assert list(child) == list(p1)
    for key, t in child.items():
        assert t.shape == p1[key].shape and t.dtype == p1[key].dtype
        assert torch.isfinite(t.float()).all()
    assert torch.equal(child["extra.bias"], p1["extra.bias"])
    d1, d2, dc = deltas(p1), deltas(p2), deltas(child)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert any(not torch.allclose(dc[k], d1[k], atol=tol) for k in dc)
    if op in CROSSOVERS:
        assert any(not torch.allclose(dc[k], d2[k], atol=tol) for k in dc)


@pytest.mark.parametrize("op", ALL_OPS)
def test_seeded_determinism(op):
    p1, p2 = random_adapter(3), random_adapter(4)
    a, b, c = child_for(op, [p1, p2], seed=11), child_for(op, [p1, p2], seed=11), child_for(op, [p1, p2], seed=12)
    assert all(torch.equal(a[k], b[k]) for k in a)
    if op != "fitness_weighted":  # the one operator without randomness
        assert any(not torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize("op", ALL_OPS)
def test_parents_not_modified_and_no_shared_storage(op):
    p1, p2 = random_adapter(5), random_adapter(6)
    before = {k: v.clone() for k, v in p1.items()}
    child = child_for(op, [p1, p2])
    assert all(torch.equal(p1[k], before[k]) for k in p1)
    pointers = [t.untyped_storage().data_ptr() for t in child.values()]
    assert len(set(pointers)) == len(pointers)  # safetensors refuses shared tensors
    assert not set(pointers) & {t.untyped_storage().data_ptr() for t in p1.values()}


@pytest.mark.parametrize("op", ["layerwise", "svd_split", "extrapolate", "fitness_weighted"])
def test_identical_parents_give_parent_back(op):
    p = random_adapter(7)
    child = make_child([p, p], op, seed=3)
    if op == "layerwise":
        assert all(torch.equal(child[k], p[k]) for k in p)
    else:  # refactored, the product is the parent's
        dp, dc = deltas(p), deltas(child)
        assert all(torch.allclose(dc[k], dp[k], atol=1e-5) for k in dp)
    child = make_child([p, p], "extrapolate", seed=3, space="factors")
    assert all(torch.equal(child[k], p[k]) for k in p)


def test_dare_identical_parents_are_not_returned_but_near_unbiased():
    p = random_adapter(8, layers=1)
    dp = deltas(p)
    assert any(not torch.allclose(v, dp[k], atol=1e-4) for k, v in deltas(make_child([p, p], "dare", seed=0)).items())
    assert all(
        torch.allclose(v, dp[k], atol=1e-5) for k, v in deltas(make_child([p, p], "dare", seed=0, p=0.0)).items()
    )
    children = [deltas(make_child([p, p], "dare", seed=s, p=0.3)) for s in range(200)]
    for key, parent in dp.items():
        mean = torch.stack([c[key] for c in children]).mean(0)
        # each child: the best rank-r fit to an unbiased estimate of dW: the mean comes back to dW
        assert (mean - parent).norm() < 0.15 * parent.norm(), key


def test_dare_and_fitness_weighted_average_products_not_factors():
    """Parents with unaligned A (different inits): the child's dW is near the mean dW, where a factor
    average would be off by the cross terms B_1 A_2 + B_2 A_1."""
    p1, p2 = random_adapter(20), random_adapter(21)
    d1, d2 = deltas(p1), deltas(p2)
    for op in ("dare", "fitness_weighted"):
        hyper = {"p": 0.0} if op == "dare" else {}
        dc = deltas(make_child([p1, p2], op, seed=0, **hyper))
        for k in dc:
            mean = 0.5 * (d1[k] + d2[k])
            best = torch.linalg.svdvals(mean)[RANK:].square().sum().sqrt()  # Eckart-Young error of rank r
            assert (dc[k] - mean).norm() <= best + 1e-4 * mean.norm(), (op, k)


def test_fitness_weighted_follows_the_fitter_parent():
    p1, p2 = random_adapter(22), random_adapter(23)
    d1, d2 = deltas(p1), deltas(p2)
    for fitness, near in (([3.0, 0.0], d1), ([0.0, 3.0], d2)):
        dc = deltas(make_child([p1, p2], "fitness_weighted", seed=0, fitness=fitness, temperature=0.2))
        far = d2 if near is d1 else d1
        assert sum((dc[k] - near[k]).norm() for k in dc) < sum((dc[k] - far[k]).norm() for k in dc)
    assert ops.fitness_weights(None, 3, 1.0) == [1 / 3] * 3
    assert ops.fitness_weights([1.0, 1.0], 2, 1.0) == [0.5, 0.5]


def test_neftune_perturbs_only_the_input_factor_within_its_bound(monkeypatch):
    monkeypatch.setattr(ops, "rebalance", lambda child, target: child)  # the raw operator (rebalance: tested apart)
    p = random_adapter(24)
    child = make_child([p], "neftune", seed=0, alpha=0.5)
    for m in lora_modules(p):
        assert torch.equal(child[m.b_key], p[m.b_key])
        bound = 0.5 / math.sqrt(p[m.a_key].numel())
        noise = child[m.a_key] - p[m.a_key]
        assert 0 < noise.abs().max() <= bound + 1e-7


# ---------------------------------------------------------------- factor balance (children train like parents)


def trained_like(seed: int, layers: int = 2) -> dict:
    """Factors shaped like a trained adapter's: A at PEFT's Kaiming scale, B grown from 0 (small)."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for layer in range(layers):
        for name, d_in, d_out in SHAPES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            bound = 1 / math.sqrt(d_in)
            sd[f"{prefix}.lora_A.weight"] = (2 * torch.rand(RANK, d_in, generator=g) - 1) * bound
            sd[f"{prefix}.lora_B.weight"] = 0.003 * torch.randn(d_out, RANK, generator=g)
    return sd


def module_ratios(sd) -> dict[str, float]:
    return {m.name: float(sd[m.a_key].norm() / sd[m.b_key].norm()) for m in lora_modules(sd)}


@pytest.mark.parametrize("op", ALL_OPS)
def test_every_operator_keeps_each_modules_factor_balance(op):
    """Per module, the child's ||A|| / ||B|| is within a factor of 2 of its parent's (a crossover: the
    parents' geometric mean), the rule in DESIGN.md section 4."""
    p1, p2 = trained_like(30), trained_like(31)
    r1, r2 = module_ratios(p1), module_ratios(p2)
    child = child_for(op, [p1, p2], seed=1)
    for name, ratio in module_ratios(child).items():
        target = r1[name] if op in MUTATIONS else math.sqrt(r1[name] * r2[name])
        assert 0.5 < ratio / target < 2.0, (op, name, ratio, target)


def test_the_balance_test_fails_for_sqrt_s_refactoring(monkeypatch):
    """The textbook refactor (sqrt(S) on both sides, and no rebalance) is what the test above guards
    against: on trained-like factors it takes the ratio far below half the parent's."""
    monkeypatch.setattr(ops, "isometric_coefficients", lambda S, scale: (S.clamp_min(0).sqrt(),) * 2)
    monkeypatch.setattr(ops, "rebalance", lambda child, target: child)
    p = trained_like(30)
    before, after = module_ratios(p), module_ratios(make_child([p], "svd_scale_rotate", seed=1))
    assert all(after[k] / before[k] < 0.5 for k in before)


def test_rebalance_keeps_the_product_and_leaves_near_balanced_modules_alone():
    A, B = torch.randn(3, RANK, 12), 0.01 * torch.randn(3, 12, RANK)
    target = torch.tensor([1.0, float("nan"), float(ops.factor_ratio(A, B)[2]) * 1.001])
    A2, B2 = ops.rebalance((A, B), target)
    assert torch.allclose(B2 @ A2, B @ A, atol=1e-6)
    assert float(ops.factor_ratio(A2, B2)[0]) == pytest.approx(1.0, rel=1e-5)
    assert torch.equal(A2[1:], A[1:]) and torch.equal(B2[1:], B[1:])  # no target; within BALANCE_RTOL


# ---------------------------------------------------------------- operator semantics


def test_svd_scale_rotate_small_eps_is_small_change():
    p = random_adapter(9)
    dp = deltas(p)
    zero = deltas(make_child([p], "svd_scale_rotate", seed=0, eps=0.0))
    assert all(torch.allclose(zero[k], dp[k], atol=1e-6) for k in dp)
    change = {}
    for eps in (0.01, 0.3):
        dc = deltas(make_child([p], "svd_scale_rotate", seed=0, eps=eps))
        change[eps] = sum((dc[k] - dp[k]).norm() / dp[k].norm() for k in dp) / len(dp)
    assert 0 < change[0.01] < 0.05 < change[0.3]


def test_svd_scale_rotate_rotates_bases_and_scales_values():
    p = random_adapter(17)
    child = make_child([p], "svd_scale_rotate", seed=0, eps=0.1)
    for m in lora_modules(p):
        U, S, V = factored_svd(p[m.b_key][None], p[m.a_key][None])
        core = (U.mT @ delta(child, m) @ V)[0]  # = R_U diag(S') R_V^T in the parent's bases
        off = core - torch.diag(torch.diagonal(core))
        assert off.norm() < 0.5 * core.norm()  # small rotations only
        # core core^T = R_U S'^2 R_U^T is diagonal iff U was not rotated (same for V)
        for gram in (core @ core.mT, core.mT @ core):
            assert (gram - torch.diag(torch.diagonal(gram))).norm() > 1e-3 * gram.norm()
        ratio = torch.diagonal(core) / S[0]
        assert torch.all((ratio > 0.5) & (ratio < 2.0)) and not torch.allclose(ratio, torch.ones(RANK))


def test_mask_components_drops_rank_but_keeps_factors_trainable():
    p = random_adapter(10)
    rho = 0.3
    child = make_child([p], "mask_components", seed=0, rho=rho)
    dropped = math.ceil(rho * RANK)
    for m in lora_modules(p):
        s_parent = torch.linalg.svdvals(delta(p, m))
        s_child = torch.linalg.svdvals(delta(child, m))
        tol = 1e-5 * s_parent[0]
        assert int((s_child > tol).sum()) == int((s_parent > tol).sum()) - dropped
        # surviving singular values are a subset of the parent's
        for s in s_child[s_child > tol]:
            assert torch.isclose(s_parent, s, rtol=1e-4).any()
        # A keeps full rank (no dead rows: every component stays trainable), B loses the dropped ones
        # (rotated into the parent's coordinates, operators.align: not as zero columns any more)
        assert int(torch.linalg.matrix_rank(child[m.a_key].double())) == RANK
        b_values = torch.linalg.svdvals(child[m.b_key].double())
        assert int((b_values > 1e-5 * b_values[0]).sum()) == RANK - dropped


def test_svd_split_takes_top_triplets_of_first_parent():
    p1, p2 = random_adapter(11), random_adapter(12, zero_b=True)  # p2 contributes nothing
    child = make_child([p1, p2], "svd_split", seed=5)
    ks = set()
    for m in lora_modules(p1):
        s1 = torch.linalg.svdvals(delta(p1, m))[:RANK]
        sc = torch.linalg.svdvals(delta(child, m))[:RANK]
        k = int((sc > 1e-5 * s1[0]).sum())
        assert 1 <= k <= RANK - 1
        assert torch.allclose(sc[:k], s1[:k], rtol=1e-4)
        ks.add(k)
    assert len(ks) > 1  # k is drawn per module


def test_svd_split_rejects_rank_one_and_three_parents():
    p = random_adapter(0, rank=1)
    with pytest.raises(ValueError, match="rank"):
        make_child([p, p], "svd_split", seed=0)
    q = random_adapter(0)
    with pytest.raises(ValueError):
        make_child([q, q, q], "svd_split", seed=0)


@pytest.mark.parametrize(("fitness", "fit_index"), [(None, 0), ([1.0, 0.0], 0), ([0.0, 1.0], 1)])
def test_extrapolate_steps_past_the_fitter_parent(fitness, fit_index, monkeypatch):
    monkeypatch.setattr(ops, "rebalance", lambda child, target: child)  # the raw factor-space formula
    parents = [random_adapter(13), random_adapter(14)]
    child = make_child(parents, "extrapolate", seed=0, fitness=fitness, space="factors")
    fit, other = parents[fit_index], parents[1 - fit_index]
    for m in lora_modules(fit):
        for key in (m.a_key, m.b_key):
            step, span = child[key] - other[key], fit[key] - other[key]
            eta = (step * span).sum() / (span * span).sum()
            assert 1.0 - 1e-5 <= eta <= 1.5 + 1e-5
            assert torch.allclose(step, eta * span, atol=1e-5)


@pytest.mark.parametrize(("fitness", "fit_index"), [(None, 0), ([0.0, 1.0], 1)])
def test_extrapolate_in_delta_space_steps_past_the_fitter_parents_product(fitness, fit_index):
    parents = [random_adapter(13), random_adapter(14)]
    dc = deltas(make_child(parents, "extrapolate", seed=0, fitness=fitness))
    fit, other = deltas(parents[fit_index]), deltas(parents[1 - fit_index])
    for k in dc:
        span = fit[k] - other[k]
        eta = float(((dc[k] - other[k]) * span).sum() / span.square().sum())  # projection on the line
        assert 0.9 <= eta <= 1.6, (k, eta)
        target = other[k] + eta * span
        best = torch.linalg.svdvals(target)[RANK:].square().sum().sqrt()
        assert (dc[k] - target).norm() <= 1.5 * best + 1e-4 * target.norm(), k


def test_gaussian_subset_handles_zero_b_and_touches_fraction():
    p = random_adapter(15, zero_b=True)
    n = len(lora_modules(p))
    child = make_child([p], "gaussian_subset", seed=0, fraction=0.5)
    changed = [m for m in lora_modules(p) if not torch.equal(child[m.b_key], p[m.b_key])]
    assert len(changed) == round(0.5 * n)
    for m in changed:
        # std(B) == 0 -> fallback scale 1/sqrt(r): B becomes clearly non-zero
        assert child[m.b_key].std() == pytest.approx(0.1 / math.sqrt(RANK), rel=0.5)
        assert not torch.equal(child[m.a_key], p[m.a_key])


@pytest.mark.parametrize("op", ["svd_scale_rotate", "mask_components"])
def test_svd_mutations_leave_zero_delta_modules_alone(op):
    p = random_adapter(16, zero_b=True)
    child = make_child([p], op, seed=0)
    assert all(torch.equal(child[k], p[k]) for k in p)


def test_make_child_rejects_bad_calls():
    p1, p2 = random_adapter(1), random_adapter(2)
    with pytest.raises(ValueError, match="unknown operator"):
        make_child([p1], "teleport", seed=0)
    with pytest.raises(ValueError, match="takes 1 parent"):
        make_child([p1, p2], "gaussian_all", seed=0)
    with pytest.raises(ValueError, match="parents"):
        make_child([p1], "layerwise", seed=0)
    with pytest.raises(ValueError, match="fitness"):
        make_child([p1, p2], "extrapolate", seed=0, fitness=[1.0])
    p3 = dict(p2)
    p3.pop(next(iter(p3)))
    with pytest.raises(ValueError):
        make_child([p1, p3], "layerwise", seed=0)
    with pytest.raises(TypeError):
        make_child([p1], "gaussian_all", seed=0, epsilon=0.1)  # typo'd hyper-parameter


def test_operator_defaults_are_accepted():
    defaults = ops.operator_defaults()
    assert set(defaults) == set(ALL_OPS)
    assert defaults["svd_scale_rotate"] == {"eps": 0.1}
    assert defaults["extrapolate"] == {"eta_low": 1.0, "eta_high": 1.5, "space": "delta"}
    assert defaults["neftune"] == {"alpha": 0.5} and defaults["fitness_weighted"] == {"temperature": 1.0}
    p1, p2 = random_adapter(1, layers=1), random_adapter(2, layers=1)
    for op, hyper in defaults.items():  # passing the defaults explicitly changes nothing
        assert all(
            torch.equal(a, b)
            for a, b in zip(child_for(op, [p1, p2], **hyper).values(), child_for(op, [p1, p2]).values())
        )


def test_doctests():
    result = doctest.testmod(ops)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------- real PEFT model


def test_children_load_into_peft_llama_and_generate(tmp_path):
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
    )
    base = transformers.LlamaForCausalLM(config).eval()
    base_weights = {k: v.clone() for k, v in base.state_dict().items()}
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = peft.get_peft_model(base, lora)
    parents = []
    for seed in (0, 1):
        sd = peft.get_peft_model_state_dict(model)
        g = torch.Generator().manual_seed(seed)
        parents.append({k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items()})
    assert len(lora_modules(parents[0])) == 8
    prompt = torch.tensor([[1, 5, 9, 3]])
    outputs = {}
    for op in ALL_OPS:
        child = child_for(op, parents)
        peft.set_peft_model_state_dict(model, child)
        loaded = peft.get_peft_model_state_dict(model)
        assert all(torch.equal(loaded[k], child[k]) for k in child)
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert out.shape == (1, 8)
        outputs[op] = out
    # save the last child as a PEFT folder and load it back on a fresh base
    model.save_pretrained(tmp_path / "child")
    assert (tmp_path / "child" / "adapter_model.safetensors").exists()
    fresh = transformers.LlamaForCausalLM(config).eval()
    fresh.load_state_dict(base_weights)
    reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "child")
    back = peft.get_peft_model_state_dict(reloaded)
    assert all(torch.equal(back[k], child[k]) for k in child)
    with torch.no_grad():
        again = reloaded.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(again, outputs[ALL_OPS[-1]])


def test_carried_moments_take_the_childs_slot_names(tmp_path):
    from safetensors.torch import load_file, save_file

    from populora.lm.adapters import carry_moments

    src = tmp_path / "student0.safetensors"
    save_file({"m.lora_A.student0.weight.exp_avg": torch.ones(2, 3)}, str(src))
    assert carry_moments(src, tmp_path / "out" / "student1.safetensors", "student0", "student1")
    assert list(load_file(str(tmp_path / "out" / "student1.safetensors"))) == ["m.lora_A.student1.weight.exp_avg"]
    save_file({}, str(tmp_path / "empty.safetensors"))  # an adapter that took no step yet
    assert not carry_moments(tmp_path / "empty.safetensors", tmp_path / "x.safetensors", "student0", "student1")
    save_file({"m.lora_A.teacher0.weight.exp_avg": torch.ones(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="no moments of adapter"):
        carry_moments(tmp_path / "other.safetensors", tmp_path / "y.safetensors", "student0", "student1")


REFACTORING = ["svd_scale_rotate", "mask_components", "svd_split", "dare", "fitness_weighted", "extrapolate"]


@pytest.mark.parametrize("op", REFACTORING)
def test_a_refactored_child_lies_in_its_first_parents_coordinates(op, monkeypatch):
    """The child carries its first parent's AdamW moments (per weight): its factors are rotated
    (operators.align) to sit near that parent's, dW and the balance unchanged. Without the rotation
    (monkeypatched out: the operators before it) the A factors are 1.5-1.7 of the parent's norm away."""
    p1, p2 = random_adapter(7), random_adapter(8)
    parents = [p1, p2] if op in CROSSOVERS else [p1]

    def a_distance(child):
        return max(float((child[m.a_key] - p1[m.a_key]).norm() / p1[m.a_key].norm()) for m in lora_modules(p1))

    aligned = make_child(parents, op, seed=3, fitness=[1.0, 0.0][: len(parents)])
    monkeypatch.setattr(ops, "align", lambda child, reference: child)
    unaligned = make_child(parents, op, seed=3, fitness=[1.0, 0.0][: len(parents)])
    assert a_distance(aligned) < 0.7 * a_distance(unaligned)
    for m in lora_modules(p1):  # the same child: dW and both factors' norms
        assert torch.allclose(delta(aligned, m), delta(unaligned, m), atol=1e-5)
        for key in (m.a_key, m.b_key):
            assert torch.isclose(aligned[key].norm(), unaligned[key].norm(), rtol=1e-5)
