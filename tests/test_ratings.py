import doctest
import json
import math

import numpy as np
import pytest
import trueskill

from populora.population import ratings as R
from populora.population.ratings import (
    RatingEnv,
    conservative,
    new_rating,
    pfsp_pairing,
    update_from_games,
    win_probability,
)


def test_new_rating_and_round_trip():
    r = new_rating()
    assert r == {"mu": 25.0, "sigma": 25.0 / 3}
    assert new_rating({"mu": 10, "sigma": 2}) == {"mu": 10.0, "sigma": 2.0}
    with pytest.raises(ValueError):
        new_rating({"mu": 10, "sgima": 2})


def test_update_from_games_direction_and_purity():
    ratings = {"s": new_rating(), "t": new_rating()}
    before = json.loads(json.dumps(ratings))
    won = update_from_games(ratings, [("s", "t", True)])
    lost = update_from_games(ratings, [("s", "t", False)])
    assert ratings == before  # input untouched
    assert won["s"]["mu"] > 25 > won["t"]["mu"]
    assert lost["t"]["mu"] > 25 > lost["s"]["mu"]
    assert won["s"]["sigma"] < 25 / 3
    # matches a direct trueskill call with the same environment
    env = RatingEnv().make()
    s, t = trueskill.rate_1vs1(env.create_rating(), env.create_rating(), env=env)
    assert won["s"] == pytest.approx(R.to_dict(s)) and won["t"] == pytest.approx(R.to_dict(t))


def test_update_is_sequential_and_deterministic():
    ratings = {m: new_rating() for m in ("s1", "s2", "t1")}
    games = [("s1", "t1", True), ("s2", "t1", False), ("s1", "t1", False), ("s2", "t1", True)]
    a = update_from_games(ratings, games)
    b = update_from_games(ratings, games)
    assert a == b
    step = ratings
    for g in games:
        step = update_from_games(step, [g])
    assert all(step[m] == pytest.approx(a[m]) for m in a)
    # order matters (sequential updates), so reversing changes the result
    c = update_from_games(ratings, games[::-1])
    assert c["s1"] != a["s1"]


def test_many_wins_separate_players():
    ratings = {"strong": new_rating(), "weak": new_rating()}
    out = update_from_games(ratings, [("strong", "weak", True)] * 30)
    assert win_probability(out["strong"], out["weak"]) > 0.9
    assert conservative(out["strong"]) > conservative(out["weak"])


def test_self_games_skipped_and_unknown_ids_rejected():
    ratings = {"solo": new_rating()}
    assert update_from_games(ratings, [("solo", "solo", True)] * 5) == ratings
    with pytest.raises(KeyError):
        update_from_games(ratings, [("solo", "ghost", True)])


def test_env_params_are_used():
    ratings = {"s": new_rating(), "t": new_rating()}
    default = update_from_games(ratings, [("s", "t", True)])
    wide = update_from_games(ratings, [("s", "t", True)], {"beta": 20.0})
    assert wide["s"]["mu"] != pytest.approx(default["s"]["mu"])


def test_win_probability_formula():
    s, t = {"mu": 30.0, "sigma": 2.0}, {"mu": 25.0, "sigma": 3.0}
    beta = 4.0
    z = (30 - 25) / math.sqrt(2 * 16 + 4 + 9)
    assert win_probability(s, t, beta) == pytest.approx(0.5 * (1 + math.erf(z / math.sqrt(2))))
    assert win_probability(t, s, beta) == pytest.approx(1 - win_probability(s, t, beta))
    assert win_probability(trueskill.Rating(30, 2), trueskill.Rating(25, 3), beta) == pytest.approx(
        win_probability(s, t, beta)
    )


def test_conservative():
    assert conservative({"mu": 25.0, "sigma": 25 / 3}) == pytest.approx(0.0)
    assert conservative({"mu": 20.0, "sigma": 1.0}, k=2) == 18.0


def _ratings(teacher_mus, student_mus, sigma=1.0):
    r = {f"t{i}": {"mu": mu, "sigma": sigma} for i, mu in enumerate(teacher_mus)}
    r.update({f"s{i}": {"mu": mu, "sigma": sigma} for i, mu in enumerate(student_mus)})
    return r, [f"t{i}" for i in range(len(teacher_mus))], [f"s{i}" for i in range(len(student_mus))]


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize(("n_t", "n_s", "k"), [(4, 4, 1), (4, 4, 3), (6, 2, 1), (2, 5, 2), (1, 3, 1), (3, 1, 2)])
def test_pairing_covers_everyone(seed, n_t, n_s, k):
    rng = np.random.default_rng(1000 + seed)
    ratings, teachers, students = _ratings(rng.normal(25, 6, n_t), rng.normal(25, 6, n_s))
    pairing = pfsp_pairing(teachers, students, ratings, slots_per_student=k, seed=seed)
    counts = pairing["counts"]
    for s in students:  # (a) every student gets at least its slots
        assert sum(counts[t][s] for t in teachers) >= k
    for t in teachers:  # (b) every teacher has a student
        assert sum(counts[t].values()) >= 1
    total = sum(sum(row.values()) for row in counts.values())
    assert total == max(n_s * k, n_t)
    if n_s * k >= n_t:  # no extra slots needed: every student gets exactly k
        assert all(sum(counts[t][s] for t in teachers) == k for s in students)
    json.dumps(pairing)  # plain JSON


