"""Task families that vary: programs composed from small typed primitives, with typed random inputs.

One generator serves the warm start, the held-out pool and the positive control. A *primitive* is a
small typed step (`ints -> ints`: `[x + 3 for x in xs]`; `ints -> int`: `max(xs)`; `str -> str`:
`s[::-1]`...) with its constants drawn per program; a *family* chains primitives along a typed
shape (`list_reduce`: some list steps, then a reduction), so one family yields many distinct program
texts (constants, primitives, variable names, nested or one assignment per step). Every program
makes a `code_o` task (predict the output) and a `code_i` task (give an input for the output); the
sandbox computes the gold outputs later (`populora.verifier.verify_rows`).

The split is by program text, in three parts (`split_of`), so that what the warm start trains on
never shares a program text with what measures it:

* **train**: the train families, each chain of two or more primitives whose *composition* (the
  tuple of primitive names) is not reserved;
* **held-out**: whole families never trained on (`Family.split == "heldout"`: known primitives in
  new orders, and a few primitives and structures of their own), and the reserved compositions of
  the train families (about `RESERVED_PERCENT`, by a stable hash: unseen compositions of trained
  primitives). Held-out programs are divided again by a hash of their text into `validation` (what
  the warm start's budget is chosen on) and `pool` (what the held-out pool is built from).

    >>> import random
    >>> program = draw_program("list_reduce", random.Random(0))
    >>> program.text.startswith("def f(")
    True
    >>> split_of(program) in ("train", "validation", "pool")
    True
    >>> rows = family_tasks("list_reduce", heldout=2, train=3, seed=0)
    >>> len(rows["heldout"]), len(rows["train"]), rows["train"][0]["type"]
    (2, 3, 'code_o')
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

TASK_TYPES = ("code_o", "code_i")
RESERVED_PERCENT = 25  # share of the train families' multi-step compositions held out as unseen compositions
SPLITS = ("train", "validation", "pool")

# Value types of the primitives: a list of small ints, an int, a lowercase word.
INTS, INT, STR = "ints", "int", "str"
PARAMETER_NAMES = {
    INTS: ("xs", "nums", "values", "items", "arr", "data"),
    INT: ("n", "k", "num", "m", "a", "y"),
    STR: ("s", "text", "word", "name", "w"),
}
STEP_NAMES = {
    INTS: ("ys", "vals", "out", "rest", "picked", "lst"),
    INT: ("t", "total", "res", "acc", "r", "z"),
    STR: ("u", "res", "t", "out", "part", "p"),
}
LOOP_NAMES = ("x", "v", "e", "i")  # the comprehension variable (never a parameter name)
LETTERS = "aeilnrst"  # words from few letters: counts, finds and replacements hit often


# ---- typed random inputs -------------------------------------------------------------------------------------------


def draw_ints(rng: random.Random) -> list[int]:
    return [rng.randint(0, 15) for _ in range(rng.randint(3, 5))]


def draw_int(rng: random.Random) -> int:
    return rng.randint(0, 20)


def draw_word(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 6)))


DRAW: dict[str, Callable[[random.Random], object]] = {INTS: draw_ints, INT: draw_int, STR: draw_word}


def draw_arguments(kinds: tuple[str, ...], rng: random.Random) -> str:
    """One argument list (Python source) for parameters of `kinds`."""
    return ", ".join(repr(DRAW[kind](rng)) for kind in kinds)


# ---- primitives ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Primitive:
    """A typed step: `render(rng, operand, loop_var)` -> expression text. `operand` is the input's text,
    put in parentheses first when the template needs an atom (`atomic_operand`) and it is not one;
    `atomic` says whether the result is an atom (a call, subscript or display) for the next step."""

    name: str
    takes: str
    gives: str
    render: Callable[[random.Random, str, str], str]
    atomic_operand: bool = True
    atomic: bool = True


def _c(low: int, high: int) -> Callable[[random.Random], int]:
    return lambda rng: rng.randint(low, high)


def _letter(rng: random.Random) -> str:
    return repr(rng.choice(LETTERS))


def _prims(*rows: tuple) -> dict[str, Primitive]:
    return {row[0]: Primitive(*row) for row in rows}


# name, takes, gives, render(rng, v, x), atomic_operand, atomic
PRIMITIVES: dict[str, Primitive] = _prims(
    # lists to lists
    ("map_add", INTS, INTS, lambda r, v, x: f"[{x} + {_c(1, 9)(r)} for {x} in {v}]", False),
    ("map_sub", INTS, INTS, lambda r, v, x: f"[{x} - {_c(1, 5)(r)} for {x} in {v}]", False),
    ("map_mul", INTS, INTS, lambda r, v, x: f"[{x} * {_c(2, 3)(r)} for {x} in {v}]", False),
    ("map_mod", INTS, INTS, lambda r, v, x: f"[{x} % {_c(2, 5)(r)} for {x} in {v}]", False),
    ("keep_gt", INTS, INTS, lambda r, v, x: f"[{x} for {x} in {v} if {x} > {_c(3, 9)(r)}]", False),
    ("keep_lt", INTS, INTS, lambda r, v, x: f"[{x} for {x} in {v} if {x} < {_c(5, 12)(r)}]", False),
    ("keep_even", INTS, INTS, lambda r, v, x: f"[{x} for {x} in {v} if {x} % 2 == 0]", False),
    ("keep_odd", INTS, INTS, lambda r, v, x: f"[{x} for {x} in {v} if {x} % 2 == 1]", False),
    ("sort", INTS, INTS, lambda r, v, x: f"sorted({v})", False),
    ("sort_desc", INTS, INTS, lambda r, v, x: f"sorted({v}, reverse=True)", False),
    ("reverse", INTS, INTS, lambda r, v, x: f"{v}[::-1]"),
    ("take", INTS, INTS, lambda r, v, x: f"{v}[:{_c(1, 3)(r)}]"),
    ("drop", INTS, INTS, lambda r, v, x: f"{v}[{_c(1, 2)(r)}:]"),
    ("append", INTS, INTS, lambda r, v, x: f"{v} + [{_c(0, 9)(r)}]", True, False),
    # lists to ints
    ("sum", INTS, INT, lambda r, v, x: f"sum({v})", False),
    ("len", INTS, INT, lambda r, v, x: f"len({v})", False),
    ("max", INTS, INT, lambda r, v, x: f"max({v})", False),
    ("min", INTS, INT, lambda r, v, x: f"min({v})", False),
    ("first", INTS, INT, lambda r, v, x: f"{v}[0]"),
    ("last", INTS, INT, lambda r, v, x: f"{v}[-1]"),
    ("second", INTS, INT, lambda r, v, x: f"{v}[1]"),
    ("count", INTS, INT, lambda r, v, x: f"{v}.count({_c(0, 9)(r)})"),
    # ints to ints
    ("add", INT, INT, lambda r, v, x: f"{v} + {_c(1, 9)(r)}", False, False),
    ("sub", INT, INT, lambda r, v, x: f"{v} - {_c(1, 9)(r)}", False, False),
    ("mul", INT, INT, lambda r, v, x: f"{v} * {_c(2, 4)(r)}", True, False),
    ("floordiv", INT, INT, lambda r, v, x: f"{v} // {_c(2, 4)(r)}", True, False),
    ("mod", INT, INT, lambda r, v, x: f"{v} % {_c(3, 7)(r)}", True, False),
    ("min_c", INT, INT, lambda r, v, x: f"min({v}, {_c(3, 12)(r)})", False),
    ("max_c", INT, INT, lambda r, v, x: f"max({v}, {_c(3, 12)(r)})", False),
    # strings to strings
    ("upper", STR, STR, lambda r, v, x: f"{v}.upper()"),
    ("str_reverse", STR, STR, lambda r, v, x: f"{v}[::-1]"),
    ("str_take", STR, STR, lambda r, v, x: f"{v}[:{_c(1, 3)(r)}]"),
    ("str_drop", STR, STR, lambda r, v, x: f"{v}[{_c(1, 2)(r)}:]"),
    ("every_other", STR, STR, lambda r, v, x: f"{v}[::2]"),
    ("double", STR, STR, lambda r, v, x: f"{v} + {v}", True, False),
    ("suffix", STR, STR, lambda r, v, x: f"{v} + {_letter(r)}", True, False),
    ("prefix", STR, STR, lambda r, v, x: f"{_letter(r)} + {v}", True, False),
    ("replace", STR, STR, lambda r, v, x: f"{v}.replace({_letter(r)}, {_letter(r)})"),
    ("sort_chars", STR, STR, lambda r, v, x: f"''.join(sorted({v}))", False),
    # strings to ints
    ("str_len", STR, INT, lambda r, v, x: f"len({v})", False),
    ("str_count", STR, INT, lambda r, v, x: f"{v}.count({_letter(r)})"),
    # held-out only: primitives no train family uses
    ("find", STR, INT, lambda r, v, x: f"{v}.find({_letter(r)})"),
    ("range", INT, INTS, lambda r, v, x: f"list(range({v}))", False),
    ("range_from", INT, INTS, lambda r, v, x: f"list(range({_c(1, 4)(r)}, {v}))", False),
    ("digits", INT, STR, lambda r, v, x: f"str({v})", False),
    ("square", INT, INT, lambda r, v, x: f"{v} * {v}", True, False),
)


# ---- families ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """A typed shape: the parameters' kinds, then `steps` (primitive names to choose from, and how many
    times the step repeats: `(names, low, high)`), rendered by `write` (a chain of steps by default)."""

    name: str
    split: str  # "train", "heldout" (validation and pool) or "pool" (held out, the pool's only)
    params: tuple[str, ...]
    steps: tuple[tuple[tuple[str, ...], int, int], ...] = ()
    about: str = ""
    write: Callable[[random.Random, tuple[str, ...]], tuple[str, tuple[str, ...]]] | None = None


LIST_TO_LIST = (
    "map_add",
    "map_sub",
    "map_mul",
    "map_mod",
    "keep_gt",
    "keep_lt",
    "keep_even",
    "keep_odd",
    "sort",
    "sort_desc",
    "reverse",
    "take",
    "drop",
    "append",
)
LIST_TO_INT = ("sum", "len", "max", "min", "first", "last", "second", "count")
INT_TO_INT = ("add", "sub", "mul", "floordiv", "mod", "min_c", "max_c")
STR_TO_STR = (
    "upper",
    "str_reverse",
    "str_take",
    "str_drop",
    "every_other",
    "double",
    "suffix",
    "prefix",
    "replace",
    "sort_chars",
)
STR_TO_INT = ("str_len", "str_count")


def _loop_sum(rng: random.Random, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`total = c; for x in xs: [if cond:] total += g(x)`."""
    xs, total, x = names[0], rng.choice(("total", "acc", "s", "result")), rng.choice(LOOP_NAMES)
    term, kind = rng.choice(
        ((x, "id"), (f"{x} * {rng.randint(2, 3)}", "mul"), (f"{x} % {rng.randint(2, 4)}", "mod"), ("1", "one"))
    )
    cond, ckind = rng.choice(((None, ""), (f"{x} > {rng.randint(3, 9)}", "gt"), (f"{x} % 2 == 0", "even")))
    body = f"        {total} += {term}" if cond is None else f"        if {cond}:\n            {total} += {term}"
    head = f"    {total} = {rng.randint(0, 5)}\n    for {x} in {xs}:\n"
    return head + body + f"\n    return {total}", ("loop_sum", kind, ckind)


