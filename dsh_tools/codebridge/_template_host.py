"""The host's handle on the template process: started lazily, restarted when it has died."""

from __future__ import annotations

import array
import concurrent.futures
import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from ._sandbox._host_code import search_places

__all__ = ["FORK_GUARD", "TemplateHandle", "close_host_fds", "keep_host_fds", "reap"]


def _remove_dir(path: str) -> None:
    if path:
        with contextlib.suppress(OSError):
            os.rmdir(path)


_TEMPLATE_PATH: Final = str(Path(__file__).with_name("_template.py"))

_SCRATCH_PREFIX: Final = "dsh-code-scratch-"
_SCRATCH_NAME: Final = re.compile(re.escape(_SCRATCH_PREFIX) + r"([0-9]+)-[^/]*")


def _remove_abandoned_scratch() -> None:
    """Remove the scratch mount points that hosts which are gone left behind: a host and its
    template killed together (a supervisor that ends a whole process tree) leave one, empty.
    Only empty directories of this user named after a process that no longer exists."""
    directory = tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        return
    uid = os.getuid()
    for name in names:
        match = _SCRATCH_NAME.fullmatch(name)
        if match is None:
            continue
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_uid != uid:
                continue
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.rmdir(path)  # fails unless it is an empty directory
        except (OSError, OverflowError):
            continue


_HANDLES: Final[weakref.WeakSet[TemplateHandle]] = weakref.WeakSet()
"""Every live handle, for ``_forget_in_child``."""

FORK_GUARD: Final = threading.RLock()
"""Held while the host makes a descriptor of the code runtime (a template's control socket, a
worker's pipes) until it is recorded (``keep_host_fds``), while it closes one, and across
every fork of the host: a child forked from the host never copies one that it would not know
to close. Taken before a ``TemplateHandle``'s own lock, never after it."""

_HOST_FDS: Final[set[int]] = set()
"""The host's ends of every worker's pipes, open now (guarded by ``FORK_GUARD``)."""


def keep_host_fds(fds: Iterable[int]) -> None:
    """Record the host's ends of a worker's pipes; the caller holds ``FORK_GUARD`` since it
    made them."""
    _HOST_FDS.update(fds)


def close_host_fds(fds: Iterable[int]) -> None:
    """Close those of ``fds`` still recorded with ``keep_host_fds``: in a child forked from
    the host none is (the child closed its copies), so what the host's objects there hold
    never closes a descriptor the child has opened since under the same number."""
    with FORK_GUARD:
        for fd in fds:
            if fd in _HOST_FDS:
                _HOST_FDS.discard(fd)
                _close_quietly(fd)


def _close_quietly(fd: int) -> None:
    # Not ``contextlib.suppress``: a run closes six descriptors, and the context manager cost
    # each three Python calls more than the close itself.
    try:
        os.close(fd)
    except OSError:
        return


def _forget_in_child() -> None:
    """In a child forked from the host: let go of the templates and the workers' pipes. The
    child's copy of a control socket would keep its template waiting for the end of file that
    the host's ``close()`` means to give it (a ``multiprocessing`` worker forked after a run
    made the host's ``stop()`` wait 5 s and kill its template), and its copy of a worker's
    channel would keep that worker from seeing the host end its run. ``FORK_GUARD`` was taken
    for the fork by this very thread; any other lock held by a thread of the parent at the
    fork stays held here, so none is taken."""
    close_host_fds(list(_HOST_FDS))
    for handle in list(_HANDLES):
        handle._forget()
    _release_after_fork()


def _release_after_fork() -> None:
    with contextlib.suppress(RuntimeError):  # not taken: a signal interrupted the fork's wait
        FORK_GUARD.release()


