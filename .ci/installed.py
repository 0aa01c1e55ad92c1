#!/usr/bin/env python3
"""CI stage "as installed": streamtrain as users deploy it, never the checkout.

1. The image's steps, as deploy/Dockerfile writes them: the files its first stage COPYs (less
   what .dockerignore leaves out) are copied to a scratch context, `python -m build` makes the
   sdist and the wheel there, and the second stage's RUN of deploy/install.sh installs that wheel
   with its serve extra into a clean virtual environment (no system site-packages) and compiles
   the kernels into numba's cache. The venv lives at SCRATCH/root/opt/streamtrain: the systemd
   units' path, under a scratch root.
2. From another working directory, with no PYTHONPATH: import every module
   (pkgutil.walk_packages), `streamtrain --version`, validate every shipped example by name,
   run the demo for 5000 examples, a graph example and the plug-in example, train with serving
   on and get one prediction (and the version from /v1/model and /metrics).
3. The units: installed under the scratch root with a job copied out by `streamtrain examples`,
   `systemd-analyze verify --root` where systemd-analyze exists, and streamtrain.service's own
   ExecStart run for a few thousand examples.

Usage: python .ci/installed.py [--keep DIR]   (exit 0, or 1 with the step that failed)
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
BUILD_CMD = "python -m build --outdir dist ."
BUDGET_S = 180
STARTED = time.monotonic()


class Failed(Exception):
    pass


def say(msg: str) -> None:
    print(f"[installed {time.monotonic() - STARTED:6.1f}s] {msg}", flush=True)


def check(ok: bool, msg: str) -> None:
    if not ok:
        raise Failed(msg)


def sh(argv, *, env=None, cwd=None, timeout=300, ok=True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if ok and done.returncode != 0:
        raise Failed(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


# ---- 1. the image's steps -----------------------------------------------------------------------
def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (INSTRUCTION, arguments) with continuations joined."""
    stages, lines = [], re.sub(r"\\\n", " ", text).splitlines()
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
    return stages


def image_plan(text: str) -> tuple[list[tuple[list[str], str]], list[tuple[str, str]], str]:
    """(the wheel stage's COPYs as (sources, destination under its WORKDIR), the final stage's
    COPYs of files of the context, the final stage's RUN of install.sh). Raises when the
    Dockerfile no longer has the shape this script reproduces, so the two never drift apart."""
    stages = dockerfile_stages(text)
    check(len(stages) == 2, f"deploy/Dockerfile: expected 2 stages (wheel, image), found {len(stages)}")
    build, image = stages
    check(("WORKDIR", "/src") in build, "deploy/Dockerfile: the wheel stage must work in /src")
    copies = [(args.split()[:-1], args.split()[-1]) for word, args in build if word == "COPY"]
    runs = [args for word, args in build if word == "RUN"]
    check(len(runs) == 1 and runs[0].endswith("&& " + BUILD_CMD),
          f"deploy/Dockerfile: the wheel stage's RUN must end with '&& {BUILD_CMD}', got {runs}")
    own = [tuple(args.split()) for word, args in image if word == "COPY" and not args.startswith("--")]
    installs = [args for word, args in image if word == "RUN" and "install.sh" in args]
    check(len(installs) == 1, f"deploy/Dockerfile: expected one RUN of install.sh, got {installs}")
    return copies, own, installs[0]


def ignored(patterns: list[str]):
    def ignore(folder, names):
        rel = Path(folder).relative_to(ROOT)
        return {n for n in names for p in patterns
                if fnmatch.fnmatch(str(rel / n), p) or fnmatch.fnmatch(n, p.removeprefix("**/"))}
    return ignore


def copy_context(copies, ctx: Path) -> None:
    """Docker's COPY: a folder's contents go to the destination; files go into a destination
    that ends with '/', else to it."""
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    for sources, dest in copies:
        for src in sources:
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, ctx / dest, ignore=ignored(patterns))
            else:
                target = ctx / dest / Path(src).name if dest.endswith("/") else ctx / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / src, target)


