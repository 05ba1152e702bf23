"""The Code Mode sandbox, attacked as a hostile program would, and used as a legitimate one.

Every attack runs under the default isolation and must end as a clean error inside the program
or a clean failed result, with the host and later runs unharmed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib.util
import json
import os
import py_compile
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import msgspec
import pytest
from conftest import WAIT, Logs

import dsh_tools
from dsh_tools import CodeSandbox, ToolsConfig, ToolSystem
from dsh_tools.codebridge import (
    BindingNamespace,
    CodeRunRequest,
    CodeRunResult,
    CodeRuntimeConfig,
    SubprocessCodeRuntime,
)


def run(runtime: SubprocessCodeRuntime, program: str) -> CodeRunResult:
    return asyncio.run(runtime.run(CodeRunRequest(program, [BindingNamespace("tools", {})])))


def error_of(runtime: SubprocessCodeRuntime, program: str) -> str:
    """The exception the program caught, as ``Type: message``."""
    wrapped = "try:\n" + "".join(f"    {line}\n" for line in program.splitlines())
    wrapped += (
        "except Exception as exc:\n    return f'{type(exc).__name__}: {exc}'\nreturn 'allowed'"
    )
    result = run(runtime, wrapped)
    assert result.error is None, result.error
    return str(result.value)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SubprocessCodeRuntime]:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=3000, max_wall_ms=20_000))
    yield runtime
    runtime.close()


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


# --- the legitimate path -------------------------------------------------------------------


def test_the_standard_library_imports_and_runs(sandbox: SubprocessCodeRuntime) -> None:
    program = """
import json, re, asyncio, decimal, dataclasses
@dataclasses.dataclass
class Point:
    x: int
await asyncio.sleep(0)
return [json.dumps({"a": 1}), re.sub("b", "c", "abc"), str(decimal.Decimal("1.10") * 2),
        Point(3).x]
"""
    assert run(sandbox, program).value == ['{"a": 1}', "acc", "2.20", 3]


def test_the_scratch_directory_is_the_working_directory_and_fresh_each_run(
    sandbox: SubprocessCodeRuntime,
) -> None:
    program = """
import os, tempfile
before = sorted(os.listdir("."))
with open("notes.txt", "w") as handle:
    handle.write("kept for this run only")
with tempfile.NamedTemporaryFile(dir=".") as handle:
    handle.write(b"x")
return [before, open("notes.txt").read()]
"""
    first = run(sandbox, program).value
    second = run(sandbox, program).value
    assert first == second == [[], "kept for this run only"]


@pytest.mark.parametrize("grant", [str, Path], ids=["str", "pathlib"])
def test_granted_paths_are_readable_and_writable(
    tmp_path: Path, grant: Callable[[Path], str | Path]
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "in" / "data.txt").write_text("granted")
    grants = CodeSandbox(read=[grant(tmp_path / "in")], write=[grant(tmp_path / "out")])
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=grants))
    try:
        program = f"""
text = open({str(tmp_path / "in" / "data.txt")!r}).read()
open({str(tmp_path / "out" / "copy.txt")!r}, "w").write(text)
try:
    open({str(tmp_path / "in" / "new.txt")!r}, "w")
except OSError:  # PermissionError, or EROFS from the read-only view of the host
    return "read-only stays read-only"