def _count_chars(rng: random.Random, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`n = 0; for ch in s: if cond: n += 1`."""
    s, n, ch = names[0], rng.choice(("count", "n", "c")), rng.choice(("ch", "c2", "letter"))
    cond, kind = rng.choice(
        (
            (f"{ch} in 'aeiou'", "vowel"),
            (f"{ch} == {_letter(rng)}", "eq"),
            (f"{ch} != {_letter(rng)}", "ne"),
            (f"{ch} < 'm'", "lt"),
        )
    )
    return (
        f"    {n} = 0\n    for {ch} in {s}:\n        if {cond}:\n            {n} += 1\n    return {n}",
        ("count_chars", kind),
    )


def _branch(rng: random.Random, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`if n > c: return g(n)` then `return h(n)`: a condition, two arithmetic steps."""
    n = names[0]
    cond, kind = rng.choice(
        ((f"{n} > {rng.randint(4, 14)}", "gt"), (f"{n} % 2 == 0", "even"), (f"{n} < {rng.randint(4, 14)}", "lt"))
    )
    first, second = rng.sample(INT_TO_INT, 2)
    then = PRIMITIVES[first].render(rng, n, "x")
    other = PRIMITIVES[second].render(rng, n, "x")
    return f"    if {cond}:\n        return {then}\n    return {other}", ("branch", kind, first, second)


def _list_branch(rng: random.Random, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`if len(xs) > c: return xs[..]` then another reduction."""
    xs = names[0]
    first, second = rng.sample(("sum", "max", "min", "first", "last", "len"), 2)
    limit = rng.randint(3, 4)
    return (
        f"    if len({xs}) > {limit}:\n        return {PRIMITIVES[first].render(rng, xs, 'x')}\n"
        f"    return {PRIMITIVES[second].render(rng, xs, 'x')}",
        ("list_branch", first, second),
    )


def _pair_arith(rng: random.Random, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """Two ints combined, then maybe one arithmetic step: `return a * b - 3`."""
    a, b = names
    op, kind = rng.choice(
        (
            (f"{a} + {b}", "plus"),
            (f"{a} - {b}", "minus"),
            (f"{a} * {b}", "times"),
            (f"max({a}, {b})", "max2"),
            (f"min({a}, {b})", "min2"),
        )
    )
    if rng.random() < 0.5:
        return f"    return {op}", ("pair", kind)
    then = rng.choice(("add", "sub", "mod"))
    operand = op if op.startswith(("max", "min")) or then in ("add", "sub") else f"({op})"
    return f"    return {PRIMITIVES[then].render(rng, operand, 'x')}", ("pair", kind, then)


def _offset(rng: random.Random, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """A value of the input (itself, a length, a count, a reduction) and a two-digit constant: `len(s) + 23`,
    `max(xs) - 7`, `n * 6`. One step a small model can take, with outputs spread over a wide range, so that no
    single answer is right for many tasks (pool only: `Family.split`)."""
    name = names[0]
    measures = {
        "n": (name, "id"),
        "xs": rng.choice(
            ((f"max({name})", "max"), (f"sum({name})", "sum"), (f"{name}[0]", "first"), (f"len({name})", "len"))
        ),
        "s": rng.choice(((f"len({name})", "len"), (f"{name}.count({_letter(rng)})", "count"))),
    }
    kind = "n" if name in PARAMETER_NAMES[INT] else "xs" if name in PARAMETER_NAMES[INTS] else "s"
    value, measure = measures[kind]
    op, how = rng.choice(
        (
            (f"{value} + {rng.randint(11, 60)}", "plus"),
            (f"{value} - {rng.randint(3, 9)}", "minus"),
            (f"{rng.randint(30, 90)} - {value}", "from"),
            (f"{value} * {rng.randint(5, 12)}", "times"),
        )
    )
    return f"    return {op}", ("offset", measure, how)


def _list_and_int(rng: random.Random, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """A list and an int: `xs[:k]`, `xs.count(k)`, `[x + k for x in xs]`, `sum(xs) + k`."""
    xs, k = names
    x = rng.choice(LOOP_NAMES)
    expr, kind = rng.choice(
        (
            (f"{xs}.count({k})", "count_k"),
            (f"[{x} + {k} for {x} in {xs}]", "map_add_k"),
            (f"sum({xs}) + {k}", "sum_plus_k"),
            (f"[{x} for {x} in {xs} if {x} > {k}]", "keep_gt_k"),
            (f"len({xs}) * {k}", "len_times_k"),
        )
    )
    return f"    return {expr}", ("list_and_int", kind)


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        # trained on by the warm start (all but their reserved compositions)
        Family("int_arith", "train", (INT,), ((INT_TO_INT, 1, 3),), "an int through one to three arithmetic steps"),
        Family(
            "list_reduce",
            "train",
            (INTS,),
            ((LIST_TO_LIST, 0, 2), (LIST_TO_INT, 1, 1)),
            "a list of small ints through up to two list steps, then reduced to one int",
        ),
        Family("list_transform", "train", (INTS,), ((LIST_TO_LIST, 1, 2),), "a list of small ints through list steps"),
        Family("string_edit", "train", (STR,), ((STR_TO_STR, 1, 2),), "a short word through one or two string edits"),
        Family(
            "string_measure",
            "train",
            (STR,),
            ((STR_TO_STR, 0, 1), (STR_TO_INT, 1, 1)),
            "a short word, maybe edited, then measured (length or a letter count)",
        ),
        Family(
            "loop_sum",
            "train",
            (INTS,),
            about="a loop summing a term over a list, maybe under a condition",
            write=_loop_sum,
        ),
        Family(
            "pair_arith",
            "train",
            (INT, INT),
            about="two ints combined, maybe one arithmetic step after",
            write=_pair_arith,
        ),
        # never trained on: known primitives in new orders, and structures and primitives of their own
        Family(
            "list_then_arith",
            "heldout",
            (INTS,),
            ((LIST_TO_INT, 1, 1), (INT_TO_INT, 1, 2)),
            "a list reduced to an int, then arithmetic on it",
        ),
        Family(
            "string_then_arith",
            "heldout",
            (STR,),
            ((STR_TO_INT, 1, 1), (INT_TO_INT, 1, 1)),
            "a word measured, then arithmetic on the count",
        ),
        Family(
            "int_to_list",
            "heldout",
            (INT,),
            ((("range", "range_from"), 1, 1), (LIST_TO_LIST, 0, 1), (LIST_TO_INT, 0, 1)),
            "an int made into a range, then list steps",
        ),
        Family(
            "digits",
            "heldout",
            (INT,),
            ((("digits",), 1, 1), (("str_reverse", "str_len", "double", "suffix"), 1, 1)),
            "an int written as a string, then a string step",
        ),
        Family(
            "count_chars",
            "heldout",
            (STR,),
            about="a loop counting the letters of a word that pass a test",
            write=_count_chars,
        ),
        Family(
            "branch", "heldout", (INT,), about="an if on an int choosing between two arithmetic steps", write=_branch
        ),
        Family(
            "list_branch",
            "heldout",
            (INTS,),
            about="an if on a list's length choosing between two reductions",
            write=_list_branch,
        ),
        Family("list_and_int", "heldout", (INTS, INT), about="a list and an int used together", write=_list_and_int),
        Family(
            "find_square",
            "heldout",
            (STR,),
            ((("find",), 1, 1), (("square", "add"), 0, 1)),
            "the position of a letter in a word, maybe squared or shifted",
        ),
        # held out, in the pool split only: outputs spread widely (the validation split, which chose the warm start's
        # budget, is as it was)
        Family("offset_int", "pool", (INT,), about="an int shifted or scaled by a two-digit constant", write=_offset),
        Family(
            "offset_list",
            "pool",
            (INTS,),
            about="a list's max, sum, first or length, then shifted or scaled by a two-digit constant",
            write=_offset,
        ),
        Family(
            "offset_word",
            "pool",
            (STR,),
            about="a word's length or letter count, then shifted or scaled by a two-digit constant",
            write=_offset,
        ),
    )
}


# ---- programs ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    family: str
    text: str
    composition: tuple[str, ...]  # the primitive names (or the written shape's parts), in order
    params: tuple[str, ...]  # the parameters' kinds, for drawing inputs


def _chain(family: Family, rng: random.Random) -> list[str]:
    names: list[str] = []
    for choices, low, high in family.steps:
        for _ in range(rng.randint(low, high)):
            names.append(rng.choice(choices))
    return names


def _render_chain(names: list[str], parameter: str, rng: random.Random) -> str:
    """The body of `f`: each step nested in one return, or one assignment per step (drawn per program)."""
    loop_var = rng.choice(LOOP_NAMES)
    nested = rng.random() < 0.5
    expression, atomic, lines = parameter, True, []
    used = {parameter}
    for index, name in enumerate(names):
        primitive = PRIMITIVES[name]
        operand = expression if atomic or not primitive.atomic_operand else f"({expression})"
        expression, atomic = primitive.render(rng, operand, loop_var), primitive.atomic
        if not nested and index < len(names) - 1:
            variable = rng.choice([n for n in STEP_NAMES[primitive.gives] if n not in used])
            used.add(variable)
            lines.append(f"    {variable} = {expression}")
            expression, atomic = variable, True
    return "\n".join([*lines, f"    return {expression}"])


def draw_program(name: str, rng: random.Random) -> Program:
    """One program of family `name`, its constants, primitives, names and layout drawn from `rng`."""
    family = FAMILIES[name]
    taken: set[str] = set()
    parameters = []
    for kind in family.params:
        parameters.append(rng.choice([n for n in PARAMETER_NAMES[kind] if n not in taken]))
        taken.add(parameters[-1])
    if family.write:
        body, composition = family.write(rng, tuple(parameters))
    else:
        chain = _chain(family, rng)
        if _kinds_after(family.params[0], chain) is None:
            raise AssertionError(f"family {name}: steps {chain} do not chain")
        body, composition = _render_chain(chain, parameters[0], rng), tuple(chain)
    return Program(name, f"def f({', '.join(parameters)}):\n{body}", (name, *composition), family.params)


def _kinds_after(kind: str, chain: list[str]) -> str | None:
    for name in chain:
        if PRIMITIVES[name].takes != kind:
            return None
        kind = PRIMITIVES[name].gives
    return kind


def _stable_percent(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 100


def is_reserved(composition: tuple[str, ...]) -> bool:
    """Whether a train family's composition is held out (unseen compositions of trained primitives): about
    RESERVED_PERCENT of those with at least two steps, by a stable hash of the composition."""
    return len(composition) >= 3 and _stable_percent("composition:" + "|".join(composition)) < RESERVED_PERCENT


def split_of(program: Program) -> str:
    """`train`, or for a held-out program (a held-out family's, or a reserved composition of a train family)
    `validation` or `pool`, by a stable hash of its text: the two never share a program; a pool-only family's
    programs are all `pool`."""
    family = FAMILIES[program.family]
    if family.split == "train" and not is_reserved(program.composition):
        return "train"
    if family.split == "pool":
        return "pool"
    return "validation" if _stable_percent("text:" + program.text) < 50 else "pool"


def held_out_kind(program: Program) -> str | None:
    """Why a held-out program is held out: `family` (its whole family is) or `composition`; None for train."""
    if FAMILIES[program.family].split in ("heldout", "pool"):
        return "family"
    return "composition" if is_reserved(program.composition) else None


def family_names(split: str) -> list[str]:
    """The families that yield programs of `split` (train: the train families; validation: those and the held-out
    ones; pool: every family, the pool-only ones included)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    wanted = {"train": ("train",), "validation": ("train", "heldout"), "pool": ("train", "heldout", "pool")}[split]
    return sorted(n for n, f in FAMILIES.items() if f.split in wanted)


def programs(split: str, seed: int, *, families: list[str] | None = None, tries: int = 200) -> Iterator[Program]:
    """Endless distinct programs of `split`, the families taken in turn (seeded; each family its own stream).
    A family that yields no new program of the split in `tries` draws in a row drops out; the stream ends
    when every family has."""
    names = families or family_names(split)
    streams = {name: random.Random(f"{name}:{split}:{seed}") for name in names}
    seen: set[str] = set()
    active = list(names)
    while active:
        for name in list(active):
            for _ in range(tries):
                program = draw_program(name, streams[name])
                if program.text not in seen and split_of(program) == split:
                    seen.add(program.text)
                    yield program
                    break
            else:
                active.remove(name)


def task_rows(program: Program, rng: random.Random, *, index: int, types=TASK_TYPES, inputs: int = 1) -> list[dict]:
    """Verifier rows of one program: `inputs` argument lists drawn, each as a task of every type in `types`."""
    rows = []
    for k in range(inputs):
        arguments = draw_arguments(program.params, rng)
        for task_type in types:
            rows.append(
                {
                    "task_id": f"{split_of(program)}-{program.family}-{index:05d}-{k}-{task_type}",
                    "type": task_type,
                    "program": program.text,
                    "inputs": [arguments],
                    "message": None,
                    "family": program.family,
                    "composition": list(program.composition),
                    "held_out": held_out_kind(program),
                    "split": split_of(program),
                }
            )
    return rows


def split_tasks(
    split: str, n_programs: int, seed: int, *, families: list[str] | None = None, types=TASK_TYPES
) -> list[dict]:
    """Verifier rows of `n_programs` distinct programs of `split` (one input each, every type in `types`)."""
    rng = random.Random(f"inputs:{split}:{seed}")
    rows = []
    for index, program in enumerate(programs(split, seed, families=families)):
        if index >= n_programs:
            break
        rows.extend(task_rows(program, rng, index=index, types=types))
    return rows


def evaluate(program: Program, arguments: str):
    """`f(arguments)` of one of this generator's own programs, run in this process. Only to screen draws
    (`family_tasks`): every gold output the pipeline uses comes from the sandbox (`populora.verifier`)."""
    namespace: dict = {}
    exec(program.text, namespace)  # text built from this module's templates, not model output
    return eval(f"f({arguments})", namespace)


def screened(program: Program, arguments: str) -> bool:
    """Whether a draw makes a task worth asking: `f` runs on it, and its output is not one of its arguments
    (copying what the task shows would be right)."""
    from populora.core.literals import output_is_an_argument

    try:
        value = evaluate(program, arguments)
    except Exception:  # noqa: BLE001 - a drawn input may make any of the primitives raise (an empty max, ...)
        return False
    return not output_is_an_argument(arguments, repr(value))


def family_tasks(name: str, *, heldout: int, train: int, seed: int) -> dict[str, list[dict]]:
    """`{"heldout": [...], "train": [...]}` code_o verifier rows of family `name` (the positive control's
    tasks): held-out tasks of distinct programs, none of them ever a training task's program (the held-out pool
    is never trained on, by program text); training tasks of distinct (program, input) pairs; each input one its
    program runs on and does not copy (`screened`)."""
    if name not in FAMILIES:
        raise ValueError(f"unknown task family {name!r}; known: {', '.join(sorted(FAMILIES))}")
    rng = random.Random(f"control:{name}:{seed}")
    held: set[str] = set()
    seen: set[tuple[str, str]] = set()
    rows: list[dict] = []
    for _ in range(200 * (heldout + train)):
        if len(rows) == heldout + train:
            break
        program = draw_program(name, rng)
        arguments = draw_arguments(program.params, rng)
        drawing_heldout = len(rows) < heldout
        if program.text in held or (program.text, arguments) in seen or not screened(program, arguments):
            continue
        if drawing_heldout:
            held.add(program.text)
        else:
            seen.add((program.text, arguments))
        rows.append(
            {
                "task_id": f"{name}-{len(rows):04d}",
                "type": "code_o",
                "program": program.text,
                "inputs": [arguments],
                "message": None,
                "family": name,
            }
        )
    if len(rows) < heldout + train:
        raise ValueError(
            f"family {name!r} has fewer than {heldout} distinct programs and {train} distinct training "
            "tasks on the others"
        )
    return {"heldout": rows[:heldout], "train": rows[heldout:]}
