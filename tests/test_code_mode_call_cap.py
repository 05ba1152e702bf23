"""A Code Mode run makes at most ``ToolsConfig.max_sub_calls`` tool calls: every call goes
through the pipeline and the session log at the host's CPU, so a program looping over calls
would otherwise cost the host without bound while its own budgets barely moved. A call past the
cap fails inside the program, undispatched and unrecorded, and the program may carry on."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from code_mode_support import dispatch_events, failure_of, run_code, value_of

from dsh_tools import ToolsConfig, ToolSystem, tool

COUNTING_PROGRAM = """
answers = []
for n in range({calls}):
    try:
        answers.append(await tools.count({{"n": n}}))
    except ToolCallError as exc:
        answers.append(str(exc))
return answers
"""


class Counter:
    """Counts the bodies of its ``count`` tool that ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran = 0

        @tool
        def count(n: int) -> int:
            """Count one call."""
            with self.lock:
                self.ran += 1
            return n

        self.tool = count


def returned(result: Any) -> Any:
    """What the program returned."""
    return value_of(result)["result"]


def counting_system(counter: Counter, **config: Any) -> ToolSystem:
    system = ToolSystem.start(ToolsConfig(mode="code", **config))
    system.tools.register(counter.tool)
    return system


def test_calls_past_the_cap_fail_in_the_program_which_carries_on() -> None:
    counter = Counter()
    with counting_system(counter, max_sub_calls=5) as system:
        result = system.execute(run_code(COUNTING_PROGRAM.format(calls=8)))
        answers = returned(result)
        assert answers[:5] == [0, 1, 2, 3, 4]
        assert (
            answers[5:]
            == [
                "run_code run made 5 tool calls, the most one run may make (max_sub_calls); "
                "count not dispatched"
            ]
            * 3
        )
        assert counter.ran == 5
        # Refused calls leave nothing in the session log.
        assert len(dispatch_events(system, "tool/code-dispatch-start")) == 5
        assert len(dispatch_events(system)) == 5


def test_the_cap_counts_each_run_afresh() -> None:
    counter = Counter()
    with counting_system(counter, max_sub_calls=3) as system:
        for call_id in ("first", "second"):
            answers = returned(
                system.execute(
                    run_code(
                        """
return [await tools.count({"n": n}) for n in range(3)]
""",
                        call_id=call_id,
                    )
                )
            )
            assert answers == [0, 1, 2]
        assert counter.ran == 6


def test_a_program_that_does_not_catch_the_refusal_fails_naming_the_cap() -> None:
    counter = Counter()
    with counting_system(counter, max_sub_calls=2) as system:
        error = failure_of(
            system.execute(
                run_code(
                    COUNTING_PROGRAM.format(calls=3).replace(
                        "except ToolCallError", "except KeyError"
                    )
                )
            )
        )
        assert "max_sub_calls" in error.message
        assert "count not dispatched" in error.message
        assert counter.ran == 2


def test_gathered_calls_past_the_cap_fail_and_the_others_run() -> None:
    counter = Counter()
    with counting_system(counter, max_sub_calls=4) as system:
        answers = returned(
            system.execute(
                run_code("""
results = await asyncio.gather(
    *[tools.count({"n": n}) for n in range(6)], return_exceptions=True
)
return [r if isinstance(r, int) else type(r).__name__ for r in results]
""")
            )
        )
        assert answers == [0, 1, 2, 3, "ToolCallError", "ToolCallError"]
        assert counter.ran == 4


def test_the_default_cap_is_ten_thousand_calls() -> None:
    counter = Counter()
    assert ToolsConfig().max_sub_calls == 10_000
    with counting_system(counter) as system:
        answers = returned(
            system.execute(
                run_code("""
results = await asyncio.gather(
    *[tools.count({"n": n}) for n in range(10_002)], return_exceptions=True
)
return [sum(isinstance(r, int) for r in results), str(results[-1])]
""")
            )
        )
        assert answers == [
            10_000,
            "run_code run made 10000 tool calls, the most one run may make (max_sub_calls); "
            "count not dispatched",
        ]
        assert counter.ran == 10_000


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "max_sub_calls must be a positive integer, got 0"),
        (True, TypeError, "max_sub_calls must be a positive integer, got bool"),
        (2.0, TypeError, "max_sub_calls must be a positive integer, got float"),
        (2**53, ValueError, "max_sub_calls must be an integer of at most 9007199254740991"),
    ],
)
def test_the_cap_is_validated_where_it_is_written(
    value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ToolsConfig(mode="code", max_sub_calls=value)