def rooted(command: str, root: Path) -> str:
    """The RUN command with every absolute path moved under the scratch root."""
    return re.sub(r"(?<![\w.])/(?=[\w])", str(root) + "/", command)


def build_and_install(scratch: Path) -> tuple[Path, Path, dict]:
    root, ctx = scratch / "root", scratch / "context"
    copies, own, install = image_plan(DOCKERFILE.read_text())
    copy_context(copies, ctx)
    say(f"context: {sorted(p.name for p in ctx.iterdir())} (the wheel stage's COPYs)")
    sh([sys.executable, *BUILD_CMD.split()[1:]], cwd=ctx, timeout=300)
    dist = sorted(p.name for p in (ctx / "dist").iterdir())
    say(f"python -m build: {dist}")
    wheel, = (ctx / "dist").glob("streamtrain-*-py3-none-any.whl")
    venv = root / "opt" / "streamtrain"
    sh([sys.executable, "-m", "venv", str(venv)])
    check("include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text(), "venv sees system site-packages")
    for src, dest in own:                          # COPY deploy/install.sh /usr/local/share/...
        (root / dest.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / src, root / dest.lstrip("/"))
    (root / "tmp" / "wheels").mkdir(parents=True)
    shutil.copy2(wheel, root / "tmp" / "wheels" / wheel.name)      # COPY --from=wheel /src/dist/*.whl /tmp/wheels/
    env = clean_env(venv)
    say(f"RUN {install}  (under {root}, python of {venv})")
    sh(["sh", "-c", rooted(install, root)], env=env, cwd=scratch, timeout=600)
    return venv, wheel, env


def clean_env(venv: Path) -> dict:
    """The environment a user's shell would have: the venv first on PATH, nothing of the CI's
    Python, numba or streamtrain settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "STREAMTRAIN_", "NUMBA_", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    return env


# ---- 2. the installed daemon, from another working directory -------------------------------------
IMPORT_ALL = """
import importlib, pkgutil, sys, streamtrain
def fail(name):
    raise SystemExit(f"cannot import {name}: {sys.exc_info()[1]!r}")
names = [m.name for m in pkgutil.walk_packages(streamtrain.__path__, "streamtrain.", onerror=fail)]
for name in names:
    importlib.import_module(name)
print(streamtrain.__file__)
print(" ".join(names))
"""


def import_everything(venv: Path, env: dict, work: Path, wheel: Path) -> None:
    import zipfile
    out = sh([str(venv / "bin" / "python"), "-I", "-c", IMPORT_ALL], env=env, cwd=work).stdout.splitlines()
    check(Path(out[0]).is_relative_to(venv), f"imported {out[0]}, not the venv's")
    modules = {n[:-3].replace("/", ".").removesuffix(".__init__") for n in zipfile.ZipFile(wheel).namelist()
               if n.endswith(".py")} - {"streamtrain"}
    check(set(out[1].split()) == modules, f"walk_packages found {sorted(set(out[1].split()) ^ modules)} "
                                          "beside/instead of the wheel's modules")
    say(f"imported every module ({len(modules)}) of {Path(out[0]).parent}")


def version_and_examples(st: str, env: dict, work: Path, want: str) -> list[str]:
    out = sh([st, "--version"], env=env, cwd=work).stdout.strip()
    check(out.startswith(f"streamtrain {want} (Python "), f"streamtrain --version said {out!r}")
    say(f"streamtrain --version: {out}")
    names = [line.split()[0] for line in sh([st, "examples"], env=env, cwd=work).stdout.splitlines()]
    check(names == sorted(p.stem for p in (ROOT / "examples").glob("*.json")),
          f"streamtrain examples lists {names}, the repository has {sorted((ROOT / 'examples').glob('*.json'))}")
    for name in names:
        sh([st, "validate", name], env=env, cwd=work, timeout=120)
    say(f"validated every shipped example by name: {' '.join(names)}")
    return names


def runs(st: str, env: dict, work: Path) -> None:
    """The demo, a graph model and the plug-in reader, each to its --summary."""
    for name, n, extra, score, floor in (("synthetic", 5000, [], "auc", 0.6),
                                         ("graphsage", 3000, [], "accuracy", 0.35),     # 4 communities
                                         ("plugin_reader", 2000, ["--set", "reader.args.n=2000"], "auc", 0.5)):
        summary = work / f"{name}.json"
        sh([st, "run", name, "--max-examples", str(n), "--summary", str(summary), "--set", "metrics.port=0",
            "--set", f"checkpoint.dir={work / ('ckpt-' + name)}", *extra], env=env, cwd=work, timeout=300)
        s = json.loads(summary.read_text())
        check(s["examples"] == n and (s[score] or 0) > floor, f"streamtrain run {name}: {s}")
        say(f"streamtrain run {name}: {s['examples']} examples, {score} {s[score]:.3f}, "
            f"{s['examples_per_s']:.0f} ex/s")


def wait_for(what, describe: str, timeout: float = 60.0, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise Failed(f"the daemon exited ({proc.returncode}) while waiting for {describe}")
        time.sleep(0.1)
    raise Failed(f"no {describe} within {timeout:.0f} s")


def http_json(url: str, body: dict | None = None):
    """The JSON answer of a 200, else None (not up yet, not trained yet: 503)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):
        return None


