"""A Ray address where no cluster answers fails the placed call with ``REMOTE_UNAVAILABLE``
at once, naming the address, instead of holding the call while ``ray.init`` retries.

Each case runs in a fresh interpreter: the process-wide Ray connection of the other Ray tests
must not be touched, and a Ray that never connected is the state under test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from ray_support import ray_instance  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]

# The call's result, one line: its error code and message.
PROGRAM = """
import os, sys
from dsh_tools import ExecuteCall, ToolOutput, ToolSystem, define_tool
from dsh_tools.distributed import RayPlacement, init_ray

tool = define_tool(
    name="far",
    description="Runs on the cluster.",
    parameters={},
    output=ToolOutput(schema={"type": "json"}, render=lambda a, v: [{"type": "text", "text": "x"}]),
    execute=lambda args, ctx: 1,
    placement=RayPlacement(num_cpus=0),
)
if sys.argv[1] == "init_ray":
    try:
        init_ray(address=sys.argv[2])
    except ConnectionError as exc:
        print("init_ray:", exc)
    sys.exit(0)
if sys.argv[1] in ("code", "aborted"):
    # A placed call, or a Code Mode run on the cluster, aborted while ray.init() still waits
    # for an answer; then the process exits (ray.init() goes on retrying: not waited for).
    import threading
    from dsh_tools import AbortController, ToolsConfig
    from dsh_tools.distributed import RayCodeRuntime

    controller = AbortController()
    threading.Timer(1.0, controller.abort, ["user pressed stop"]).start()
    if sys.argv[1] == "code":
        runtime = RayCodeRuntime(num_cpus=0)
        with ToolSystem.start(ToolsConfig(mode="code"), code_runtime=runtime) as system:
            arguments = {"code": "return 1", "description": "test program"}
            call = ExecuteCall(
                call_id="c", name="run_code", arguments=arguments, signal=controller.signal
            )
            print(system.execute(call).content[0]["text"], flush=True)
    else:
        with ToolSystem.start(code_runtime=None) as system:
            system.tools.register(tool)
            call = ExecuteCall(call_id="c", name="far", arguments={}, signal=controller.signal)
            result = system.execute(call)
            print(result.error.info.code, result.error.message, flush=True)
    sys.exit(0)
with ToolSystem.start(code_runtime=None) as system:
    system.tools.register(tool)
    result = system.execute(ExecuteCall(call_id="c", name="far", arguments={}))
    print(result.error.info.code, result.error.message)
