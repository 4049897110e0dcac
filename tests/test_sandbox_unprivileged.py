"""The sandbox as an ordinary user, tested from a root test run: the test creates a system user and
runs the hostile suite (tests/hostile_cases.py) as that user, through the verifier's pool under the
default `verify.required_layers` (nothing relaxed), and the verify stage end to end.

    .venv/bin/python -m pytest tests/test_sandbox_unprivileged.py -q

Expected where unprivileged user namespaces are allowed: every layer but uid_drop comes up (mode
"user_namespace"), the default requirement is met, every hostile case gets the verdict it gets as
root with the same interpreter, and the stage refuses (exit 3) once the file-system jail and the
network namespace are left off. Where user namespaces are not allowed, the default refuses the run
(test_refused_without_user_namespaces). Skips, with the reason, when not root or when no useradd,
runuser or Python installation usable by another user is found.

The user runs copies of populora/, stages/ and the hostile cases in a temporary folder it owns, with
an interpreter it may execute: this one if it can (a venv whose base lies in /root cannot), else the
system Python of the same version with this environment's site-packages on PYTHONPATH. The root
reference run uses the same interpreter and folder, so interpreter paths (which the jail binds) are
the same in both.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile_cases import HOSTILE_CASES

from populora.sandbox import LAYERS, SKIP_ENV

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LAYERS = ("fs_jail", "ipc_namespace", "mount_namespace", "net_namespace", "seccomp")
# outcomes that race by design (a 10 us interval timer against the harness): any expected one will do
RACY = {"alarm_storm_in_harness"}
TOOLS = ("useradd", "userdel", "runuser")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="creating a user and switching to it needs root"),
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in TOOLS), reason=f"needs {', '.join(TOOLS)} (Debian: passwd, util-linux)"
    ),
]

PROBE = textwrap.dedent("""\
    import json, os, sys
    from hostile_cases import HOSTILE_CASES, outcome
    from populora.config import VerifySection
    from populora.sandbox import Call, Job
    from populora.verifier import IsolationError, isolation_report, open_sandbox

    # short limits (CPU time: the same verdicts however busy the machine); required_layers: the default
    config = VerifySection(timeout_s=0.5, wall_timeout_s=1.5, memory_mb=256, max_output_chars=10_000)
    try:
        box = open_sandbox(config)  # the default required_layers
    except IsolationError as error:
        print(json.dumps({"refused": str(error)}))
        raise SystemExit(3)


    with box:
        futures = {c.name: box.submit(Job(c.program, (Call(f"f({c.input})"),))) for c in HOSTILE_CASES}
        ids = box.run(Job("import os\\ndef f(a):\\n    return os.getuid(), os.getgid()", (Call("f(0)"),)))
        print(json.dumps({"capabilities": box.capabilities, "report": isolation_report(box, config),
                          "child_ids": ids.calls[0].repr, "ids": [os.getuid(), os.getgid()],
                          "outcomes": {n: outcome(f.result()) for n, f in futures.items()},
                          "details": {n: f.result().detail for n, f in futures.items()}}))
    """)


def as_user(user: str | None, command: list[str], env: dict) -> list[str]:
    """`command` as `user` (runuser; None: as this root process), with exactly `env`."""
    prefix = ["runuser", "-u", user, "--"] if user else []
    return [*prefix, "env", "-i", *(f"{k}={v}" for k, v in env.items()), *command]


def run_as(user: str | None, command: list[str], env: dict, cwd: Path, timeout: float = 180):
    return subprocess.run(as_user(user, command, env), cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def user():
    """A system user of its own (created here, removed at the end)."""
    name = f"populora-sbx-{os.getpid() % 100_000}"
    created = subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "--user-group",
            name,
        ],
        capture_output=True,
        text=True,
    )
    if created.returncode != 0:
        pytest.skip(f"useradd failed: {created.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def setup(user):
    """(folder, python, env): the user's copy of the code and an interpreter it can run."""
    entry = pwd.getpwnam(user)
    folder = Path(tempfile.mkdtemp(prefix="populora-unpriv-"))
    try:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(REPO / "populora", folder / "populora", ignore=ignore)
        shutil.copytree(REPO / "stages", folder / "stages", ignore=ignore)
        shutil.copy(REPO / "tests" / "hostile_cases.py", folder / "hostile_cases.py")
        (folder / "probe.py").write_text(PROBE)
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        os.chmod(folder, 0o700)
        python, env = find_python(user, folder)
        yield folder, python, env
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def find_python(user: str, folder: Path) -> tuple[str, dict]:
    """This interpreter if `user` can run it, else a system one of the same version with this
    environment's site-packages (which `user` must be able to read) on PYTHONPATH."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    base = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    tried = []
    for python, extra in (
        (sys.executable, []),
        (shutil.which(f"python{version}") or "", site),
        (f"/usr/bin/python{version}", site),
    ):
        if not python or python in tried:
            continue
        tried.append(python)
        env = {**base, "PYTHONPATH": os.pathsep.join([str(folder), *extra])}
        check = run_as(
            user,
            [python, "-c", "import sys, pydantic, yaml, tqdm; print('%d.%d' % sys.version_info[:2])"],
            env,
            folder,
            timeout=60,
        )
        if check.returncode == 0 and check.stdout.strip() == version:
            return python, env
    pytest.skip(
        f"no Python {version} that {user} can run with this environment's packages (tried {tried}; a venv "
        "whose base interpreter lies under /root is out of an ordinary user's reach)"
    )


def userns_allowed(user: str, folder: Path) -> bool:
    probe = run_as(
        user,
        ["unshare", "--user", "--map-root-user", "--net", "--mount", "true"],
        {"PATH": "/usr/bin:/bin"},
        folder,
        timeout=30,
    )
    return probe.returncode == 0


@pytest.fixture(scope="module")
def runs(user, setup):
    """The probe as the user and, for reference, as root (same interpreter, folder, environment)."""
    folder, python, env = setup
    procs = {
        ("user" if who else "root"): subprocess.Popen(
            as_user(who, [python, "probe.py"], env),
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in (user, None)
    }  # side by side: most of the suite's time is waiting for limits
    outputs = {key: proc.communicate(timeout=180) for key, proc in procs.items()}
    return {key: (procs[key].returncode, *outputs[key]) for key in procs}


def parse(run) -> dict:
    code, stdout, stderr = run
    assert code in (0, 3), stderr
    return json.loads(stdout.splitlines()[-1])


def test_ordinary_user_gets_every_layer_but_uid_drop(user, setup, runs):
    if not userns_allowed(user, setup[0]):
        pytest.skip("unprivileged user namespaces are not allowed here (see test_refused_without_user_namespaces)")
    report = parse(runs["user"])
    assert "refused" not in report, report["refused"]
    assert report["report"] == {
        "layers": {**dict.fromkeys(LAYERS, True), "uid_drop": False},
        "required": list(DEFAULT_LAYERS),
        "mode": "user_namespace",
    }, report["capabilities"]
    assert report["capabilities"]["root"] is False and report["capabilities"]["user_namespace"] is True
    # uid_drop for an ordinary user: the child keeps the user's own uid and gid (not root, even inside)
    assert report["child_ids"] == repr(tuple(report["ids"])) and report["ids"][0] != 0
    print(f"\nas {user}: layers {report['report']['layers']}")


def test_hostile_suite_as_ordinary_user_matches_root(user, setup, runs):
    if not userns_allowed(user, setup[0]):
        pytest.skip("unprivileged user namespaces are not allowed here (see test_refused_without_user_namespaces)")
    as_user, as_root = parse(runs["user"]), parse(runs["root"])
    assert as_root["report"]["layers"] == dict.fromkeys(LAYERS, True) and as_root["report"]["mode"] == "root"
    problems = []
    for case in HOSTILE_CASES:
        got, reference = as_user["outcomes"][case.name], as_root["outcomes"][case.name]
        if got not in case.expect or reference not in case.expect:
            problems.append(f"{case.name}: user {got!r}, root {reference!r}, expected {sorted(case.expect)}")
        elif got != reference and case.name not in RACY:
            problems.append(f"{case.name}: user {got!r} != root {reference!r} ({as_user['details'][case.name]})")
    assert not problems, "\n".join(problems)
    same = sum(as_user["outcomes"][c.name] == as_root["outcomes"][c.name] for c in HOSTILE_CASES)
    print(f"\n{same}/{len(HOSTILE_CASES)} hostile cases: the same verdict as user and as root")


def test_refused_without_user_namespaces(user, setup, runs):
    if userns_allowed(user, setup[0]):
        pytest.skip("unprivileged user namespaces are allowed here (the refusal is tested with the layers left off)")
    code, stdout, stderr = runs["user"]
    assert code == 3 and "refusing to run model code" in json.loads(stdout)["refused"], stderr


def test_verify_stage_as_ordinary_user(user, setup):
    """The stage under its defaults (no --params: verify.required_layers' default) as the user:
    it runs; without the jail and the network namespace it refuses with exit code 3."""
    folder, python, env = setup
    if not userns_allowed(user, folder):
        pytest.skip("unprivileged user namespaces are not allowed here")
    from tests.seed_tasks import seed_rows

    proposals = folder / "proposals.jsonl"
    proposals.write_text("".join(json.dumps(row) + "\n" for row in seed_rows()))
    entry = pwd.getpwnam(user)
    os.chown(proposals, entry.pw_uid, entry.pw_gid)
    command = [
        python,
        "-m",
        "stages.verify",
        "--proposals",
        "proposals.jsonl",
        "--out",
        "tasks.jsonl",
        "--isolation",
        "isolation.json",
    ]
    result = run_as(user, command, env, folder)
    assert result.returncode == 0, result.stderr
    assert (
        "sandbox layers: fs_jail=on, ipc_namespace=on, mount_namespace=on, net_namespace=on, seccomp=on, "
        "uid_drop=OFF (user_namespace; required: fs_jail, ipc_namespace" in result.stderr
    ), result.stderr
    report = json.loads((folder / "isolation.json").read_text())
    assert report["required"] == list(DEFAULT_LAYERS) and report["mode"] == "user_namespace"
    rows = [json.loads(line) for line in (folder / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == len(seed_rows()) and all(row["valid"] for row in rows)
    refused = run_as(user, command, {**env, SKIP_ENV: "fs_jail,net_namespace"}, folder)
    assert refused.returncode == 3, refused.stderr
    assert "missing required containment layers (fs_jail, net_namespace;" in refused.stderr, refused.stderr