def test_pairing_is_seeded():
    ratings, teachers, students = _ratings([20, 25, 30, 35], [22, 28])
    a = pfsp_pairing(teachers, students, ratings, slots_per_student=5, seed=7)
    b = pfsp_pairing(teachers, students, ratings, slots_per_student=5, seed=7)
    c = pfsp_pairing(teachers, students, ratings, slots_per_student=5, seed=8)
    assert a == b
    assert a["counts"] != c["counts"]


def test_balanced_pairs_are_preferred_statistically():
    # teacher mus chosen so that p(s0 beats t) is about 0.5, 0.1 and 0.9
    ratings, teachers, students = _ratings([25.0, 35.9, 14.1], [25.0])
    pairing = pfsp_pairing(teachers, students, ratings, slots_per_student=3000, seed=0)
    p = {t: pairing["win_probability"][t]["s0"] for t in teachers}
    assert p["t0"] == pytest.approx(0.5) and p["t1"] < 0.15 and p["t2"] > 0.85
    n = {t: pairing["counts"][t]["s0"] for t in teachers}
    w = {t: pairing["weights"][t]["s0"] for t in teachers}
    # variance weights 0.25 vs ~0.09: the balanced teacher gets ~58% of slots
    assert n["t0"] > 1.4 * max(n["t1"], n["t2"])
    for t in teachers:  # binomial: within 5 standard deviations of the expected count
        sd = math.sqrt(3000 * w[t] * (1 - w[t]))
        assert abs(n[t] - 3000 * w[t]) < 5 * sd


def _pairs(pairing):
    """The pairing's (teacher, student) pairs with slots, in its teacher then student order."""
    return [
        {"teacher": t, "student": s, "slots": n}
        for t in pairing["teachers"]
        for s in pairing["students"]
        if (n := pairing["counts"][t][s]) > 0
    ]


def test_balanced_preference_across_seeds_one_slot():
    # 4 students at various skills, 4 teachers; matches near p=0.5 should dominate
    ratings, teachers, students = _ratings([15, 22, 28, 35], [15, 22, 28, 35])
    near, far = 0, 0
    for seed in range(300):
        pairing = pfsp_pairing(teachers, students, ratings, seed=seed)
        for pair in _pairs(pairing):
            p = pairing["win_probability"][pair["teacher"]][pair["student"]]
            if abs(p - 0.5) < 0.2:
                near += pair["slots"]
            elif abs(p - 0.5) > 0.35:
                far += pair["slots"]
    assert near > 3 * far


@pytest.mark.parametrize("weighting", ["variance", "hard", "uniform"])
def test_weights_normalised_and_temperature(weighting):
    ratings, teachers, students = _ratings([20, 25, 30], [25, 27])
    pairing = pfsp_pairing(teachers, students, ratings, weighting=weighting)
    for s in students:
        assert sum(pairing["weights"][t][s] for t in teachers) == pytest.approx(1.0)
    sharp = pfsp_pairing(teachers, students, ratings, weighting="variance", temperature=0.1)
    flat = pfsp_pairing(teachers, students, ratings, weighting="variance", temperature=100.0)
    assert sharp["weights"]["t1"]["s0"] > 0.95  # t1 is the balanced one for s0
    assert flat["weights"]["t1"]["s0"] < 0.4


def test_hard_weighting_prefers_strong_teachers():
    ratings, teachers, students = _ratings([15, 25, 35], [25])
    w = pfsp_pairing(teachers, students, ratings, weighting="hard")["weights"]
    assert w["t2"]["s0"] > w["t1"]["s0"] > w["t0"]["s0"]


def test_single_agent_pairs_with_itself():
    ratings = {"baseline": new_rating()}
    pairing = pfsp_pairing(["baseline"], ["baseline"], ratings, slots_per_student=4)
    assert pairing["counts"] == {"baseline": {"baseline": 4}}
    assert pairing["win_probability"]["baseline"]["baseline"] == 0.5
    assert _pairs(pairing) == [{"teacher": "baseline", "student": "baseline", "slots": 4}]


def test_extreme_ratings_fall_back_to_uniform():
    ratings, teachers, students = _ratings([1e6, 1e6], [-1e6])
    pairing = pfsp_pairing(teachers, students, ratings, slots_per_student=2)
    assert pairing["weights"]["t0"]["s0"] == 0.5
    assert sum(pairing["counts"][t]["s0"] for t in teachers) == 2


def test_repair_records_moves():
    # 3 teachers but one student with 3 slots and a very sharp preference: repairs needed
    ratings, teachers, students = _ratings([25, 40, 10], [25])
    pairing = pfsp_pairing(teachers, students, ratings, slots_per_student=3, temperature=0.05)
    assert pairing["counts"]["t0"]["s0"] == 1 and len(pairing["repairs"]) == 2
    assert {r["teacher"] for r in pairing["repairs"]} == {"t1", "t2"}
    assert all(r["from_teacher"] == "t0" for r in pairing["repairs"])


def test_pairing_rejects_bad_input():
    ratings, teachers, students = _ratings([25], [25])
    with pytest.raises(ValueError):
        pfsp_pairing(["t0", "t0"], students, ratings)
    with pytest.raises(KeyError):
        pfsp_pairing(["t9"], students, ratings)
    with pytest.raises(ValueError):
        pfsp_pairing(teachers, students, ratings, weighting="easy")
    with pytest.raises(ValueError):
        pfsp_pairing(teachers, students, ratings, slots_per_student=0)


def test_doctests():
    result = doctest.testmod(R)
    assert result.attempted > 0 and result.failed == 0
