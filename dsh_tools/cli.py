"""The ``dsh-tools`` command: ``demo``, ``bench``, ``sdk``, ``catalog`` and ``run-code``
(``run-code -`` reads the program from standard input), and ``--version``.

Exit codes: 0 success, 1 the work itself failed (a failed program; with ``bench --check``, a
figure over its bar; output that cannot be written), 2 bad command-line arguments, 130
interrupted (Ctrl-C). A reader that closes standard output early (``| head``) ends the command
quietly with the usual SIGPIPE status, 141.

This module parses the arguments and dispatches; each command's work lives in its own module
(``_cli_demo``, ``_cli_bench``, ``_cli_commands``).
"""

from __future__ import annotations

import argparse
import io
import itertools
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

import structlog

from ._bench_revision import FIRST_RELEASE
from ._cli_bench import revision_problem, run_bench
from ._cli_commands import run_catalog, run_code_file, run_program, run_sdk
from ._cli_demo import run_demo
from .codebridge._seam import DEFAULT_COMPUTE_MS, DEFAULT_MAX_WALL_MS, ISOLATIONS

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = [
    "main",
    "run_bench",
    "run_catalog",
    "run_code_file",
    "run_demo",
    "run_program",
    "run_sdk",
]


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that what it prints on standard output (``--help``,
    ``--version``) fails as the command's own output does: argparse drops an ``OSError``
    there, so a full disk or a closed pipe would go unnoticed. Its subcommands' parsers are of
    this class too."""

    commands: dict[str, argparse.ArgumentParser]
    """The subcommands' parsers by name, so that an option one does not take is refused by
    it, with its usage, not by the top parser with the usage of the whole command."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if message and file is sys.stdout:
            file.write(message)
        else:
            super()._print_message(message, file)


_TOP_OPTIONS: Final = ("-h", "--help", "--version")
"""The options of ``dsh-tools`` itself, before a command."""


def _parser() -> _Parser:
    parser = _Parser(
        prog="dsh-tools",
        description="Tool registry and execution pipeline for LLM agent harnesses.",
    )
    parser.add_argument("--version", action="version", version=f"dsh-tools {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="run a scripted agent turn against the example tools")
    demo.add_argument("--workspace", type=Path, help="use this folder instead of a temporary one")
    demo.add_argument("--no-code-mode", action="store_true", help="skip the Code Mode part")
    bench = sub.add_parser(
        "bench", help="measure per-call overhead, pool throughput and Code Mode latency"
    )
    bench.add_argument("--json", action="store_true", help="print machine-readable JSON")
    bench.add_argument(
        "--runs", type=int, default=5, help="runs per figure, the median shown (default 5)"
    )
    bench.add_argument("--no-code-mode", action="store_true", help="skip the Code Mode figures")
    bench.add_argument("--check", action="store_true", help="exit 1 when a figure is over its bar")
    bench.add_argument(
        "--against",
        default=None,
        metavar="REVISION",
        help="git revision to measure in turns with this checkout (default: the first release, "
        f"{FIRST_RELEASE}, which the per-call bars are fractions of; '' to skip)",
    )
    sub.add_parser("sdk", help="print the generated Code Mode SDK for the example tools")
    sub.add_parser("catalog", help="print the tool catalog as Markdown")
    run = sub.add_parser("run-code", help="run a Python program in Code Mode")
    run.add_argument(
        "file",
        help="the program (the body of an async function): a file, or - for standard input",
    )
    run.add_argument(
        "--workspace",
        type=Path,
        help="folder the example tools work in (default: the current folder)",
    )
    run.add_argument(
        "--max-wall-ms",
        type=_positive_ms,
        default=DEFAULT_MAX_WALL_MS,
        help=f"wall-clock budget of the program in milliseconds (default {DEFAULT_MAX_WALL_MS})",
    )
    run.add_argument(
        "--compute-ms",
        type=_positive_ms,
        default=DEFAULT_COMPUTE_MS,
        help=f"CPU-time budget of the program in milliseconds (default {DEFAULT_COMPUTE_MS})",
    )
    run.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default="sandbox",
        help="sandbox (default): only the example tools reach the workspace; process: the "
        "program runs with your user's powers",
    )
    parser.commands = dict(sub.choices)
    return parser


def _version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-tools")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


def _read_program(name: str) -> tuple[str, str] | str:
    """The program text and its display name, or an error message naming what was wrong.

    A leading byte order mark (an editor's UTF-8 "with signature") is dropped, as Python drops
    it from a source file; kept, it would be a syntax error in the program's first line."""
    if name == "-":
        # The bytes, decoded here: the text stream's error handler may be surrogateescape.
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        if isinstance(data, str):
            return data, "<stdin>"
        try:
            return data.decode("utf-8-sig"), "<stdin>"
        except UnicodeDecodeError as error:
            return f"standard input is not UTF-8 text ({error.reason} at byte {error.start})"
    path = Path(name)
    if not path.is_file():
        return f"{path} is not a file"
    try:
        return path.read_text(encoding="utf-8-sig"), path.name
    except UnicodeDecodeError as error:
        return f"{path} is not UTF-8 text ({error.reason})"
    except OSError as error:
        return f"cannot read {path}: {error.strerror}"


