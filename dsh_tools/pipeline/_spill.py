"""``spill_policy``: keep large text results out of the conversation and the durable log.

A result whose content is all text and whose UTF-8 size exceeds ``max_inline_bytes`` has its
full text saved through a ``SpillStore``; the content is replaced by one text block holding a
bounded preview and the notice ``Full formatted result stored at: <locator>``. The block fits
``max_inline_bytes`` whenever the notice itself does (a longer locator is never cut).

The policy has two arms that share one store and one preview format:

- **model-facing** (a ``tools/post-execute`` hook: the policy object itself, or
  ``policy.post_execute``): bounds what the model reads of a call, failures included (a
  ``run_code`` ``output-limit`` failure with a long captured output is spilled like any other
  result). It skips nested calls (``exec.parent`` set: Code Mode sub-calls never reach the model;
  the dispatch-log arm bounds their durable copy), the tools in ``exempt`` (by default ``read``
  and ``read_file``, the tools a model uses to read a spilled result back), ``Block`` decisions
  (their feedback is the policy's own text) and value replacements (whose content is rendered
  after the hook). Register it outermost so that it sees every other listener's decision:
  ``tools.on_post_execute(policy, prepend=True)``.
- **dispatch-log** (a ``tools/code-dispatch-log`` hook, ``policy.dispatch_log``, or the arm the
  system applies when ``ToolsConfig.max_inline_bytes`` is set): bounds the logged copy of each
  Code Mode sub-call, with the source label ``"dispatch"``. No tool is exempt and nested-ness is
  not a skip reason. It runs off the program's path: the program's value is never affected.

Both arms are best-effort: with no store, a store that raises, or a locator that is not a
``str``, a warning is logged and the full content is kept. Non-text content (any block that is
not ``{"type": "text", "text": str}``) and content within the cap are left unchanged.

Preview format (one text block)::

    <the first part of the full text, cut at a line end when one is near>
    …
    [Output truncated: <total> bytes in total. Full formatted result stored at: <locator>]

The full text of several text blocks is their texts joined with ``"\\n"``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypedDict

from msgspec import UNSET

from ..actors import Accept, FrozenDict, FrozenList, message_of
from ..actors._logging import get_logger
from ..registry._handle import ToolsHandle

__all__ = ["SpillPolicy", "SpillSource", "SpillStore", "is_preview_of", "spill_policy"]

_log = get_logger("dsh_tools.spill")

NOTICE_LEAD = "Full formatted result stored at: "
"""The fixed text before the locator in every spill notice."""

_SEPARATOR = "\n…\n"
"""Between a preview's prefix and its notice."""

DEFAULT_EXEMPT = ("read", "read_file")
"""Tools the model-facing arm never spills by default: the model reads spilled results with them."""


class SpillSource(TypedDict):
    """Where a spilled text came from: the tool, the call id and the arm (``label``).

    ``label`` is ``"result"`` for the model-facing arm and ``"dispatch"`` for the dispatch-log
    arm (whose ``call_id`` is the sub-call id ``<parent>:code:<n>``).
    """

    tool_name: str
    call_id: str
    label: str


class SpillStore(Protocol):
    """Saves a full text somewhere a model (or a person) can read it back.

    ``save`` returns the locator (a path, a URL, an id) as a ``str``, directly or as an
    awaitable; it may raise, which the policy logs and survives.
    """

    def save(self, text: str, source: SpillSource) -> str | Awaitable[str]:
        """Store ``text`` and return where it is."""
        ...


def _all_text(content: Any) -> list[str] | None:
    """The texts of ``content`` when every block is a text block, else None."""
    if not isinstance(content, list | tuple) or not content:
        return None
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            return None
        text = block.get("text")
        if type(text) is not str:
            return None
        texts.append(text)
    return texts