class TemplateHandle:
    """The host's handle on the template process; thread-safe, restarted when it has died."""

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self._settings = dict(settings or {})
        self._scratch: dict[int, str] = {}
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._closed = False
        _HANDLES.add(self)

    def _forget(self) -> None:
        """The host forked: this is the child, which never uses the template (see
        ``_forget_in_child``)."""
        self._closed = True
        self._process = None
        sock, self._socket = self._socket, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def spawn(self, fds: list[int]) -> subprocess.Popen[bytes]:
        """Ask the template to fork a worker with ``fds``; return the template process that
        took the request; raise ``OSError`` when it cannot."""
        payload = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        with FORK_GUARD, self._lock:  # a template started here: its socket is new
            if self._closed:
                raise OSError("the code runtime was disposed")
            for attempt in range(2):
                process = self._process
                if process is None or process.poll() is not None or self._socket is None:
                    self._discard()
                    self._start()
                assert self._socket is not None and self._process is not None
                try:
                    self._socket.sendmsg([b"S"], payload, socket.MSG_NOSIGNAL)
                    return self._process
                except OSError:
                    self._discard()
                    if attempt:
                        raise
            raise AssertionError("unreachable: the second attempt returns or raises")

    def _start(self) -> None:
        settings = dict(self._settings)
        try:
            msgspec.json.encode(settings)  # before anything is started for it
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError among them
            raise OSError(f"the code runtime's settings cannot reach its template: {exc}") from None
        scratch = ""
        if settings.get("isolation") == "sandbox":
            # The runs' scratch mount point, made here so that the host removes it even when
            # the template is killed before it can; named after the host, so that a later
            # one removes it when both were killed.
            _remove_abandoned_scratch()
            scratch = tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-")
            settings["scratch"] = scratch
            # The template, isolated, cannot know where this process looks for code.
            settings["host_code"] = search_places()
        host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-X", "utf8", _TEMPLATE_PATH, str(template_end.fileno())],
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(template_end.fileno(),),
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            host_end.close()
            _remove_dir(scratch)
            raise
        finally:
            template_end.close()
        self._socket = host_end
        self._scratch[self._process.pid] = scratch
        try:
            host_end.sendmsg([b"C" + msgspec.json.encode(settings)], [], socket.MSG_NOSIGNAL)
        except BaseException:  # a template without its settings would never answer
            self._discard()
            raise

    def release(self, process: subprocess.Popen[bytes]) -> None:
        """Remove what the host made for ``process``, a template that has exited."""
        _remove_dir(self._scratch.pop(process.pid, ""))

    def _discard(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        process = self._process
        self._process = None
        if process is not None:
            if process.poll() is None:
                process.kill()
                process.wait()
            self.release(process)

    def replace_unresponsive(self, process: subprocess.Popen[bytes]) -> None:
        """Kill ``process``, a template that stopped reporting (the next spawn starts a fresh
        one). Its workers' runs see their status pipes close and settle."""
        with FORK_GUARD, self._lock:  # a fork never copies the socket as it closes
            if self._process is process:
                self._discard()
                return
        if process.poll() is None:
            process.kill()
            process.wait()
        self.release(process)

    def close(self) -> subprocess.Popen[bytes] | None:
        """Stop accepting runs; closing the socket makes the template exit. Returns it."""
        with FORK_GUARD, self._lock:  # a fork never copies the socket as it closes
            self._closed = True
            if self._socket is not None:
                self._socket.close()
                self._socket = None
            process = self._process
            self._process = None
            return process

    @property
    def pid(self) -> int | None:
        """The template's pid while it runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None


def reap(
    template: TemplateHandle, process: subprocess.Popen[bytes], timeout: float
) -> tuple[concurrent.futures.Future[None], threading.Thread]:
    """Wait for ``process``, a template told to exit (killed after ``timeout`` seconds), then
    remove what the host made for it, on a thread of its own: the returned future settles then,
    whether or not anyone still waits for it (a ``dispose()`` whose caller gave up), as the
    thread's last act (also returned: a waiter joins it, so that none is left once it is told
    the template is gone)."""
    reaped = concurrent.futures.Future[None]()

    def wait() -> None:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        template.release(process)
        reaped.set_result(None)

    thread = threading.Thread(target=wait, name="dsh-template-reaper", daemon=True)
    thread.start()
    return reaped, thread


os.register_at_fork(
    before=FORK_GUARD.acquire, after_in_parent=_release_after_fork, after_in_child=_forget_in_child
)
