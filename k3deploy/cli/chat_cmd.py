"""k3deploy chat: the endpoint in a terminal (no message) or once (a message, for scripts).

Reasoning is streamed dimmed, content plain; --json prints one document at the end (the whole
history, reasoning_content and tool_calls kept, and each request's usage).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

from rich.console import Console

from k3deploy.core.jsonvalue import JSONable
from k3deploy.serving import openai_client
from k3deploy.serving.chat_session import DEFAULT_EFFORT, Conversation, effort_of

EFFORT_NOTE = ("reasoning_effort: {effort} (the default; --effort medium|high for harder "
               "questions. Left unset K3 thinks at max effort: at the guide's ~6 tok/s on "
               "4x8 H100 that is a minute instead of seconds)")
EXIT_WORDS = {"/exit", "/quit", "exit", "quit"}


class Display:
    """Where each kind of text goes: reasoning and tool lines dimmed, content plain."""

    def __init__(self, quiet: bool, one_shot: bool):
        self.out = Console(highlight=False, soft_wrap=True)
        # One-shot: stdout carries the answer alone, so scripts can use it as it is.
        self.side = Console(stderr=True, highlight=False, soft_wrap=True) if one_shot else self.out
        self.quiet = quiet
        self.last: str | None = None   # the kind of text shown last in this turn

    def __call__(self, kind: str, text: str) -> None:
        if self.quiet:
            return
        if kind != self.last and self.last is not None:
            self._console(self.last).print()
        console = self._console(kind)
        style = None if kind == "content" else "dim"
        console.print(text if kind != "tool" else f"[tool] {text}", style=style, end="",
                      markup=False)
        self.last = kind

    def _console(self, kind: str) -> Console:
        return self.out if kind == "content" else self.side

    def end_turn(self) -> None:
        if not self.quiet and self.last is not None:
            self._console(self.last).print()
        self.last = None


def run_chat(inv_path: str, message: str | None, *, effort: str | None, json_out: bool,
             tools: bool, state_dir: str | None, group: str | None = None) -> int:
    import openai

    from k3deploy.cli.fleet_cmd import endpoint_of
    target, inv, _router = endpoint_of(inv_path, state_dir, group)
    chosen = effort_of(effort) if effort else DEFAULT_EFFORT
    if effort is None:
        Console(stderr=True, highlight=False, soft_wrap=True).print(EFFORT_NOTE.format(effort=chosen),
                                                    style="dim", markup=False)
    conv = Conversation(openai_client.client(target), target.model, chosen, inv, tools)
    display = Display(quiet=json_out, one_shot=message is not None)
    try:
        for text in ([message] if message is not None else _user_lines(display)):
            conv.ask(text, display)
            display.end_turn()
    except openai.OpenAIError as err:
        raise openai_client.explain(err, target) from None
    except KeyboardInterrupt:   # Ctrl-C mid-answer leaves the chat, not a traceback
        display.end_turn()
        return 130
    if json_out:
        print(json.dumps(_document(conv, target, effort is None), indent=1))
    return 0


def _user_lines(display: Display) -> Iterator[str]:
    interactive = sys.stdin.isatty()
    if interactive:
        display.out.print("k3deploy chat: empty line or /exit to leave", style="dim")
    while True:
        try:
            line = display.out.input("[bold]you>[/] ") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            return
        if not interactive and not line:
            return
        line = line.strip()
        if line in EXIT_WORDS or (interactive and not line):
            return
        if line:
            yield line


def _document(conv: Conversation, target: openai_client.Target,
              effort_default: bool) -> dict[str, JSONable]:
    last = conv.messages[-1] if conv.messages else {}
    return {"endpoint": target.base_url, "model": target.model,
            "effort": conv.effort, "effort_default": effort_default,
            "content": last.get("content"), "reasoning_content": last.get("reasoning_content"),
            "messages": conv.messages, "requests": conv.replies}
