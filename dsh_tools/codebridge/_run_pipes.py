"""Non-blocking pipe plumbing of a run's host side: one read, and the host->worker writer.

``ChannelWriter`` queues what the host sends (the ``Boot`` frame, then binding replies) and
writes it as the pipe takes it, from the loop's writer callback when the pipe is full. A program
that stops reading its channel must not make the host buffer without end: past
``UNREAD_REPLY_BYTES`` of queued bytes (beyond the one being written) the writer reports an
overflow and the run fails.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
from collections.abc import Callable
from typing import Any, Final

from ._frames import PREFIX_BYTES, encode_into, write_prefix

__all__ = ["DRAIN_LIMIT", "READ_SIZE", "UNREAD_REPLY_BYTES", "ChannelWriter", "read_available"]

READ_SIZE: Final = 1 << 18
DRAIN_LIMIT: Final = 1 << 24
UNREAD_REPLY_BYTES: Final = 64 * 2**20
"""Binding replies a program may leave unread, beyond the one being written, before its run
fails."""
_IOV_MAX: Final = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16
_PREFIX_ROOM: Final = bytes(PREFIX_BYTES)
_COALESCE_BYTES: Final = 1 << 16
"""Queued frames shorter than this share one buffer: a reply of a few dozen bytes held as an
object of its own costs several times its size, so a program that leaves millions of small
replies unread would make the host hold far more than ``UNREAD_REPLY_BYTES``."""


def read_available(fd: int, size: int) -> bytes | None:
    """One read from a non-blocking pipe: ``None`` when nothing is available yet, ``b""`` at
    end of file (a failed read counts as end of file)."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _ignore(message: str) -> None:
    """The overflow callback of a closed writer."""


class ChannelWriter:
    """The host->worker channel's outgoing bytes for one attempt of a run.

    ``overflow`` is called with a message when too much is left unread. A failed write breaks
    the writer: later sends are dropped (the worker is gone; its exit settles the run). The
    writer never closes its descriptor; the run closes all of an attempt's descriptors.
    """

    __slots__ = (
        "_broken",
        "_buffer",
        "_fd",
        "_flush_scheduled",
        "_held",
        "_loop",
        "_overflow",
        "_unsent",
        "_writer_on",
        "written",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, overflow: Callable[[str], None]) -> None:
        self._loop = loop
        self._overflow = overflow
        self._fd: int | None = None
        self._writer_on = False
        self._flush_scheduled = False
        self._held = False  # see ``hold``
        # What is left to write, in order. Only the head is ever written in part (it is then
        # a view of what remains of it); only the last item, when it is not the head, grows.
        self._buffer: collections.deque[bytes | bytearray | memoryview] = collections.deque()
        self._unsent = 0
        self._broken = False
        self.written = 0  # bytes the pipe has taken (the worker may have read them)

    def reopen(self, overflow: Callable[[str], None]) -> None:
        """Serve another attempt of the run once closed: not broken, nothing written yet,
        ``overflow`` called when too much is left unread (``attach`` names the descriptor)."""
        self._overflow = overflow
        self._broken = False
        self.written = 0

    def attach(self, fd: int) -> None:
        """Write to ``fd`` from now on."""
        self._fd = fd

    def send(self, data: bytes | bytearray) -> None:
        """Queue ``data``; it is written on the next loop iteration (or as the pipe drains)."""
        if self._broken or self._fd is None:
            return
        buffer = self._buffer
        last = buffer[-1] if len(buffer) > 1 else None
        size = len(data)
        if type(last) is bytearray and len(last) + size <= _COALESCE_BYTES:
            last += data
        elif size < _COALESCE_BYTES:
            buffer.append(bytearray(data))
        else:
            buffer.append(data)
        self._queued(size)

    def send_frame(self, frame: Any, cap: int) -> int:
        """Queue the length-prefixed encoding of ``frame``, as ``send`` queues bytes, unless
        its body is over ``cap`` bytes; return the body's size either way. Encoded straight
        into the queue and in one call (every binding reply passes here). Raises what
        encoding raises, with nothing queued."""
        buffer = self._buffer
        last = buffer[-1] if len(buffer) > 1 else None
        if type(last) is not bytearray or len(last) >= _COALESCE_BYTES:
            last = None
        target = bytearray() if last is None else last
        start = len(target)
        target += _PREFIX_ROOM
        try:
            encode_into(frame, target, start + PREFIX_BYTES)
        except BaseException:
            del target[start:]  # what was encoded of it before the error
            raise
        size = len(target) - start - PREFIX_BYTES
        if size > cap or self._broken or self._fd is None:
            del target[start:]  # measured, never sent
            return size
        write_prefix(target, start, size)
        if last is None:
            buffer.append(target)
        # ``_queued``, inline.
        self._unsent += size + PREFIX_BYTES
        if self._unsent > UNREAD_REPLY_BYTES and len(buffer) > 1:
            self._overflow(
                f"the program left more than {UNREAD_REPLY_BYTES} bytes of binding replies unread"
            )
        elif not self._writer_on and not self._flush_scheduled and not self._held:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)
        return size

    def _queued(self, size: int) -> None:
        self._unsent += size
        if self._unsent > UNREAD_REPLY_BYTES and len(self._buffer) > 1:
            self._overflow(
                f"the program left more than {UNREAD_REPLY_BYTES} bytes of binding replies unread"
            )
            return
        if not self._writer_on and not self._flush_scheduled and not self._held:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def hold(self) -> None:
        """Queue what is sent from now on without scheduling its write, until ``release``:
        the replies of one read of the channel, written together as the read has been taken."""
        self._held = True

    def release(self) -> None:
        """End ``hold``: write what it queued now (unless a write is due already), rather than
        on a pass of the loop of its own."""
        self._held = False
        if self._buffer and not self._writer_on and not self._flush_scheduled:
            self.flush()

    def flush(self) -> None:
        """Write what the pipe takes now; watch it for room when something is left."""
        self._flush_scheduled = False
        fd = self._fd
        if fd is None:
            return
        buffer = self._buffer
        while buffer:
            offered = min(len(buffer), _IOV_MAX)
            try:
                if offered == 1:
                    written = os.write(fd, buffer[0])
                else:  # the queued frames in one system call
                    written = os.writev(fd, list(itertools.islice(buffer, offered)))
            except BlockingIOError:
                break
            except OSError:
                self._broken = True
                buffer.clear()
                self._unsent = 0
                break
            self._unsent -= written
            self.written += written
            taken = 0
            while written:
                head = buffer[0]
                if written < len(head):
                    buffer[0] = memoryview(head)[written:]
                    break
                written -= len(head)
                buffer.popleft()
                taken += 1
            if taken < offered:
                break  # the pipe took less than it was offered: it is full
        if buffer and not self._writer_on:
            self._writer_on = True
            self._loop.add_writer(fd, self.flush)
        elif not buffer and self._writer_on:
            self._writer_on = False
            self._loop.remove_writer(fd)

    def close(self) -> None:
        """Stop watching the descriptor and drop what is queued (and the overflow callback,
        which refers to the run: a closed writer reports nothing)."""
        self._overflow = _ignore
        if self._writer_on and self._fd is not None:
            with contextlib.suppress(Exception):  # a closed loop: nothing watches it any more
                self._loop.remove_writer(self._fd)
        self._writer_on = False
        self._fd = None
        self._buffer.clear()
        self._unsent = 0