def _utf8_size(text: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: count them as their replacement would be
        return len(text.encode("utf-8", "replace"))


def _over_cap(texts: Sequence[str], cap: int) -> bool:
    chars = sum(len(t) for t in texts) + max(len(texts) - 1, 0)
    if chars > cap:
        return True  # every code point is at least one byte
    if chars * 4 <= cap:
        return False  # and at most four
    return _utf8_size("\n".join(texts)) > cap


def _prefix_within(text: str, budget: int) -> str:
    """The longest code-point-aligned prefix of ``text`` whose UTF-8 size is <= ``budget``."""
    if budget <= 0:
        return ""
    head = text[:budget]  # at most ``budget`` bytes need at most ``budget`` code points
    encoded = head.encode("utf-8", "replace")
    if len(encoded) <= budget:
        return head
    cut = encoded[:budget].decode("utf-8", "ignore")
    return head[: len(cut)]


def preview_text(text: str, locator: str, cap: int) -> str:
    """The spill block's text for ``text`` saved at ``locator``, within ``cap`` bytes when the
    notice alone fits (see the module docstring for the format)."""
    notice = f"[Output truncated: {_utf8_size(text)} bytes in total. {NOTICE_LEAD}{locator}]"
    budget = cap - _utf8_size(notice) - _utf8_size(_SEPARATOR)
    prefix = _prefix_within(text, budget)
    if not prefix:
        return notice
    line_end = prefix.rfind("\n")
    if line_end >= len(prefix) // 2:
        prefix = prefix[:line_end]  # a whole-line preview reads better when little is lost
    return prefix + _SEPARATOR + notice


def is_preview_of(shown: str, text: str) -> bool:
    """Whether ``shown`` is the spill block ``preview_text`` makes of ``text`` (saved at any
    locator, under any cap): the notice for ``text``'s size, after nothing or after a prefix
    of ``text``. A finalizer that adds to a result's own text reads a spilled text as that
    text, shortened."""
    if not shown.endswith("]"):
        return False
    notice = f"[Output truncated: {_utf8_size(text)} bytes in total. {NOTICE_LEAD}"
    if shown.startswith(notice):
        return True
    marker = _SEPARATOR + notice
    start = shown.find(marker)
    while start > 0:
        if text.startswith(shown[:start]):
            return True
        start = shown.find(marker, start + 1)
    return False


class SpillPolicy:
    """The two spill arms over one ``store`` and one cap; see the module docstring.

    ``store`` may be replaced at run time (``None`` keeps full contents, with a warning).
    """

    __slots__ = ("exempt", "max_inline_bytes", "store")

    def __init__(
        self,
        max_inline_bytes: int,
        store: SpillStore | None,
        *,
        exempt: Collection[str] = DEFAULT_EXEMPT,
    ) -> None:
        if type(max_inline_bytes) is not int:
            raise TypeError(
                "max_inline_bytes must be a positive integer, got "
                f"{type(max_inline_bytes).__name__}"
            )
        if max_inline_bytes < 1:
            raise ValueError(f"max_inline_bytes must be a positive integer, got {max_inline_bytes}")
        if store is not None and not callable(getattr(store, "save", None)):
            raise TypeError(f"store must have a save(text, source) method, got {store!r}")
        if isinstance(exempt, str):
            raise TypeError("exempt must be a collection of tool names, not a str")
        if not isinstance(exempt, Iterable):
            raise TypeError(
                f"exempt must be a collection of tool names, got {type(exempt).__name__}"
            )
        names = frozenset(exempt)
        for name in names:
            if type(name) is not str:  # it would never match a call's name
                raise TypeError(
                    f"exempt must be a collection of tool names (str), got a {type(name).__name__}"
                    f" among them: {name!r}"
                )
        self.max_inline_bytes = max_inline_bytes
        self.store = store
        self.exempt = names

    # --- the shared core -----------------------------------------------------------------------

    async def bound(
        self, content: Any, source: SpillSource, log_fields: Mapping[str, Any] | None = None
    ) -> Any:
        """``content`` itself, or the one-block preview that replaces it once its full text is
        saved. Never raises for a store's faults (they are logged as warnings, with
        ``log_fields`` such as ``token`` and ``parent`` bound besides ``call_id`` and ``tool``)."""
        texts = _all_text(content)
        if texts is None or not _over_cap(texts, self.max_inline_bytes):
            return content
        tool, call_id = source["tool_name"], source["call_id"]
        fields = dict(log_fields) if log_fields else {}
        store = self.store
        if store is None:
            _log.warning(
                f"spill: no spill store is configured; keeping the full content of {tool}",
                call_id=call_id,
                tool=tool,
                **fields,
            )
            return content
        text = "\n".join(texts)
        try:
            locator = store.save(text, source)
            if inspect.isawaitable(locator):
                locator = await locator
            if type(locator) is not str:
                raise TypeError(f"the store returned {type(locator).__name__}, not a str locator")
        except Exception as exc:
            _log.warning(
                f"spill: saving the full content of {tool} failed: {message_of(exc)}; "
                "keeping the full content",
                call_id=call_id,
                tool=tool,
                **fields,
            )
            return content
        block = FrozenDict(type="text", text=preview_text(text, locator, self.max_inline_bytes))
        return FrozenList((block,))

    # --- the model-facing arm ------------------------------------------------------------------

    async def post_execute(self, exec: Any, result: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        """The ``tools/post-execute`` arm: spill the content the model would read."""
        decision = await next()
        if exec.parent is not None or exec.name in self.exempt:
            return decision
        if type(decision) is not Accept or decision.value is not UNSET:
            return decision
        content = result.content if decision.content is UNSET else decision.content
        source = SpillSource(tool_name=exec.name, call_id=exec.call_id, label="result")
        bounded = await self.bound(
            content, source, {"agent": exec.agent, "token": exec.token.id, "parent": None}
        )
        if bounded is content:
            return decision
        return Accept(content=bounded, additional_contexts=decision.additional_contexts)

    async def __call__(self, exec: Any, result: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        """The policy object is itself the model-facing post-execute hook."""
        return await self.post_execute(exec, result, next)

    # --- the dispatch-log arm ------------------------------------------------------------------

    async def dispatch_log(self, log: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        """The ``tools/code-dispatch-log`` arm: spill the logged copy of one sub-call."""
        content = await next()
        source = self.dispatch_source(log.name, log.sub_call_id)
        return await self.bound(content, source, {"parent": log.exec.token.id})

    @staticmethod
    def dispatch_source(tool_name: str, sub_call_id: str) -> SpillSource:
        """The source of a dispatch-log spill."""
        return SpillSource(tool_name=tool_name, call_id=sub_call_id, label="dispatch")

    def install(self, tools: ToolsHandle) -> Callable[[], None]:
        """Register both arms on a tools handle (the model-facing one outermost); the returned
        function disposes both."""
        disposers = [
            tools.on_post_execute(self.post_execute, prepend=True),
            tools.on_code_dispatch_log(self.dispatch_log, prepend=True),
        ]

        def dispose() -> None:
            for disposer in reversed(disposers):
                disposer()

        return dispose


def spill_policy(
    max_inline_bytes: int,
    store: SpillStore | None,
    *,
    exempt: Collection[str] = DEFAULT_EXEMPT,
) -> SpillPolicy:
    """A spill policy bounding all-text results to ``max_inline_bytes`` UTF-8 bytes, saving
    the full text through ``store`` (see the module docstring).

    ``system.tools.on_post_execute(policy, prepend=True)`` installs the model-facing arm,
    ``system.tools.on_code_dispatch_log(policy.dispatch_log)`` the dispatch-log arm, and
    ``policy.install(system.tools)`` both.
    """
    return SpillPolicy(max_inline_bytes, store, exempt=exempt)
