import json
from collections import Counter

import pytest

from populora.population.evolution import append_lineage, founder_events, plan_replacement, rank_members
from populora.population.operators import CROSSOVERS, MUTATIONS
from populora.population.ratings import SIGMA0, conservative
from populora.report.figures import _lanes, draw_family_tree

MIX = {"svd_scale_rotate": 1.0, "layerwise": 1.0, "svd_split": 1.0}


def members(*rows):
    return [{"id": i, "mu": mu, "sigma": sigma} for i, mu, sigma in rows]


POP = members(("s0", 30.0, 2.0), ("s1", 28.0, 1.0), ("s2", 35.0, 6.0), ("s3", 20.0, 1.0))
# conservative: s0 24, s1 25, s2 17, s3 17 -> ranking s1, s0, s2, s3 (tie s2/s3 broken by id)


def test_rank_by_conservative_rating_not_mu():
    assert [m["id"] for m in rank_members(POP)] == ["s1", "s0", "s2", "s3"]


def test_plan_replaces_weakest_with_children_of_strongest():
    plan = plan_replacement(POP, replace_k=2, operator_mix=MIX, seed=0, generation=5, id_prefix="student")
    assert [p["replaces"] for p in plan] == ["s3", "s2"]  # weakest first
    for p in plan:
        assert p["parents"][0] in {"s1", "s0"}  # the first parent from the pool: the 2 strongest survivors
        assert p["operator"] in MIX
        assert len(p["parents"]) == (2 if p["operator"] in CROSSOVERS else 1)
        assert len(set(p["parents"])) == len(p["parents"])
        sigmas = {m["id"]: m["sigma"] for m in POP}
        # a child keeps its parents' uncertainty: a reset sigma would rank it last at once
        assert p["sigma"] == pytest.approx(sum(sigmas[q] for q in p["parents"]) / len(p["parents"]))
        assert p["generation"] == 5
        mus = {m["id"]: m["mu"] for m in POP}
        assert p["inherited_mu"] == pytest.approx(sum(mus[q] for q in p["parents"]) / len(p["parents"]))
        by_id = {m["id"]: m for m in POP}
        assert p["fitness"] == [conservative(by_id[q]) for q in p["parents"]]
        assert p["fitness"] == sorted(p["fitness"], reverse=True)  # strongest parent first
    assert [p["child_id"] for p in plan] == ["student-g0005-0", "student-g0005-1"]
    json.dumps(plan)


def test_plan_is_deterministic_and_seeded():
    kwargs = {"replace_k": 2, "operator_mix": MIX, "generation": 3}
    assert plan_replacement(POP, seed=1, **kwargs) == plan_replacement(POP, seed=1, **kwargs)
    seeds = {p["seed"] for s in range(5) for p in plan_replacement(POP, seed=s, **kwargs)}
    assert len(seeds) == 10
    other_gen = plan_replacement(POP, seed=1, **{**kwargs, "generation": 4})
    assert [p["seed"] for p in other_gen] != [p["seed"] for p in plan_replacement(POP, seed=1, **kwargs)]
    # member order in the input does not matter
    assert plan_replacement(POP[::-1], seed=1, **kwargs) == plan_replacement(POP, seed=1, **kwargs)


def test_a_sub_population_of_two_crosses_its_survivor_with_the_member_it_replaces():
    two = members(("a", 30.0, 1.0), ("b", 20.0, 1.0))
    for seed in range(20):
        plan = plan_replacement(two, replace_k=1, operator_mix={"svd_split": 1.0}, seed=seed, generation=1)
        assert plan[0]["operator"] == "svd_split" and plan[0]["parents"] == ["a", "b"] and plan[0]["replaces"] == "b"
        assert plan[0]["fitness"] == [27.0, 17.0]  # strongest first: make_child knows the fitter one