"""
        assert run(runtime, program).value == "read-only stays read-only"
    finally:
        runtime.close()
    assert (tmp_path / "out" / "copy.txt").read_text() == "granted"
    assert not (tmp_path / "in" / "new.txt").exists()


def test_a_grant_beneath_a_write_grant_is_refused_so_a_run_cannot_redirect_it(
    tmp_path: Path,
) -> None:
    # A run may replace anything beneath its write grant with a symbolic link to anywhere; a
    # grant there would follow it at the next template's start and grant the target instead.
    workspace, secrets = tmp_path / "workspace", tmp_path / "secrets"
    workspace.mkdir()
    secrets.mkdir()
    (secrets / "key").write_text("never granted")
    (workspace / "config.json").write_text("{}")
    config = str(workspace / "config.json")
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(write=[str(workspace)])))
    try:
        key = str(secrets / "key")
        program = f"import os\nos.remove({config!r})\nos.symlink({key!r}, {config!r})"
        assert run(runtime, program).error is None
    finally:
        runtime.close()
    covered = f"{config!r} lies beneath the write grant {str(workspace)!r}, which covers it already"
    with pytest.raises(ValueError, match=rf"^code sandbox: read\[0\] {re.escape(covered)}"):
        CodeSandbox(read=[config], write=[str(workspace)])
    with pytest.raises(ValueError, match=r"^code sandbox: read\[0\] .* lies beneath the write"):
        CodeSandbox(read=[config], write=[str(workspace) + "/"])
    with pytest.raises(ValueError, match=r"^code sandbox: write\[1\] "):
        CodeSandbox(write=[str(workspace), str(workspace / "sub" / ".." / "out")])
    # Beside it, above it or the same path: nothing a run may replace.
    CodeSandbox(read=[str(tmp_path), str(workspace), str(secrets)], write=[str(workspace)])
    CodeSandbox(write=[str(workspace), str(tmp_path / "workspace2")])


def test_a_grant_reached_through_a_link_into_a_write_grant_fails_every_run(
    tmp_path: Path,
) -> None:
    # The harness's own symbolic link leads a read grant into a write grant: a run could replace
    # what it leads to with a link to anywhere, which the next template would then grant.
    workspace, secrets = tmp_path / "workspace", tmp_path / "secrets"
    workspace.mkdir()
    secrets.mkdir()
    (secrets / "key").write_text("never granted")
    (workspace / "config.json").write_text("{}")
    (tmp_path / "config.json").symlink_to(workspace / "config.json")
    config, key = str(tmp_path / "config.json"), str(secrets / "key")
    grants = CodeSandbox(read=[config], write=[str(workspace)])
    planted = str(workspace / "config.json")
    programs = [
        f"import os\nos.remove({planted!r})\nos.symlink({key!r}, {planted!r})\nreturn 'planted'",
        f"return open({config!r}).read()",
    ]
    for program in programs:
        runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=grants))
        try:
            result = run(runtime, program)
        finally:
            runtime.close()
        assert result.error is not None, result.value
        assert result.error.kind == "worker-exit"
        assert f"the granted path {config!r} leads beneath the write grant" in result.error.message
    assert (workspace / "config.json").read_text() == "{}"


def test_a_grant_whose_links_pass_through_a_write_grant_and_out_fails_every_run(
    tmp_path: Path,
) -> None:
    # The harness's read grant is a link to a "current" link it keeps in the workspace, which
    # leads out to the data: a run replaces the one in the workspace with a link to a secret,
    # and the next template, following the chain, would grant the secret.
    workspace, data, secrets = tmp_path / "workspace", tmp_path / "data", tmp_path / "secrets"
    for directory in (workspace, data, secrets):
        directory.mkdir()
    (data / "prices.json").write_text("{}")
    (secrets / "key").write_text("never granted")
    (workspace / "current").symlink_to(data / "prices.json")
    (tmp_path / "prices.json").symlink_to(workspace / "current")
    (tmp_path / "up").symlink_to(workspace / "sub" / ".." / ".." / "data")
    (workspace / "sub").mkdir()
    prices, current, key = (
        str(tmp_path / "prices.json"),
        str(workspace / "current"),
        str(secrets / "key"),
    )
    programs = [
        f"import os\nos.remove({current!r})\nos.symlink({key!r}, {current!r})\nreturn 'planted'",
        f"return open({prices!r}).read()",
    ]
    for granted in (prices, str(tmp_path / "up")):
        grants = CodeSandbox(read=[granted], write=[str(workspace)])
        for program in programs:
            runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=grants))
            try:
                result = run(runtime, program)
            finally:
                runtime.close()
            assert result.error is not None, result.value
            assert result.error.kind == "worker-exit"
            assert f"the granted path {granted!r} leads through the write grant" in (
                result.error.message
            )
    assert os.readlink(current) == str(data / "prices.json")
    # A chain that stays outside the write grant is granted as before.
    (tmp_path / "direct.json").symlink_to(tmp_path / "prices.json.real")
    (tmp_path / "prices.json.real").symlink_to(data / "prices.json")
    grants = CodeSandbox(read=[str(tmp_path / "direct.json")], write=[str(workspace)])
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=grants))
    try:
        assert run(runtime, f"return open({str(tmp_path / 'direct.json')!r}).read()").value == "{}"
    finally:
        runtime.close()


def write_grant_refusal(granted: str, program: str = "return 'granted'") -> str:
    """The message a run of ``program`` fails with under a write grant of ``granted`` (the test
    fails if it ran: the grant alone is the flaw)."""
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(write=[granted])))
    try:
        result = run(runtime, program)
    finally:
        runtime.close()
    assert result.error is not None, f"{granted} was granted for writing: {result.value!r}"
    assert result.error.kind == "worker-exit"
    return result.error.message


def test_a_write_grant_holding_the_code_the_host_runs_fails_every_run() -> None:
    # The Python installation (a virtual environment inside a project directory, say) and this
    # package are what the harness, and every template it starts, run outside the sandbox: a
    # program allowed to change them would run its code as the host the next time.
    marker = os.path.join(sys.prefix, f"dsh-sandbox-marker-{os.getpid()}")
    program = f"open({marker!r}, 'w').write('import os  # runs as the host')\nreturn 'written'"
    try:
        for granted in (sys.prefix, str(Path(dsh_tools.__file__).parent / "codebridge")):
            message = write_grant_refusal(granted, program)
            assert f"the write grant {granted!r} holds code the host runs" in message
            assert not os.path.exists(marker)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(marker)


def test_a_write_grant_holding_the_c_library_the_host_runs_fails_every_run() -> None:
    # The C library and the dynamic loader every python the host starts maps first (often in
    # /usr/lib, outside the Python installation): a run allowed to replace them would run its
    # code as the host the next time the harness, or a template, starts.
    libc = os.path.realpath(_mapped("libc.so"))
    granted = os.path.dirname(libc)
    message = write_grant_refusal(granted)
    assert f"the write grant {granted!r} holds code the host runs" in message


_SEARCH_PATH_HARNESS = """
import asyncio, contextlib, json, sys
with contextlib.suppress(ImportError):
    import tools  # the harness's own package, where it has one
from dsh_tools import CodeRuntimeConfig, CodeSandbox, SubprocessCodeRuntime
from dsh_tools.codebridge import CodeRunRequest
granted, program = sys.argv[1], sys.argv[2]
runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(write=[granted])))
try:
    result = asyncio.run(runtime.run(CodeRunRequest(program, [])))
finally:
    runtime.close()
print(json.dumps([result.error.kind, result.error.message] if result.error else result.value))
"""


def harness_outcome(
    harness: Path,
    granted: Path,
    program: str = "return 'ran'",
    *,
    env: dict[str, str],
    cwd: Path | None = None,
) -> Any:
    """What a run of ``program`` by the ``_SEARCH_PATH_HARNESS`` script ``harness``, started
    in ``env`` (and ``cwd``), with a write grant of ``granted``, gave: its value, or the kind
    and message of its failure."""
    outcome = subprocess.run(
        [sys.executable, str(harness), str(granted), program],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    assert outcome.returncode == 0, outcome.stderr
    return json.loads(outcome.stdout)


def refused_grant(
    harness: Path,
    granted: Path,
    program: str = "return 'ran'",
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    what: str = "",
) -> str:
    """The message every run of ``harness`` fails with under a write grant of ``granted``
    (the test fails if the run went ahead, naming ``what`` it could then have done)."""
    seen = harness_outcome(harness, granted, program, env=env, cwd=cwd)
    assert isinstance(seen, list), f"the run went ahead ({seen!r}): {what}"
    kind, message = seen
    assert kind == "worker-exit", message
    return str(message)


@pytest.mark.skipif(shutil.which("git") is None, reason="git shows what its configuration runs")
def test_a_write_grant_holding_where_the_hosts_user_looks_for_code_fails_every_run(
    tmp_path: Path,
) -> None:
    # The next Python of the harness's user (outside a virtual environment) runs every .pth
    # file of its user site-packages as it starts; the harness imports from its script's
    # directory (its own package there, and a json.py before the standard library's); its
    # tools run commands from its PATH, and git the commands its user's configuration names.
    # Code a run left in any of them would run as the host, outside the sandbox.
    home = tmp_path / "home"
    project = tmp_path / "project"
    commands = tmp_path / "bin"
    configuration = home / ".config"
    for directory in (home, project, commands, configuration):
        directory.mkdir()
    harness = project / "harness.py"
    harness.write_text(_SEARCH_PATH_HARNESS)
    tools = project / "tools"
    tools.mkdir()
    (tools / "__init__.py").write_text("")
    ran = tmp_path / "ran-as-the-host"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = home / ".local" / "lib" / version / "site-packages"
    leaves = {
        home: (site_packages / "planted.pth", f"import os; open({str(ran)!r}, 'w')\n"),
        project: (project / "json.py", f"open({str(ran)!r}, 'w')\n"),
        tools: (tools / "__init__.py", f"open({str(ran)!r}, 'w')\n"),
        commands: (commands / "git", f"#!/bin/sh\ntouch {ran}\n"),
        configuration: (configuration / "git" / "config", f"[core]\n\tfsmonitor = touch {ran}\n"),
    }
    environment = {"HOME": str(home), "PATH": f"{commands}:/usr/bin:/bin"}
    (commands / "tool").write_text("#!/bin/sh\n")  # a command of the PATH, granted by itself
    grants = [
        *leaves.items(),
        (commands / "tool", (commands / "tool", f"#!/bin/sh\ntouch {ran}\n")),
    ]
    for granted, (planted, code) in grants:
        program = f"""