SERVING = r"serving predictions on (http://[\d.]+:\d+)/"
TRAINER_METRICS = r"metrics, /healthz and /readyz on (http://[\d.]+:\d+)/"


def serving(st: str, env: dict, work: Path, want: str) -> None:
    """``streamtrain run`` with serving on (its own parameters while it trains), then
    ``streamtrain serve --restore`` (the checkpoint the demo run wrote): each answers a
    prediction, says the version in /v1/model and /metrics, and exits 0 on SIGTERM."""
    for what, argv, metrics in (
            ("while training", ["run", "synthetic", "--set", "serve.enabled=true", "--set", "metrics.port=0",
                                "--set", f"checkpoint.dir={work / 'ckpt-serve'}"], TRAINER_METRICS),
            ("from the demo's checkpoint", ["serve", "synthetic", "--restore", str(work / "ckpt-synthetic")],
             SERVING)):
        log = work / f"serve-{argv[0]}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([st, *argv, "--set", "serve.port=0"], stdout=out, stderr=subprocess.STDOUT,
                                    env=env, cwd=work)
        try:
            got = one_prediction(proc, log, want, metrics)
            proc.send_signal(signal.SIGTERM)
            check(proc.wait(timeout=60) == 0, f"streamtrain {argv[0]} exited {proc.returncode} on SIGTERM:\n"
                                              f"{log.read_text()[-3000:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        say(f"streamtrain {argv[0]} served a prediction {what} ({got['predictions'][0]:.4f}, step {got['step']}); "
            f"/v1/model and streamtrain_build_info say {want}; SIGTERM: exit 0")


def one_prediction(proc, log: Path, want: str, metrics_pattern: str) -> dict:
    def address(pattern):
        return lambda: (m.group(1) if (m := re.search(pattern, log.read_text())) else None)
    serve = wait_for(address(SERVING), "serving address", proc=proc)
    metrics = wait_for(address(metrics_pattern), "metrics address", proc=proc)
    model = wait_for(lambda: http_json(serve + "/v1/model"), "GET /v1/model answer", proc=proc)
    check(model["version"] == want, f"/v1/model says version {model.get('version')!r}")
    fields = model["fields"]
    record = {fields["sparse"][0]: "7", fields["dense"][0]: 0.5}
    got = wait_for(lambda: http_json(serve + "/v1/predict", {"records": [record]}), "prediction", proc=proc)
    check(len(got["predictions"]) == 1 and 0 < got["predictions"][0] < 1, f"POST /v1/predict: {got}")
    with urllib.request.urlopen(metrics + "/metrics", timeout=10) as answer:
        exposition = answer.read().decode()
    check(re.search(r'streamtrain_build_info\{[^}]*version="%s"[^}]*\} 1\.0' % re.escape(want), exposition),
          "no streamtrain_build_info with the version on /metrics")
    return got