def test_parents_from_survivors_only_falls_back_to_mutation_with_one_survivor():
    two = members(("a", 30.0, 1.0), ("b", 20.0, 1.0))
    for seed in range(20):
        plan = plan_replacement(
            two, replace_k=1, operator_mix={"svd_split": 1.0}, seed=seed, generation=1, parents="survivors"
        )
        assert plan[0]["operator"] == "gaussian_all" and plan[0]["parents"] == ["a"]
        plan = plan_replacement(
            two,
            replace_k=1,
            operator_mix={"svd_split": 5.0, "mask_components": 1.0},
            seed=seed,
            generation=1,
            parents="survivors",
        )
        assert plan[0]["operator"] == "mask_components"
    plan = plan_replacement(
        two,
        replace_k=1,
        operator_mix={"layerwise": 1.0},
        seed=0,
        generation=1,
        fallback_mutation="svd_scale_rotate",
        parents="survivors",
    )
    assert plan[0]["operator"] == "svd_scale_rotate"
    with pytest.raises(ValueError, match="parent selection"):
        plan_replacement(two, replace_k=1, operator_mix={"layerwise": 1.0}, seed=0, generation=1, parents="elite")


def test_a_crossovers_second_parent_ranges_over_the_whole_sub_population():
    seen = Counter()
    for g in range(200):
        for p in plan_replacement(POP, replace_k=1, operator_mix={"layerwise": 1.0}, seed=0, generation=g):
            assert p["parents"][0] != p["parents"][1]
            seen.update(p["parents"])
    assert set(seen) == {"s0", "s1", "s2", "s3"}  # s3, replaced, is a parent too


def test_operator_mix_frequencies():
    pop = members(*[(f"m{i}", 25.0 + i, 1.0) for i in range(8)])
    mix = {"gaussian_all": 3.0, "svd_split": 1.0, "dare": 0.0}
    counts = Counter(
        p["operator"]
        for g in range(400)
        for p in plan_replacement(pop, replace_k=2, operator_mix=mix, seed=0, generation=g)
    )
    assert counts["dare"] == 0
    assert 0.68 < counts["gaussian_all"] / 800 < 0.82  # expected 0.75, sd ~0.015


def test_parent_pool_parameter():
    pop = members(*[(f"m{i}", 25.0 + i, 1.0) for i in range(6)])  # m5 strongest
    for g in range(30):
        for p in plan_replacement(
            pop, replace_k=3, operator_mix={"gaussian_all": 1.0}, seed=0, generation=g, parent_pool=1
        ):
            assert p["parents"] == ["m5"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"replace_k": 4}, "replace_k"),
        ({"replace_k": -1}, "replace_k"),
        ({"operator_mix": {"teleport": 1.0}}, "unknown operators"),
        ({"operator_mix": {"layerwise": 0.0}}, "positive sum"),
        ({"fallback_mutation": "layerwise"}, "fallback"),
    ],
)
def test_plan_rejects_bad_input(kwargs, match):
    base = {"replace_k": 1, "operator_mix": MIX, "seed": 0, "generation": 1}
    with pytest.raises(ValueError, match=match):
        plan_replacement(POP, **{**base, **kwargs})


def test_replace_zero_and_duplicates():
    assert plan_replacement(POP, replace_k=0, operator_mix=MIX, seed=0, generation=1) == []
    with pytest.raises(ValueError, match="duplicate"):
        plan_replacement(POP + POP[:1], replace_k=1, operator_mix=MIX, seed=0, generation=1)


def _swap_in(members, plan):
    """The member list after `plan`: each replaced member's place holds its child (as the evolve stage does)."""
    by_victim = {p["replaces"]: p for p in plan}
    return [
        dict(m)
        if m["id"] not in by_victim
        else {
            "id": by_victim[m["id"]]["child_id"],
            "mu": by_victim[m["id"]]["inherited_mu"],
            "sigma": by_victim[m["id"]]["sigma"],
        }
        for m in members
    ]