import os
os.makedirs({str(planted.parent)!r}, exist_ok=True)
with open({str(planted)!r}, 'w') as file:
    file.write({code!r})
os.chmod({str(planted)!r}, 0o755)
return 'planted'
"""
        message = refused_grant(
            harness, granted, program, env=environment, what=f"a run wrote {planted}"
        )
        assert f"the write grant {str(granted)!r} holds" in message
        assert "a run could leave code there that the host runs next" in message
        assert not planted.exists() or str(ran) not in planted.read_text()
    # What each grant would have let a run leave does run as the host, the next time the
    # user's Python starts, the harness imports json, or a tool runs git.
    base_python = os.path.join(sys.base_prefix, "bin", "python3")
    subprocess.run(["git", "init", "-q", str(tmp_path / "repository")], check=True)
    for granted, command in (
        (home, [base_python, "-c", "pass"]),
        (project, [base_python, str(project / "imports_json.py")]),
        (tools, [base_python, str(harness), str(tmp_path / "outputs"), "return 1"]),
        (commands, ["sh", "-c", "git status"]),
        (configuration, ["git", "-C", str(tmp_path / "repository"), "status"]),
    ):
        planted, code = leaves[granted]
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(code)
        planted.chmod(0o755)
        (project / "imports_json.py").write_text("import json\n")
        subprocess.run(command, env=environment, cwd=tmp_path, capture_output=True)
        assert ran.exists(), command
        ran.unlink()
        planted.unlink()


_PLANTED_LIBRARY = """#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    close(open(PLANTED, O_WRONLY | O_CREAT, 0644));
}
"""


@pytest.mark.skipif(
    shutil.which("cc") is None or shutil.which("git") is None,
    reason="a compiled library shows what the dynamic loader runs",
)
def test_a_write_grant_holding_where_the_hosts_commands_are_looked_up_fails_every_run(
    tmp_path: Path,
) -> None:
    # The dynamic loader looks for every library of every command the harness starts (git,
    # bash, python) in the directories of its LD_LIBRARY_PATH before the system's, and the
    # shell for every command in those of its PATH; an entry that is empty, ".", or relative
    # ("node_modules/.bin") is looked up from the working directory. A run whose write grant
    # holds one of them could leave a libz.so.1 or a git there, and the harness's next git
    # would run it as the host, outside the sandbox.
    project = tmp_path / "project"  # the harness script's directory, on its sys.path
    workspace = tmp_path / "workspace"  # its working directory, not on its sys.path
    libraries = tmp_path / "libraries"
    for directory in (project, workspace, libraries):
        directory.mkdir()
    harness = project / "harness.py"
    harness.write_text(_SEARCH_PATH_HARNESS)
    ran = tmp_path / "ran-as-the-host"
    library = tmp_path / "planted.c"
    library.write_text(_PLANTED_LIBRARY)
    compiled = tmp_path / "libz.so.1"
    subprocess.run(
        ["cc", "-shared", "-fPIC", f'-DPLANTED="{ran}"', "-o", str(compiled), str(library)],
        check=True,
    )
    system = "/usr/bin:/bin"
    outputs = workspace / "outputs"
    outputs.mkdir()
    (workspace / "tool").write_text("#!/bin/sh\n")
    for path, granted in (
        (system, workspace),  # without such entries the working directory may be granted
        (f"{system}:", outputs),  # and with them, a directory in it (no command is looked up there)
    ):
        environment = {"HOME": "/nonexistent", "PATH": path}
        seen = harness_outcome(harness, granted, env=environment, cwd=workspace)
        assert seen == "ran", (path, granted, seen)
    cases = [  # (PATH, LD_LIBRARY_PATH, the grant, the place it holds)
        (system, str(libraries), libraries, libraries),
        (system, "/usr/lib:lib", workspace, workspace / "lib"),
        (system, ":/usr/lib", workspace, workspace),
        (f"node_modules/.bin:{system}", "", workspace, workspace / "node_modules" / ".bin"),
        (f"{system}:", "", workspace, workspace),
        (f"{system}:.", "", workspace, workspace),
        (f"{system}:", "", workspace / "tool", workspace),  # a file the shell runs as `tool`
    ]
    for path, library_path, granted, place in cases:
        environment = {"HOME": "/nonexistent", "PATH": path, "LD_LIBRARY_PATH": library_path}
        program = "open('planted', 'w').write('x')\nreturn 'ran'"
        message = refused_grant(
            harness,
            granted,
            program,
            env=environment,
            cwd=workspace,
            what=f"{granted} granted under PATH={path} LD_LIBRARY_PATH={library_path}",
        )
        assert f"the write grant {str(granted)!r} holds {str(place)!r}" in message, message
        assert "a run could leave code there that the host runs next" in message
    # What such a grant would have let a run leave does run as the host: a library where the
    # loader looks first, and a command the shell finds by name in the working directory.
    shutil.copy(compiled, libraries / "libz.so.1")
    environment = {"PATH": system, "LD_LIBRARY_PATH": str(libraries)}
    subprocess.run(["git", "--version"], env=environment, capture_output=True, check=True)
    assert ran.exists()
    ran.unlink()
    (workspace / "git").write_text(f"#!/bin/sh\ntouch {ran}\n")
    (workspace / "git").chmod(0o755)
    environment = {"PATH": f".:{system}"}
    subprocess.run(["sh", "-c", "git status"], env=environment, cwd=workspace, check=True)
    assert ran.exists()


@pytest.mark.skipif(shutil.which("cc") is None, reason="a compiled library shows what it runs")
def test_a_write_grant_holding_a_library_the_harness_preloads_fails_every_run(
    tmp_path: Path,
) -> None:
    # The dynamic loader loads the libraries of LD_PRELOAD (and LD_AUDIT) into the harness
    # and into every command it starts. The runtime's template starts with an empty
    # environment, so they are not among the libraries it sees mapped: a run whose write
    # grant held one could replace it, and the harness's next command would run its code.
    hooks = tmp_path / "hooks"
    project = tmp_path / "project"
    for directory in (hooks, project):
        directory.mkdir()
    harness = project / "harness.py"
    harness.write_text(_SEARCH_PATH_HARNESS)
    ran = tmp_path / "ran-as-the-host"
    source = tmp_path / "planted.c"
    source.write_text(_PLANTED_LIBRARY)
    planted = tmp_path / "planted.so"
    compile_library = ["cc", "-shared", "-fPIC", "-o"]
    subprocess.run([*compile_library, str(planted), f'-DPLANTED="{ran}"', str(source)], check=True)
    (tmp_path / "empty.c").write_text("int hook;\n")
    subprocess.run(
        [*compile_library, str(hooks / "libhook.so"), str(tmp_path / "empty.c")], check=True
    )
    for variable, value in (
        ("LD_PRELOAD", str(hooks / "libhook.so")),
        ("LD_PRELOAD", f"libc.so.6 {hooks / 'libhook.so'}"),
        ("LD_AUDIT", str(hooks / "libhook.so")),
    ):
        environment = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", variable: value}
        message = refused_grant(
            harness, hooks, env=environment, what=f"{hooks} granted under {variable}={value}"
        )
        assert f"the write grant {str(hooks)!r} holds {str(hooks / 'libhook.so')!r}" in message
        assert "a run could leave code there that the host runs next" in message
    # What such a grant would have let a run leave runs as the host in its next command.
    shutil.copy(planted, hooks / "libhook.so")
    environment = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(hooks / "libhook.so")}
    subprocess.run(["sh", "-c", "true"], env=environment, check=True)
    assert ran.exists()


@pytest.mark.skipif(shutil.which("cc") is None, reason="a compiled library stands for a vendor's")
def test_a_write_grant_holding_a_library_the_harness_has_loaded_fails_every_run(
    tmp_path: Path,
) -> None:
    # A harness loads shared libraries the runtime's template never does (ctypes.CDLL of a
    # vendor's library, an extension module's dependency found by its rpath): the next start
    # of the harness loads them again, so a run whose write grant held one could replace it
    # and have its code run as the host.
    vendor = tmp_path / "vendor" / "lib"
    project = tmp_path / "project"
    for directory in (vendor, project):
        directory.mkdir(parents=True)
    (tmp_path / "vendor.c").write_text("int vendor_answer(void) { return 42; }\n")
    library = vendor / "libvendor.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "vendor.c")], check=True
    )
    harness = project / "harness.py"
    loads = f"import ctypes\nctypes.CDLL({str(library)!r}).vendor_answer()\n"
    harness.write_text(loads + _SEARCH_PATH_HARNESS)
    environment = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"}
    for granted in (vendor, tmp_path / "vendor"):
        message = refused_grant(
            harness, granted, env=environment, what=f"a run may replace {library}"
        )
        assert f"the write grant {str(granted)!r} holds {str(library)!r}" in message, message
        assert "a run could leave code there that the host runs next" in message


def test_a_write_grant_holding_a_namespace_package_the_harness_imports_fails_every_run(
    tmp_path: Path,
) -> None:
    # A package without an __init__.py (a namespace package) has no file of its own, and its
    # modules are submodules: neither was among the code the harness has imported, so a grant
    # of the package's directory, beneath the harness's own directory, let a run replace the
    # module the harness imports at its next start.
    project = tmp_path / "project"
    package = project / "acme"
    package.mkdir(parents=True)
    (package / "helper.py").write_text("HELPER = 1\n")
    harness = project / "harness.py"
    harness.write_text("import acme.helper\n" + _SEARCH_PATH_HARNESS)
    message = refused_grant(
        harness,
        package,
        env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"},
        what=f"a run may replace {package / 'helper.py'}",
    )
    assert f"the write grant {str(package)!r} holds {str(package)!r}" in message, message
    assert "code the harness has imported" in message


@pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("bash") is None,
    reason="git and bash show what their configuration runs",
)
def test_a_write_grant_holding_configuration_the_environment_names_fails_every_run(
    tmp_path: Path,
) -> None:
    # Where the harness's environment moves its user's configuration out of the home
    # directory (XDG_CONFIG_HOME: git reads its git/config there, whose core.fsmonitor runs at
    # every git status) or names a file every non-interactive bash runs first (BASH_ENV, read
    # by each bash -c of a bash tool), code a run left there would run as the host.
    configuration = tmp_path / "configuration"  # not hidden, not in the home directory
    shell = tmp_path / "shell"
    project = tmp_path / "project"
    for directory in (configuration, shell, project):
        directory.mkdir()
    harness = project / "harness.py"
    harness.write_text(_SEARCH_PATH_HARNESS)
    ran = tmp_path / "ran-as-the-host"
    environment = {
        "HOME": "/nonexistent",
        "PATH": "/usr/bin:/bin",
        "XDG_CONFIG_HOME": str(configuration),
        "BASH_ENV": str(shell / "startup.sh"),
    }
    leaves = {
        configuration: (configuration / "git" / "config", f"[core]\n\tfsmonitor = touch {ran}\n"),
        shell: (shell / "startup.sh", f"touch {ran}\n"),
    }
    for granted, (planted, _code) in leaves.items():
        message = refused_grant(
            harness, granted, env=environment, what=f"a run may write {planted}"
        )
        assert f"the write grant {str(granted)!r} holds" in message, message
        assert "a run could leave code there that the host runs next" in message
    # What each would have let a run leave does run as the host.
    subprocess.run(["git", "init", "-q", str(tmp_path / "repository")], check=True)
    for granted, command in (
        (configuration, ["git", "-C", str(tmp_path / "repository"), "status"]),
        (shell, ["bash", "-c", "true"]),
    ):
        planted, code = leaves[granted]
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(code)
        subprocess.run(command, env=environment, capture_output=True)
        assert ran.exists(), command
        ran.unlink()
        planted.unlink()


def test_a_write_grant_holding_where_the_host_keeps_bytecode_fails_every_run(
    tmp_path: Path,
) -> None:
    # Python loads a module's bytecode from its directory's __pycache__, or, for a harness
    # started with PYTHONPYCACHEPREFIX (or -X pycache_prefix), from beneath that directory for
    # every module, the standard library's included: an unchecked bytecode file a run left
    # there would run as the host at its next import, whatever the source says.
    prefix = tmp_path / "bytecode"
    project = tmp_path / "project"  # the harness script's directory, on its sys.path
    for directory in (prefix, project, project / "__pycache__"):
        directory.mkdir()
    harness = project / "harness.py"
    harness.write_text(_SEARCH_PATH_HARNESS)
    plain = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"}
    prefixed = {**plain, "PYTHONPYCACHEPREFIX": str(prefix)}
    for environment, granted, place in (
        (prefixed, prefix, prefix),
        (prefixed, prefix / "srv", prefix),
        (plain, project / "__pycache__", project / "__pycache__"),
    ):
        granted.mkdir(exist_ok=True)
        message = refused_grant(
            harness, granted, env=environment, what=f"a run may write {granted}"
        )
        assert f"the write grant {str(granted)!r} holds {str(place)!r}" in message, message
        assert "a run could leave code there that the host runs next" in message
    # What either would have let a run leave does run as the host, at its next import.
    ran = tmp_path / "ran-as-the-host"
    module = project / "helper.py"
    module.write_text("HELPER = 1\n")
    planted = tmp_path / "planted.py"
    planted.write_text(f"open({str(ran)!r}, 'w')\n")
    cached = Path(importlib.util.cache_from_source(str(module)))
    for environment, where in (
        (prefixed, prefix / project.relative_to("/") / cached.name),
        (plain, cached),
    ):
        where.parent.mkdir(parents=True, exist_ok=True)
        py_compile.compile(
            str(planted),
            cfile=str(where),
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        subprocess.run(
            [sys.executable, "-c", "import helper"], env=environment, cwd=project, check=True
        )
        assert ran.exists(), where
        ran.unlink()
        where.unlink()


def test_a_host_whose_working_directory_was_removed_still_runs(tmp_path: Path) -> None:
    # The places a write grant may not hold include the working directory where the harness
    # looks there (sys.path's "" under python -c, an empty or relative PATH entry); resolving
    # it raised FileNotFoundError once that directory had been removed under the harness, and
    # no run could start.
    removed = tmp_path / "removed"
    removed.mkdir()
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    harness = "import os\nos.rmdir(os.getcwd())\n" + _SEARCH_PATH_HARNESS
    outcome = subprocess.run(
        [sys.executable, "-c", harness, str(outputs), "return 'ran'"],
        capture_output=True,
        text=True,
        env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin:"},
        cwd=removed,
        timeout=60,
    )
    assert outcome.returncode == 0, outcome.stderr
    assert json.loads(outcome.stdout) == "ran"


def test_a_host_whose_path_holds_undecodable_bytes_still_runs_and_checks_its_grants(
    tmp_path: Path,
) -> None:
    # The host hands its template the places it looks for code; a PATH entry that is not
    # UTF-8 (a folder named in Latin-1) cannot cross to the template as it is, and made every
    # run raise UnicodeEncodeError. Its nearest folder above stands in for it.
    commands = tmp_path / "commands"
    undecodable = commands / os.fsdecode(b"caf\xe9") / "bin"
    undecodable.mkdir(parents=True)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    harness = tmp_path / "harness.py"
    harness.write_text(_SEARCH_PATH_HARNESS)
    environment = {"PATH": f"{undecodable}:/usr/bin:/bin", "HOME": "/nonexistent"}
    seen = []
    for granted in (outputs, commands):
        outcome = subprocess.run(
            [sys.executable, "-P", str(harness), str(granted), "return 'ran'"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=60,
        )
        assert outcome.returncode == 0, outcome.stderr
        seen.append(json.loads(outcome.stdout))
    assert seen[0] == "ran"
    kind, message = seen[1]
    assert kind == "worker-exit"
    assert f"the write grant {str(commands)!r} holds {str(commands)!r}" in message
    assert "PATH" in message


def test_a_write_grant_of_the_machines_python_libraries_fails_every_run() -> None:
    # The system's python3 (which every user, apt and cron run) runs each .pth file of its
    # dist-packages as it starts, whatever Python the harness runs: a run that could write
    # one there would run its code as whoever starts python3 next.
    libraries = [
        os.path.join(parent, name)
        for parent in ("/usr/lib", "/usr/local/lib")
        if os.path.isdir(parent)
        for name in sorted(os.listdir(parent))
        if name.startswith("python3")
    ]
    if not libraries:
        pytest.skip("this machine has no Python libraries of its own")
    for granted in (libraries[0], os.path.join(libraries[-1], "dist-packages")):
        if not os.path.isdir(granted):
            continue
        message = write_grant_refusal(granted)
        assert f"the write grant {granted!r} holds" in message
        assert "look for packages and .pth files" in message


def test_a_write_grant_of_what_every_command_or_system_python_loads_first_fails_every_run() -> None:
    # The dynamic loader loads each library /etc/ld.so.preload names into every command any
    # user starts (the harness's python and its tools' commands included), and finds every
    # library through /etc/ld.so.cache; Debian's python3 imports sitecustomize.py at every start
    # from its library directory, where that file is a link into /etc/python3.X. A run that
    # could write there would run its code as whoever starts a command next.
    granted = ["/etc"]
    linked_out = [
        os.path.dirname(os.path.realpath(entry))
        for parent in ("/usr/lib", "/usr/local/lib")
        if os.path.isdir(parent)
        for name in sorted(os.listdir(parent))
        if name.startswith("python3")
        for entry in [os.path.join(parent, name, "sitecustomize.py")]
        if os.path.islink(entry) and os.path.isdir(os.path.dirname(os.path.realpath(entry)))
    ]
    granted += linked_out[:1]  # /etc/python3.11 on Debian
    for path in granted:
        assert f"the write grant {path!r} holds" in write_grant_refusal(path)


def _mapped(name: str) -> str:
    """The file this process has mapped whose name starts with ``name``."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip()
            if os.path.basename(path).startswith(name):
                return path
    raise AssertionError(f"{name} is not mapped")


