"""Fake machines for doctor's tests: real virtualenvs, real pip installs, real git checkouts,
a fake Ascend install root and a fake ``npu-smi`` on PATH.

Everything here is our own small fixture data; the only upstream code used is the real
verl/torch files from ``tests.upstream`` (downloaded at test time, never committed).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

from tests import cli

GIT = ["git", "-c", "user.name=doctor-test", "-c", "user.email=doctor@test", "-c", "commit.gpgsign=false"]


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a command, failing the test with its output when it fails."""
    return succeeded(subprocess.run(cmd, capture_output=True, text=True, **kw))


def succeeded(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``result``, or the test fails with its command and output when it failed."""
    if result.returncode != 0:
        raise AssertionError(f"{result.args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], requires: tuple[str, ...] = ()) -> Path:
    """Write a pure-Python wheel of ``name`` ``version`` holding ``files``; return its path."""
    stem = name.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    members = dict(files)
    members[f"{info}/METADATA"] = metadata.encode()
    members[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: doctor-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in members.items():
        writer.writerow([path, _record_hash(data), len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    members[f"{info}/RECORD"] = record.getvalue().encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in members.items():
            zf.writestr(path, data)
    return wheel


def make_venv(path: Path, python: Path | str = sys.executable) -> Path:
    """A fresh virtualenv without pip (pip runs from outside with --python); return its interpreter."""
    run([str(python), "-m", "venv", "--without-pip", str(path)])
    return path / "bin" / "python"


def pip_install(python: Path, *args: str) -> None:
    """``pip install`` into the interpreter ``python``, offline-capable, without touching ours."""
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", *args])


def site_packages(python: Path) -> Path:
    """The purelib folder of ``python``."""
    out = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout
    return Path(out.strip())


def git_project(path: Path, name: str, files: dict[str, str], requires: tuple[str, ...] = (), version="0.1.0") -> str:
    """A git checkout of a flit-built project ``name`` holding ``files``; return its HEAD commit."""
    module = name.replace("-", "_").lower()
    deps = ", ".join(f'"{r}"' for r in requires)
    pyproject = (
        '[build-system]\nrequires = ["flit_core>=3.4"]\nbuild-backend = "flit_core.buildapi"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndescription = "doctor test fixture"\n'
        f'dependencies = [{deps}]\n\n[tool.flit.module]\nname = "{module}"\n'
    )
    files = {"pyproject.toml": pyproject, f"{module}/__init__.py": "", **files}
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    run(["git", "init", "-q", str(path)])
    run([*GIT, "-C", str(path), "add", "-A"])
    run([*GIT, "-C", str(path), "commit", "-qm", "fixture"])
    return run(["git", "-C", str(path), "rev-parse", "HEAD"]).stdout.strip()


def write_executable(path: Path, text: str) -> Path:
    """A shell script at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def npu_smi_table(npus: list[tuple[str, str, int, int]]) -> str:
    """``npu-smi info`` output in the real boxed format: (name, health, HBM used MB, HBM total MB) per NPU."""
    rule = "+---------------------------+---------------+----------------------------------------------------+"
    lines = [
        "+------------------------------------------------------------------------------------------------+",
        "| npu-smi 25.2.0                   Version: 25.2.0                                               |",
        rule,
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
        rule.replace("-", "="),
    ]
    for i, (name, health, used, total) in enumerate(npus):
        lines.append(f"| {i:<5} {name:<19} | {health:<13} | {78.2:<11} {40:<17} {'0    / 0':<15}|")
        bus = f"0000:{0x0E + i:02X}:00.0"
        lines.append(f"| {0:<25} | {bus:<13} | {0:<11} {'0    / 0':<17} {f'{used} / {total}':<15}|")
        lines.append(rule.replace("-", "="))
    lines += [
        "+---------------------------+---------------+----------------------------------------------------+",
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
        "+===========================+===============+====================================================+",
        "| No running processes found in NPU 0                                                            |",
        "+===========================+===============+====================================================+",
    ]
    return "\n".join(lines) + "\n"


def fake_ascend(home: Path, cann="8.3.RC1", driver="25.2.0", npus=None, layout="ascend-toolkit") -> dict[str, str]:
    """A fake Ascend install root and ``npu-smi``; return the environment set_env.sh would give."""
    (home / "driver").mkdir(parents=True, exist_ok=True)
    (home / "driver" / "version.info").write_text(f"Version={driver}\nascendhal_version=7.35.23\n")
    toolkit = home / "ascend-toolkit" / "latest" if layout == "ascend-toolkit" else home / f"cann-{cann}"
    (toolkit / "aarch64-linux").mkdir(parents=True, exist_ok=True)
    (toolkit / "lib64").mkdir(exist_ok=True)
    info = f"package_name=Ascend-cann-toolkit\nversion={cann}\ninnerversion=V100R001C23SPC001B230\narch=aarch64\n"
    (toolkit / "aarch64-linux" / "ascend_toolkit_install.info").write_text(info)
    (toolkit.parent / "set_env.sh").write_text(f"export ASCEND_TOOLKIT_HOME={toolkit}\n")
    npus = npus if npus is not None else [("910B4-1", "OK", 3200, 65536)] * 8
    table = home / "npu-smi.out"
    table.write_text(npu_smi_table(npus))
    write_executable(home / "driver" / "tools" / "npu-smi", f'#!/bin/sh\n[ "$1" = info ] && cat "{table}"\n')
    return {
        "PATH": f"{home / 'driver' / 'tools'}{os.pathsep}{os.environ.get('PATH', '')}",
        "LD_LIBRARY_PATH": f"{toolkit / 'lib64'}:{home / 'driver' / 'lib64'}",
        "ASCEND_TOOLKIT_HOME": str(toolkit),
        "ASCEND_HOME_PATH": str(toolkit),
    }


def doctor(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m ascendfix doctor ARGS`` from this checkout, in ``env`` (default: ours; PATH ours if it has none)."""
    environ = None if env is None else {"PATH": os.environ.get("PATH", ""), **env}
    return cli.run("doctor", *args, env=environ, clean_env=env is not None, cwd=cwd or cli.REPO, timeout=120)
