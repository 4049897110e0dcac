"""The sandbox helper that verification and grading share: the `verify` config section (the one
source of the limits' defaults), the pool built from it, the isolation requirement, row guards.

    config = verify_config(params.verify)             # or verify_config(None, timeout_s=1.0)
    with sandbox_for(config, log=log) as box:         # IsolationError when a layer named in
        ...                                           #   verify.required_layers is off

The requirement names layers (`verify.required_layers`); its default, every layer but uid_drop, is
what an ordinary user gets where unprivileged user namespaces are allowed (uid_drop needs root), and
it refuses a node without a file-system jail, network namespace, ... (see populora/sandbox/__init__.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from populora.core.sections import VerifySection
from populora.sandbox import Limits, Sandbox, SandboxError, describe_missing, missing_layers

LOG = logging.getLogger("populora.verifier")
DEFAULT_REQUIRED = VerifySection.model_fields["required_layers"].default  # all but uid_drop
T = TypeVar("T")


class IsolationError(SandboxError):
    """A layer named in verify.required_layers is off: no model code runs."""


def verify_config(config: VerifySection | None = None, **overrides) -> VerifySection:
    """`config` (default: VerifySection(), whose defaults are params.yaml's) with `overrides`
    (field names of the section, e.g. timeout_s=1.0), validated by the config model."""
    base = config if config is not None else VerifySection()
    if not overrides:
        return base
    return VerifySection.model_validate({**base.model_dump(), **overrides})


def limits_of(config: VerifySection) -> Limits:
    return Limits(
        timeout_s=config.timeout_s,
        memory_mb=config.memory_mb,
        max_output_chars=config.max_output_chars,
        wall_timeout_s=config.wall_timeout_s,
    )


def isolation_report(box: Sandbox, config: VerifySection) -> dict:
    """What `--isolation` writes: {"layers": {layer: active}, "required": [layers verify.required_layers
    names], "mode": "root" | "user_namespace" | "no_namespaces" (how the sandbox got its layers)}."""
    return {
        "layers": dict(box.layers),
        "required": list(config.required_layers),
        "mode": box.capabilities.get("mode", "?"),
    }


def missing_required(box: Sandbox, config: VerifySection) -> list[str]:
    return [layer for layer in missing_layers(box.capabilities) if layer in config.required_layers]


def refusal_message(box: Sandbox, config: VerifySection) -> str:
    missing = missing_required(box, config)
    return (
        f"refusing to run model code: the sandbox is missing required containment layers ({', '.join(missing)}; "
        f"verify.required_layers: [{', '.join(config.required_layers)}]).\n"
        + describe_missing(box.capabilities, missing)
        + f"\nOr remove {', '.join(missing)} from verify.required_layers in params.yaml to run without "
        f"{'it' if len(missing) == 1 else 'them'} (a program may then reach what "
        f"{'it guards' if len(missing) == 1 else 'they guard'})."
    )


def ensure_isolation(box: Sandbox, config: VerifySection, log: logging.Logger | None = None) -> None:
    """Raise IsolationError when a layer of verify.required_layers is off; else log each layer that is
    off: a loud warning when one of the default requirement is (the config relaxed it), a plain one
    for uid_drop alone (an ordinary user's run)."""
    if missing_required(box, config):
        raise IsolationError(refusal_message(box, config))
    off = missing_layers(box.capabilities)
    if not off:
        return
    if set(off) & set(DEFAULT_REQUIRED):
        (log or LOG).warning(
            "!!! SANDBOX DEGRADED (not in verify.required_layers): model code runs WITHOUT these layers:\n%s",
            describe_missing(box.capabilities),
        )
    else:
        (log or LOG).warning(
            "sandbox layers off (not in verify.required_layers): %s", describe_missing(box.capabilities)
        )


def log_layers(box: Sandbox, log: logging.Logger | None = None, config: VerifySection | None = None) -> None:
    required = f"; required: {', '.join(config.required_layers) or 'none'}" if config is not None else ""
    (log or LOG).info(
        "sandbox layers: %s (%s%s; CPU limit %g s, wall backstop %g s)",
        ", ".join(f"{k}={'on' if v else 'OFF'}" for k, v in box.layers.items()),
        box.capabilities.get("mode", "?"),
        required,
        box.limits.timeout_s,
        box.limits.wall_limit_s,
    )


def open_sandbox(config: VerifySection, log: logging.Logger | None = None) -> Sandbox:
    """A started pool for `config`, its layers logged; IsolationError (pool closed) when required
    layers are missing."""
    box = Sandbox(workers=config.workers, limits=limits_of(config))
    try:
        log_layers(box, log, config)
        ensure_isolation(box, config, log)
    except BaseException:
        box.close()
        raise
    return box


@contextmanager
def sandbox_for(
    config: VerifySection, sandbox: Sandbox | None = None, log: logging.Logger | None = None
) -> Iterator[Sandbox]:
    """The caller's pool (its isolation checked against `config`), or a new one closed on exit."""
    if sandbox is not None:
        ensure_isolation(sandbox, config, log)
        yield sandbox
        return
    box = open_sandbox(config, log)
    try:
        yield box
    finally:
        box.close()


def guarded(step: Callable[..., T], failure: Callable[[str], T]) -> T:
    """A verifier bug on some odd row becomes that row's `sandbox_error`, never a crashed stage."""
    try:
        return step()
    except Exception as error:  # noqa: BLE001
        return failure(f"verifier error: {error!r}"[:300])