def test_the_environment_is_only_what_the_policy_passes() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(env={"LANG": "C"})))
    try:
        assert run(runtime, "import os\nreturn dict(os.environ)").value == {"LANG": "C"}
    finally:
        runtime.close()


# --- the attacks ---------------------------------------------------------------------------


def test_a_secret_outside_the_scratch_directory_cannot_be_read(
    sandbox: SubprocessCodeRuntime, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.key"
    secret.write_text("hunter2")
    assert error_of(sandbox, f"open({str(secret)!r}).read()").startswith("PermissionError")
    assert error_of(sandbox, "open('/etc/passwd').read()").startswith("PermissionError")
    assert error_of(sandbox, "open('/etc/shadow').read()").startswith("PermissionError")


def test_nothing_outside_the_scratch_directory_can_be_written(
    sandbox: SubprocessCodeRuntime, tmp_path: Path
) -> None:
    target = tmp_path / "planted"
    refused = ("PermissionError", "OSError: [Errno 30] Read-only file system")
    assert error_of(sandbox, f"open({str(target)!r}, 'w')").startswith(refused)
    assert error_of(sandbox, "open('/tmp/planted-by-a-program', 'w')").startswith(refused)
    assert not target.exists()
    assert not os.path.exists("/tmp/planted-by-a-program")


def test_no_network_connection_reaches_a_listener_on_localhost(
    sandbox: SubprocessCodeRuntime, tmp_path: Path
) -> None:
    received: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    unix_path = str(tmp_path / "service.sock")
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(unix_path)
    unix_listener.listen()
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            received.append(connection.recv(100))
            connection.close()

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        tcp = f"""
import socket
socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"exfil:hello")
"""
        udp = f"""
import socket
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"exfil", ("127.0.0.1", {port}))
"""
        unix = f"""
import socket
client = socket.socket(socket.AF_UNIX)
client.connect({unix_path!r})
"""
        for program in (tcp, udp, unix):
            assert error_of(sandbox, program).startswith("PermissionError"), program
    finally:
        stop.set()
        thread.join()
        listener.close()
        unix_listener.close()
    assert received == []


def test_the_program_cannot_signal_its_parent_or_the_template(
    sandbox: SubprocessCodeRuntime,
) -> None:
    run(sandbox, "return 1")
    template = sandbox.template_pid
    assert template is not None
    outcome = error_of(sandbox, "import os\nos.kill(os.getppid(), 9)\nos.kill(1, 19)")
    assert outcome.startswith("PermissionError")
    assert error_of(sandbox, f"import os\nos.kill({template}, 9)").startswith(
        ("ProcessLookupError", "PermissionError")
    )
    assert sandbox.template_pid == template
    assert run(sandbox, "return 'still serving'").value == "still serving"


def test_a_setsid_double_forked_sleeper_does_not_outlive_the_run(
    sandbox: SubprocessCodeRuntime,
) -> None:
    marker = "4242.125"
    program = f"""
import os, time
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # a run starts no session of its own
        pass
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{marker}"])
    os._exit(0)
time.sleep(0.2)
return "escaped?"
"""
    assert run(sandbox, program).value == "escaped?"
    deadline = time.monotonic() + 5
    while host_processes_with(marker):
        assert time.monotonic() < deadline, "the sleeper outlived its run"
        time.sleep(0.01)


def test_forked_children_end_the_run_cleanly(sandbox: SubprocessCodeRuntime) -> None:
    program = """
import os, time
for _ in range(500):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
return "forked 500"
"""
    result = run(sandbox, program)
    assert result.error is not None
    assert result.error.kind == "worker-exit"
    # Whichever the tree exhausts first: 64 processes or 512 MB of their memory.
    assert result.error.message in (
        "process budget exhausted (more than 64 processes)",
        "memory budget exhausted (512MB across the run's processes)",
    )
    assert run(sandbox, "return 'next run'").value == "next run"


def test_no_other_process_environment_or_memory_is_readable(
    sandbox: SubprocessCodeRuntime,
) -> None:
    os.environ.setdefault("DSH_SANDBOX_TEST_SECRET", "s3cr3t")
    host = os.getpid()
    assert error_of(sandbox, "open('/proc/1/environ').read()").startswith("PermissionError")
    assert error_of(sandbox, "open('/proc/1/mem', 'rb').read(1)").startswith("PermissionError")
    assert error_of(sandbox, f"open('/proc/{host}/environ').read()").startswith(
        ("FileNotFoundError", "PermissionError")
    )
    assert run(sandbox, "import os\nreturn dict(os.environ)").value == {}
    visible = run(
        sandbox, "import os\nreturn sorted(int(p) for p in os.listdir('/proc') if p.isdigit())"
    )
    assert visible.value[:2] == [1, 2]  # the namespace's init and the worker only


def test_the_cpu_of_every_process_of_the_run_is_charged() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(compute_ms=1500, max_wall_ms=20_000))
    program = """
import os
for _ in range(2):
    if os.fork() == 0:
        while True:
            pass
os.wait()
"""
    try:
        result = run(runtime, program)
    finally:
        runtime.close()
    assert result.error is not None
    assert result.error.kind == "timeout"
    # And where the worker was: waiting for its children (``os.wait()``).
    assert result.error.message.startswith("compute budget exhausted (1500ms busy)")