def test_plan_replaces_the_weakest_and_resets_sigma_on_request():
    plan = plan_replacement(POP, replace_k=1, operator_mix=MIX, seed=0, generation=2)
    assert plan[0]["replaces"] == "s3" and plan[0]["inherited_mu"] > 0
    reset = plan_replacement(POP, replace_k=1, operator_mix=MIX, seed=0, generation=2, initial_sigma=SIGMA0)
    assert reset[0]["sigma"] == SIGMA0


def test_registry_names_are_disjoint():
    assert not set(MUTATIONS) & set(CROSSOVERS)


def _three_generations():
    pop = members(("t0", 25.0, 8.0), ("t1", 26.0, 8.0), ("t2", 24.0, 8.0), ("t3", 27.0, 8.0))
    lineage = founder_events([m["id"] for m in pop])
    for g in (2, 4):
        plan = plan_replacement(pop, replace_k=2, operator_mix=MIX, seed=7, generation=g, id_prefix="teacher")
        lineage = append_lineage(lineage, plan)
        pop = _swap_in(pop, plan)
    return lineage


def test_lineage_events_and_lanes():
    lineage = _three_generations()
    assert len(lineage) == 8
    json.dumps(lineage)
    lanes = _lanes(lineage)
    assert sorted(set(lanes.values())) == [0, 1, 2, 3]  # children reuse their victim's slot
    for e in lineage[4:]:
        assert lanes[e["child_id"]] == lanes[e["replaces"]]
    with pytest.raises(ValueError, match="not in the lineage"):
        append_lineage(
            founder_events(["a"]),
            [
                {
                    "child_id": "c",
                    "parents": ["ghost"],
                    "operator": "gaussian_all",
                    "seed": 1,
                    "generation": 1,
                    "replaces": "a",
                }
            ],
        )


def test_draw_family_tree_writes_png(tmp_path):
    out = tmp_path / "plots" / "tree.png"
    draw_family_tree(_three_generations(), out, title="teachers")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert [p.name for p in out.parent.iterdir()] == ["tree.png"]  # no temp files left
    with pytest.raises(ValueError):
        draw_family_tree([], tmp_path / "empty.png")


def test_fitness_when_given_ranks_instead_of_trueskill():
    pop = [{**m, "fitness": f} for m, f in zip(POP, (0.1, -1.0, 0.5, 0.2))]
    assert [m["id"] for m in rank_members(pop)] == ["s2", "s3", "s0", "s1"]
    plan = plan_replacement(pop, replace_k=1, operator_mix=MIX, seed=0, generation=1)
    assert plan[0]["replaces"] == "s1"  # the best TrueSkill rating, the lowest mean reward


def test_teachers_rank_by_reward_under_learnability_students_by_trueskill():
    from populora.population.evolution import uses_reward_fitness

    assert uses_reward_fitness("teachers", "learnability")
    assert not uses_reward_fitness("teachers", "zero_sum")
    assert not uses_reward_fitness("students", "learnability")
    assert uses_reward_fitness("students", "learnability", "reward") and not uses_reward_fitness(
        "teachers", "learnability", "trueskill"
    )


def _state(teachers, students):
    from populora.core.state import State

    slots = list(dict.fromkeys(teachers + students))
    return State(
        arm="population",
        generation=0,
        teachers=teachers,
        students=students,
        members={s: f"population/{s}@g000" for s in slots},
        ratings={s: {"mu": 25.0, "sigma": 8.0} for s in slots},
        lineage=[],
    )


