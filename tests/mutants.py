"""Deliberately broken copies of the code a test guards, to show inside the test that it can fail.

    broken = broken_copy(two_level_bootstrap, ("np.take_along_axis(means_a, rows_a, 1)", "means_a"))

compiles the function's own source with each (old, new) replaced (each old must occur), in the function's
module globals; the test then checks that its assertions reject the copy.
"""

from __future__ import annotations

import inspect
import textwrap


def broken_copy(func, *replacements: tuple[str, str]):
    """`func` compiled again from its source with every `old` of `replacements` replaced by its `new`."""
    source = textwrap.dedent(inspect.getsource(func))
    for old, new in replacements:
        assert old in source, f"{old!r} is not in {func.__qualname__}: the broken copy no longer breaks it"
        source = source.replace(old, new)
    namespace: dict = {}
    exec(compile(source, f"<broken {func.__qualname__}>", "exec"), func.__globals__, namespace)
    return namespace[func.__name__]