def test_the_memory_of_every_process_of_the_run_is_charged() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_memory_mb=200, max_wall_ms=20_000))
    program = """
import os, time
for _ in range(3):
    if os.fork() == 0:
        block = bytearray(120 * 2**20)
        time.sleep(30)
os.wait()
"""
    try:
        result = run(runtime, program)
    finally:
        runtime.close()
    assert result.error is not None
    assert (result.error.kind, result.error.message) == (
        "worker-exit",
        "memory budget exhausted (200MB across the run's processes)",
    )


def test_a_grant_that_does_not_exist_is_named_when_the_system_starts(
    tmp_path: Path, logs: Logs
) -> None:
    # Granted all the same (it may exist by the first run), but named now: otherwise every
    # run failed naming it, long after the typo.
    missing = str(tmp_path / "dcos")
    system = ToolSystem.start(
        ToolsConfig(mode="code"), code_sandbox=CodeSandbox(read=[str(tmp_path), missing])
    )
    system.stop()
    assert logs.warnings == [
        f"code sandbox: read[1] {missing!r} does not exist; every run will fail naming it "
        "unless it exists when the runtime's template starts (the first run, or warm_up())"
    ]


def test_a_grant_that_cannot_be_opened_fails_every_run_naming_it_and_the_fix(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "missing")
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=CodeSandbox(read=[missing])))
    try:
        result = run(runtime, "return 1")
    finally:
        runtime.close()
    assert result.error is not None
    assert result.error.kind == "worker-exit"
    assert result.error.message == (
        f"worker error: code sandbox: the granted path {missing!r} cannot be opened (No such "
        "file or directory); fix or remove it in CodeSandbox(read=..., write=...)"
    )