"""


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def run(*args: str, ray_address: str | None, ray_tmpdir: Path | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    if ray_tmpdir is not None:
        env["RAY_TMPDIR"] = str(ray_tmpdir)
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROGRAM, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=45,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the program was still running after 45 s (waiting for ray.init)")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_ray_address_nothing_listens_on_fails_the_call_naming_it() -> None:
    address = f"127.0.0.1:{closed_port()}"
    assert run("call", ray_address=address) == (
        'REMOTE_UNAVAILABLE cannot run tool "far" on Ray: ray.init() failed: no Ray cluster '
        f"answers at {address} (RAY_ADDRESS): Connection refused"
    )


@pytest.mark.parametrize(
    ("waiting", "settled"),
    [
        ("aborted", "ABORTED tool call aborted"),
        ("code", "Error: code run failed (abort): user pressed stop"),
    ],
)
def test_an_abort_ends_a_call_waiting_for_an_address_that_is_not_ray_and_the_process_exits(
    waiting: str, settled: str
) -> None:
    # Something accepts connections there (a wrong port, say) but never speaks: the
    # connection attempt waits for its answer. The aborted call or run must not wait for it,
    # and neither must the process as it exits.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        assert run(waiting, ray_address=address) == settled


def test_a_ray_address_where_something_else_listens_fails_the_call_naming_it() -> None:
    # A wrong port: something accepts the connection but never speaks Ray's protocol, and
    # ray.init() would retry for minutes. A call without a deadline fails instead.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        assert run("call", ray_address=address) == (
            'REMOTE_UNAVAILABLE cannot run tool "far" on Ray: ray.init() failed: no Ray '
            f"cluster answers at {address} (RAY_ADDRESS): something listens there but says "
            "nothing within 5 s"
        )


@pytest.mark.usefixtures("ray_instance")
def test_a_server_that_is_not_ray_is_told_from_a_ray_cluster() -> None:
    import ray

    from dsh_tools.distributed import _driver

    with socket.socket() as web:
        web.bind(("127.0.0.1", 0))
        web.listen(1)
        address = f"127.0.0.1:{web.getsockname()[1]}"

        def answer() -> None:
            connection, _ = web.accept()
            with connection:
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        server = threading.Thread(target=answer)
        server.start()
        with pytest.raises(ConnectionError) as refused:
            _driver._probe({"address": address})
        server.join()

    assert str(refused.value) == (
        f"no Ray cluster answers at {address} (address=): something listens there but does "
        "not answer as a Ray cluster (gRPC) does"
    )
    # the session's own cluster passes
    _driver._probe({"address": ray.get_runtime_context().gcs_address})


def test_init_ray_with_such_an_address_raises_naming_it() -> None:
    address = f"127.0.0.1:{closed_port()}"
    assert run("init_ray", address, ray_address=None) == (
        f"init_ray: no Ray cluster answers at {address} (address=): Connection refused"
    )


def test_a_cluster_file_left_by_a_dead_ray_start_fails_the_call_naming_the_file(
    tmp_path: Path,
) -> None:
    # ``ray start`` records its cluster's address there; a cluster killed without ``ray stop``
    # leaves the file, and ``ray.init()`` would retry that address for minutes.
    address = f"127.0.0.1:{closed_port()}"
    recorded = tmp_path / "ray" / "ray_current_cluster"
    recorded.parent.mkdir()
    recorded.write_text(address + "\n")
    assert run("call", ray_address=None, ray_tmpdir=tmp_path) == (
        'REMOTE_UNAVAILABLE cannot run tool "far" on Ray: ray.init() failed: no Ray cluster '
        f"answers at {address} (recorded by `ray start` in {recorded}; remove that file to "
        "start a local instance instead): Connection refused"
    )
    # so does ``RAY_ADDRESS=auto``, and ``address="auto"``
    assert run("call", ray_address="auto", ray_tmpdir=tmp_path) == (
        'REMOTE_UNAVAILABLE cannot run tool "far" on Ray: ray.init() failed: no Ray cluster '
        f"answers at {address} (recorded by `ray start` in {recorded}; remove that file to "
        "start a local instance instead): Connection refused"
    )
    assert run("init_ray", "auto", ray_address=None, ray_tmpdir=tmp_path) == (
        f"init_ray: no Ray cluster answers at {address} (recorded by `ray start` in "
        f"{recorded}; remove that file to start a local instance instead): Connection refused"
    )


@pytest.mark.parametrize(
    ("platform", "expected"),
    [("linux", "from TMPDIR"), ("darwin", "/tmp/ray"), ("freebsd", "/tmp/ray")],
)
def test_the_cluster_file_is_looked_for_where_ray_looks_for_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, platform: str, expected: str
) -> None:
    # Ray takes TMPDIR into account on Linux only (macOS always sets it, to a directory of its
    # own): a file under TMPDIR elsewhere is not one ray.init() would connect to, and failing
    # the call for its address would refuse a cluster Ray starts itself.
    from dsh_tools.distributed import _driver

    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/tmp")  # elsewhere, Ray asks it
    recorded = tmp_path / "ray" / "ray_current_cluster"
    recorded.parent.mkdir()
    recorded.write_text("127.0.0.1:1\n")
    address, path = _driver._recorded_cluster({})
    if expected == "from TMPDIR":
        assert (address, path) == ("127.0.0.1:1", str(recorded))
    else:
        assert path == f"{expected}/ray_current_cluster"