def test_generation_replacement_records_every_members_fitness_and_spares_a_sub_population_of_one():
    from populora.population.evolution import plan_generation_replacement

    state = _state(["t0", "t1", "t2"], ["s0"])
    ratings = {
        "t0": {"mu": 30.0, "sigma": 2.0},
        "t1": {"mu": 20.0, "sigma": 2.0},
        "t2": {"mu": 25.0, "sigma": 2.0},
        "s0": {"mu": 25.0, "sigma": 3.0},
    }
    # t1 wins the most games (unsolvable tasks) but learnability paid it nothing
    records = {
        "t0/propose": {"sum": 1.0, "count": 4},
        "t1/propose": {"sum": -2.0, "count": 4},
        "t2/propose": {"sum": 2.0, "count": 4},
        "s0/solve": {"sum": 0.0, "count": 4},
    }
    result = plan_generation_replacement(
        state,
        ratings,
        records,
        generation=1,
        replace=1,
        operator_mix={"gaussian_all": 1.0},
        teacher_mode="learnability",
        fitness_mode="auto",
        seed_of=lambda role: 3,
    )
    assert [e["slot"] for e in result["events"]] == ["t1"]  # the student sub-population of one is never replaced
    assert [r["slot"] for r in result["rankings"]["teachers"]] == ["t2", "t0", "t1"]
    assert [r["fitness"] for r in result["rankings"]["teachers"]] == [0.5, 0.25, -0.5]
    assert result["rankings"]["students"][0]["by"] == "trueskill"
    event = result["events"][0]
    assert event["child_id"] == "population/t1@g002" and result["members"]["t1"] == "population/t1@g002"
    assert result["ratings"]["t1"]["sigma"] == 2.0  # the parents' sigma, not a reset
    assert result["reward_records"]["t1/propose"]["count"] == 1  # a fresh record, primed with the parent's fitness


def test_replacements_never_empty_a_sub_population():
    from populora.population.evolution import replacements

    assert [replacements(n, 1) for n in (1, 2, 4)] == [0, 1, 1]
    assert replacements(3, 5) == 2


def test_fitter_probability_and_reward_standard_error():
    from populora.population.evolution import fitter_probability, reward_standard_error

    assert fitter_probability({"value": 2.0, "error": 0.1}, {"value": 0.0, "error": 0.1}) > 0.999
    assert fitter_probability({"value": 0.1, "error": 1.0}, {"value": 0.0, "error": 1.0}) < 0.6
    assert fitter_probability({"value": 1.0, "error": None}, {"value": 0.0, "error": 1.0}) is None
    assert reward_standard_error({"sum": 3.0, "sumsq": 3.0, "count": 3}) == 0.0  # three rewards of 1
    assert reward_standard_error({"sum": 1.0, "count": 4}) == 0.5  # no sumsq: the widest, sd 1
    assert reward_standard_error(None) is None


def test_replacement_records_each_members_uncertainty_and_flags_a_call_within_noise():
    from populora.population.evolution import accumulate_rewards, plan_generation_replacement

    state = _state(["t0", "t1"], ["s0", "s1"])
    close = {
        "t0": {"mu": 25.0, "sigma": 8.0},
        "t1": {"mu": 25.0, "sigma": 8.0},
        "s0": {"mu": 26.0, "sigma": 7.0},
        "s1": {"mu": 24.0, "sigma": 7.0},
    }
    records = accumulate_rewards(
        {},
        {"t0/propose": {"sum": 2.0, "sumsq": 2.0, "count": 4}, "t1/propose": {"sum": -4.0, "sumsq": 4.0, "count": 4}},
    )
    result = plan_generation_replacement(
        state,
        close,
        records,
        generation=1,
        replace=1,
        operator_mix={"layerwise": 1.0},
        teacher_mode="learnability",
        fitness_mode="auto",
        seed_of=lambda role: 3,
    )
    events = {e["role"]: e for e in result["events"]}
    assert events["students"]["replaces"] == "population/s1@g000" and events["students"]["within_noise"]
    assert 0.5 < events["students"]["confidence"] < 0.95  # two points of mu against sigmas of 7
    # the teachers: mean rewards 0.5 (sd 0.58) against -1 (sd 0): sure
    assert not events["teachers"]["within_noise"] and events["teachers"]["confidence"] > 0.95
    assert events["students"]["parents"] == ["population/s0@g000", "population/s1@g000"]  # a real crossover
    row = result["rankings"]["teachers"][0]
    assert row["rewards"] == 4 and row["error"] == pytest.approx(0.2887, abs=1e-4) and row["by"] == "reward"
    assert result["rankings"]["students"][1]["error"] == 7.0