# --- configuration --------------------------------------------------------------------------


def test_isolation_is_the_sandbox_by_default_and_validated() -> None:
    assert ToolsConfig().code_isolation == "sandbox"
    assert CodeRuntimeConfig().isolation == "sandbox"
    with pytest.raises(
        ValueError, match=r"^code_isolation must be one of sandbox, process; got 'x'$"
    ):
        ToolsConfig(code_isolation="x")
    with pytest.raises(ValueError, match=r"^code sandbox: read\[0\] must be an absolute path"):
        CodeSandbox(read=["relative"])


def test_a_grant_given_as_a_path_object_is_kept_as_its_text(tmp_path: Path) -> None:
    grants = CodeSandbox(read=[tmp_path / "in"], write=[tmp_path / "out"])
    assert grants.read == (f"{tmp_path}/in",)
    assert grants.write == (f"{tmp_path}/out",)
    with pytest.raises(ValueError, match=r"^code sandbox: read\[0\] must be an absolute path"):
        CodeSandbox(read=[Path("relative")])


def test_grants_that_cannot_reach_the_template_are_refused_where_they_are_given() -> None:
    # os.fsdecode of an undecodable byte gives a lone surrogate, which UTF-8 cannot carry.
    undecodable = os.fsdecode(b"/tmp/caf\xe9")
    with pytest.raises(ValueError, match=r"^code sandbox: write\[1\] must be valid UTF-8 "):
        CodeSandbox(write=["/tmp", undecodable])
    with pytest.raises(ValueError, match=r"^code sandbox: env\['LANG'\] must be valid UTF-8"):
        CodeSandbox(env={"LANG": undecodable})