# ---- 3. the systemd units, installed under the scratch root --------------------------------------
def unit_service(path: Path) -> dict:
    """The [Service] keys of a unit (continuation lines joined; the last of a repeated key)."""
    section, keys = None, {}
    for line in re.sub(r"\\\n", " ", path.read_text()).splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            keys[key.strip()] = value.strip()
    return keys


def system_tree(root: Path, system: Path) -> None:
    """What a machine has that the units rely on, from this one: systemd's own units (targets the
    default dependencies name) and the programs the units run besides streamtrain (/bin/kill)."""
    host_units = Path("/usr/lib/systemd/system")
    if host_units.is_dir():
        shutil.copytree(host_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    for unit in system.glob("*.service"):
        for key, value in unit_service(unit).items():
            program = value.lstrip("-@:+!").split()[0] if key.startswith("Exec") else ""
            if program.startswith("/") and not (root / program.lstrip("/")).exists() and Path(program).exists():
                (root / program.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(program, root / program.lstrip("/"))


def units(st: str, root: Path, env: dict) -> None:
    import shlex
    system, etc = root / "etc" / "systemd" / "system", root / "etc" / "streamtrain"
    system.mkdir(parents=True)
    etc.mkdir(parents=True)
    for unit in sorted((ROOT / "deploy" / "systemd").glob("*.service")):
        shutil.copy2(unit, system / unit.name)
    shutil.copy2(ROOT / "deploy" / "systemd" / "streamtrain.env", etc / "streamtrain.env")
    sh([st, "examples", "synthetic", "--copy", str(etc / "job.json")], env=env)
    system_tree(root, system)
    if shutil.which("systemd-analyze"):
        for unit in sorted(system.glob("*.service")):
            done = sh(["systemd-analyze", "verify", f"--root={root}", "--man=no", str(unit)], ok=False)
            said = (done.stdout + done.stderr).strip()
            check(done.returncode == 0 and not said, f"systemd-analyze verify {unit.name}: {said}")
        say(f"systemd-analyze verify --root: {', '.join(p.name for p in sorted(system.glob('*.service')))} clean")
    else:
        say("systemd-analyze not found: the units are only parsed (tests/test_daemon_packaging.py)")
    service = unit_service(system / "streamtrain.service")
    unit_env = dict(env)
    for line in (etc / "streamtrain.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            unit_env[key] = value
    state = root / "var" / "lib" / "streamtrain"
    state.mkdir(parents=True)
    argv = shlex.split(rooted(service["ExecStart"], root)) + ["--max-examples", "3000", "--set", "metrics.port=0"]
    sh(argv, env=unit_env, cwd=state, timeout=300)
    written = sorted((state / "checkpoints").iterdir())
    check(len(written) >= 1, f"streamtrain.service's ExecStart wrote no checkpoint under {state / 'checkpoints'}")
    say(f"streamtrain.service's ExecStart (under the root): 3000 examples, checkpoint {written[-1].name}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (its path is printed)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="streamtrain-installed-"))
    steps = 0
    try:
        venv, wheel, env = build_and_install(scratch)
        st, want, work = str(venv / "bin" / "streamtrain"), wheel.name.split("-")[1], scratch / "work"
        work.mkdir()
        for step in (lambda: import_everything(venv, env, work, wheel),
                     lambda: version_and_examples(st, env, work, want),
                     lambda: runs(st, env, work), lambda: serving(st, env, work, want),
                     lambda: units(st, scratch / "root", env)):
            step()
            steps += 1
    except (Failed, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as err:
        print(f"installed: FAILED after {steps} checks: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        if args.keep:
            say(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - STARTED
    say(f"as installed: every check passed in {elapsed:.0f} s"
        + (f" (WARNING: over the {BUDGET_S} s budget)" if elapsed > BUDGET_S else ""))
    print(f"installed: {steps + 1} passed, 0 failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