def _positive_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of milliseconds")
    return value


_SIGPIPE_STATUS = 141


_INTERRUPTED_STATUS = 130  # what a shell reports for a command ended by Ctrl-C


def _top_option(arg: str) -> bool:
    """Whether ``arg`` is one of the top command's options, or a prefix argparse takes for
    one (``--vers``)."""
    if arg in _TOP_OPTIONS:
        return True
    return arg.startswith("--") and len(arg) > 2 and any(o.startswith(arg) for o in _TOP_OPTIONS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    if argv is None:
        _quiet_logs()
        # A terminal or pipe that cannot show some character (PYTHONIOENCODING=ascii, say)
        # gets an escape for it rather than a traceback in place of the output.
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(errors="backslashreplace")
    name = "dsh-tools"  # who speaks in a message: the command, once it is known
    try:
        try:
            parser = _parser()
            given = sys.argv[1:] if argv is None else list(argv)
            # An option before the command is the top command's, which has only --help and
            # --version; argparse would say a command is missing, or blame the command.
            before = list(itertools.takewhile(lambda arg: arg not in parser.commands, given))
            unknown = [a for a in before if a.startswith("-") and not _top_option(a)]
            if unknown and not any(_top_option(arg) for arg in before):
                parser.error(f"unrecognized arguments: {' '.join(unknown)}")
            args, extra = parser.parse_known_args(argv)
            if extra:
                parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        except SystemExit as done:  # --help, --version, or bad arguments: argparse has spoken
            sys.stdout.flush()  # what --help or --version printed: it must reach the reader
            return _status(done)
        name = f"dsh-tools {args.command}"
        status = _dispatch(args, sys.stdout)
        sys.stdout.flush()  # a closed pipe surfaces here, not in the interpreter's exit
        return status
    except KeyboardInterrupt:
        # Ctrl-C: what was running has been stopped and cleaned up on the way out.
        print(f"{name}: interrupted", file=sys.stderr)
        return _INTERRUPTED_STATUS
    except BrokenPipeError:
        # The reader went away (`dsh-tools sdk | head`): stop quietly.
        _drop_stdout()
        return _SIGPIPE_STATUS
    except OSError as error:  # the output cannot be written (a full disk, say)
        where = f"{error.filename}: " if error.filename else ""
        print(f"{name}: {where}{error.strerror or error}", file=sys.stderr)
        _drop_stdout()
        return 1


def _status(done: SystemExit) -> int:
    """The exit status a ``SystemExit`` stands for, as the interpreter would take it."""
    if done.code is None or isinstance(done.code, int):
        return done.code or 0
    return 1


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of output that could
    not be written does not fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


def _quiet_logs() -> None:
    """At a terminal the command's own output is the point: the library's log lines go to
    stderr, warnings and above only (unless the process configured structlog itself)."""
    if structlog.is_configured():
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def _dispatch(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "demo":
        if args.workspace is not None and not args.workspace.is_dir():
            print(f"dsh-tools demo: --workspace {args.workspace} is not a folder", file=sys.stderr)
            return 2
        return run_demo(out, workspace=args.workspace, code_mode=not args.no_code_mode)
    if args.command == "bench":
        if args.runs < 1:
            print("dsh-tools bench: --runs must be at least 1", file=sys.stderr)
            return 2
        if args.against:
            # A revision the user named that cannot be compared with is a mistake in the
            # command, found before minutes of measuring; the default one (the first release)
            # is only left out with a note when this is not a full checkout.
            problem = revision_problem(args.against)
            if problem is not None:
                print(f"dsh-tools bench: --against {args.against}: {problem}", file=sys.stderr)
                return 2
        return run_bench(
            out,
            as_json=args.json,
            runs=args.runs,
            code_mode=not args.no_code_mode,
            check=args.check,
            against=FIRST_RELEASE if args.against is None else args.against or None,
            against_by_default=args.against is None,
        )
    if args.command == "sdk":
        return run_sdk(out)
    if args.command == "catalog":
        return run_catalog(out)
    workspace = args.workspace
    if workspace is None:
        try:
            workspace = Path.cwd()
        except FileNotFoundError:
            print(
                "dsh-tools run-code: the current folder no longer exists; pass --workspace DIR",
                file=sys.stderr,
            )
            return 2
    if not workspace.is_dir():
        print(f"dsh-tools run-code: --workspace {workspace} is not a folder", file=sys.stderr)
        return 2
    read = _read_program(args.file)
    if isinstance(read, str):
        print(f"dsh-tools run-code: {read}", file=sys.stderr)
        return 2
    program, name = read
    return run_program(
        program,
        name,
        out,
        workspace=workspace,
        compute_ms=args.compute_ms,
        max_wall_ms=args.max_wall_ms,
        isolation=args.isolation,
    )


if __name__ == "__main__":
    sys.exit(main())