def test_an_environment_value_with_a_nul_is_refused_naming_the_value_not_the_name() -> None:
    with pytest.raises(
        ValueError, match=r"^code sandbox: env\['LANG'\] must hold no NUL character, got 'C\\x00'$"
    ):
        CodeSandbox(env={"LANG": "C\0"})
    with pytest.raises(ValueError, match=r"^code sandbox: env name 'A=B' must be a valid variable"):
        CodeSandbox(env={"A=B": "C"})


def test_settings_that_cannot_reach_the_template_fail_the_run_at_once() -> None:
    # Past the policy's checks (a struct forced into shape): the template is never started
    # without its settings, and every run fails naming why instead of waiting for it.
    sandbox = CodeSandbox()
    msgspec.structs.force_setattr(sandbox, "env", {"LANG": os.fsdecode(b"caf\xe9")})
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(sandbox=sandbox))
    try:
        for _ in range(2):
            result = asyncio.run(runtime.run(CodeRunRequest("return 1", [])))
            assert result.error is not None
            assert result.error.kind == "worker-exit"
            assert "settings cannot reach its template" in result.error.message
        assert runtime.template_pid is None
    finally:
        runtime.close()


def test_the_descriptor_limit_is_validated() -> None:
    assert CodeSandbox().max_open_files == 256
    with pytest.raises(TypeError, match=r"^code sandbox: max_open_files must be an integer$"):
        CodeSandbox(max_open_files=True)
    with pytest.raises(ValueError, match=r"^code sandbox: max_open_files must be at least 32 "):
        CodeSandbox(max_open_files=8)


def test_a_tool_system_passes_its_grants_to_the_runtime(tmp_path: Path) -> None:
    from dsh_tools import ToolSystem

    grants = CodeSandbox(read=[str(tmp_path)])
    with ToolSystem.start(ToolsConfig(mode="code"), code_sandbox=grants) as system:
        runtime: Any = system.code_runtime
        assert runtime.config.sandbox == grants
        assert runtime.isolation == "sandbox"
    with ToolSystem.start(ToolsConfig(mode="code", code_isolation="process")) as system:
        assert system.code_runtime.isolation == "process"


def test_tools_remain_the_way_out_to_the_workspace(tmp_path: Path) -> None:
    import io

    from dsh_tools.cli import run_program

    (tmp_path / "README.md").write_text("# Project\n")
    program = f"""
try:
    open({str(tmp_path / "README.md")!r}).read()
    direct = "read directly"
except PermissionError:
    direct = "refused"
text = await tools.read_file({{"path": "README.md"}})
await tools.write_file({{"path": "notes/summary.md", "content": "seen: " + str(len(str(text)))}})
return direct
"""
    out = io.StringIO()
    assert run_program(program, "sandboxed.py", out, workspace=tmp_path) == 0, out.getvalue()
    assert "refused" in out.getvalue()
    assert (tmp_path / "notes" / "summary.md").read_text().startswith("seen: ")


def test_run_code_isolation_process_is_the_explicit_opt_out(tmp_path: Path) -> None:
    import io

    from dsh_tools.cli import run_program

    (tmp_path / "data.txt").write_text("host file")
    program = f"return open({str(tmp_path / 'data.txt')!r}).read()"
    sandboxed, unconfined = io.StringIO(), io.StringIO()
    assert run_program(program, "p.py", sandboxed, workspace=tmp_path) == 1
    assert "PermissionError" in sandboxed.getvalue()
    assert run_program(program, "p.py", unconfined, workspace=tmp_path, isolation="process") == 0
    assert "host file" in unconfined.getvalue()


def test_namespace_tracing_and_kernel_interfaces_are_refused(
    sandbox: SubprocessCodeRuntime,
) -> None:
    program = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
syscall = libc.syscall
syscall.restype = ctypes.c_long

def refused(number, *args):
    result = syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
    return result == -1 and ctypes.get_errno() in (errno.EPERM, errno.EACCES, errno.ENOSYS)

return {
    "unshare a user namespace": refused(272, 0x10000000),
    "setns": refused(308, 0, 0),
    "ptrace the init": refused(101, 16, 1, 0, 0),
    "io_uring_setup": refused(425, 8, 0),
    "bpf": refused(321, 0, 0, 0),
    "perf_event_open": refused(298, 0, 0, -1, -1, 0),
    "mount": refused(165, 0, 0, 0, 0, 0),
    "read the kernel log": refused(103, 3, 0, 0),
    "clone into a new network namespace": refused(56, 0x40000000 | 17, 0, 0, 0, 0),
    "a socket of any family": refused(41, 1, 1, 0) and refused(41, 2, 2, 0),
}
"""
    outcome = run(sandbox, program)
    assert outcome.error is None, outcome.error
    assert outcome.value == {name: True for name in outcome.value}
    assert len(outcome.value) == 10


SLEEPER = """
import asyncio, os
if os.fork() == 0:
    try:
        os.setsid()
    except PermissionError:  # a run starts no session of its own
        pass
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{marker}"])
    os._exit(0)
await tools.ready({{}})
await asyncio.sleep(60)
"""


def assert_gone(marker: str) -> None:
    deadline = time.monotonic() + 5
    while host_processes_with(marker):
        assert time.monotonic() < deadline, "a process of the run outlived it"
        time.sleep(0.01)


def test_nothing_outlives_a_run_that_hits_the_wall_clock_ceiling() -> None:
    runtime = SubprocessCodeRuntime(CodeRuntimeConfig(max_wall_ms=700))

    async def ready(value: Any) -> Any:
        return None

    program = SLEEPER.format(marker="4242.25")
    try:
        result = asyncio.run(
            runtime.run(CodeRunRequest(program, [BindingNamespace("tools", {"ready": ready})]))
        )
    finally:
        runtime.close()
    assert result.error is not None
    assert result.error.kind == "timeout"
    assert_gone("4242.25")


def test_nothing_outlives_a_run_when_its_runtime_is_disposed() -> None:
    runtime = SubprocessCodeRuntime()

    async def scenario() -> CodeRunResult:
        started = asyncio.Event()

        async def ready(value: Any) -> Any:
            started.set()
            return None

        program = SLEEPER.format(marker="4242.375")
        request = CodeRunRequest(program, [BindingNamespace("tools", {"ready": ready})])
        task = asyncio.create_task(runtime.run(request))
        await asyncio.wait_for(started.wait(), 10)
        await runtime.dispose()
        return await task

    result = asyncio.run(scenario())
    assert result.error is not None
    assert (result.error.kind, result.error.message) == ("abort", "runtime disposed")
    assert_gone("4242.375")


def test_grants_for_a_runtime_of_ones_own_belong_in_its_config() -> None:
    from dsh_tools import ToolSystem

    with pytest.raises(ValueError, match=r"^code_sandbox must go with the default code runtime"):
        ToolSystem.start(code_runtime=SubprocessCodeRuntime(), code_sandbox=CodeSandbox())
    with pytest.raises(TypeError, match=r"^code_sandbox must be a CodeSandbox, got dict$"):
        ToolSystem.start(ToolsConfig(mode="code"), code_sandbox={"read": []})  # type: ignore[arg-type]


def test_grants_without_any_code_runtime_say_there_is_none() -> None:
    # Not "give your own runtime ...": there is no runtime to give them to.
    from dsh_tools import ToolSystem

    with pytest.raises(ValueError) as error:
        ToolSystem.start(code_runtime=None, code_sandbox=CodeSandbox())
    assert str(error.value) == (
        "code_sandbox must go with the default code runtime, and code_runtime=None starts no "
        "code runtime: leave code_runtime as DEFAULT to run Code Mode programs in the sandbox, "
        "or drop code_sandbox"
    )


def test_budgets_for_a_runtime_of_ones_own_belong_in_its_config() -> None:
    # They configure the default runtime only: given beside another runtime they would be
    # silently ignored (its own config decides), so they are refused.
    from dsh_tools import ToolSystem

    runtime = SubprocessCodeRuntime(CodeRuntimeConfig())
    try:
        config = ToolsConfig(mode="code", compute_ms=500, max_parallel_code_runs=1)
        before = set(threading.enumerate())
        with pytest.raises(ValueError) as caught:
            ToolSystem.start(config, code_runtime=runtime)
        assert set(threading.enumerate()) <= before  # refused before anything started
        assert str(caught.value).startswith(
            "ToolsConfig(compute_ms=500, max_parallel_code_runs=1) configures the default code "
            "runtime, which code_runtime=SubprocessCodeRuntime(...) replaces; give that runtime "
            "these settings itself (CodeRuntimeConfig("
        )
        with ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime) as system:
            assert system.code_runtime is runtime
    finally:
        runtime.close()


class _Paths(Sequence[str]):
    """A sequence of paths that is neither a list nor a tuple."""

    def __init__(self, *paths: str) -> None:
        self._paths = paths

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._paths[index]

    def __len__(self) -> int:
        return len(self._paths)


def test_grants_take_any_sequence_of_paths_but_a_string() -> None:
    # The fields are typed Sequence[str]: any sequence a checked harness passes is taken
    # (and stored as a tuple); a bare string, which is a sequence too, is refused.
    assert CodeSandbox(read=_Paths("/usr")).read == ("/usr",)
    assert CodeSandbox(write=collections.UserList(["/tmp"])).write == ("/tmp",)
    for paths in ("/usr", b"/usr"):
        with pytest.raises(TypeError, match=r"^code sandbox: read must be a list of absolute"):
            CodeSandbox(read=paths)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^code sandbox: write must be a list of absolute"):
        CodeSandbox(write={"/tmp"})  # type: ignore[arg-type]


def _nice_and_blocked(pid: int) -> tuple[int, int]:
    """Process ``pid``'s nice value and its blocked signals' mask."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rpartition(b")")[2].split()
    with open(f"/proc/{pid}/status", "rb") as status:
        blocked = next(line for line in status if line.startswith(b"SigBlk:"))
    return int(fields[16]), int(blocked.split()[1], 16)


def test_a_finished_worker_waits_for_its_kill_at_the_lowest_priority() -> None:
    # Once its end notice is sent the worker waits for its init's SIGKILL, with every signal
    # blocked (no handler of the program runs again). The kill wakes it just as the init's
    # report wakes the host, often on the same core, and the kernel's teardown of its memory
    # then ran ahead of the host's last steps in a fifth of the runs: it waits at nice 19.
    from dsh_tools.codebridge import _worker

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child is killed in there
        try:
            _worker._await_kill()
        finally:
            os._exit(70)
    try:
        deadline = time.monotonic() + WAIT
        nice, blocked = _nice_and_blocked(pid)
        while (nice, blocked & (1 << (signal.SIGTERM - 1))) != (19, 1 << (signal.SIGTERM - 1)):
            assert time.monotonic() < deadline, f"nice {nice}, blocked {blocked:#x}"
            time.sleep(0.01)
            nice, blocked = _nice_and_blocked(pid)
        os.kill(pid, signal.SIGTERM)  # blocked: it waits on
        time.sleep(0.05)
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)
    finally:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
