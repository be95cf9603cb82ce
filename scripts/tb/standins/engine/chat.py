"""The model's side of /v1/chat/completions: a deterministic "generation" and the parsers.

K3 always thinks; reasoning_effort low|medium|high sets how long (unset = max). The raw output
is `<think>THINKING</think>ANSWER` plus, when it calls a tool, K3's tool-call markup. Only the
kimi_k3 reasoning parser splits the thinking into reasoning_content; only the kimi_k3 tool
parser turns the markup into tool_calls. Anything else (kimi_k2 included) leaves it all in
content, as the guide describes. Tokens are whitespace-separated words.
"""
import hashlib
import json

EFFORT_TOKENS = {"low": 16, "medium": 48, "high": 120, None: 200}
K3_PARSERS = {"kimi_k3"}
THOUGHTS = [
    "The user wants a concise and correct answer.", "Let me recall the relevant facts first.",
    "Expert parallelism spreads the routed experts across GPUs.",
    "Each token only visits a few experts, so memory matters more than compute here.",
    "I should check the arithmetic before answering.", "Two sentences should be enough.",
    "Consider what the user will do with this answer.", "Keep the wording plain.",
]


class BadRequest(Exception):
    def __init__(self, message, status=400, kind="BadRequestError", param=None):
        super().__init__(message)
        self.message, self.status, self.kind, self.param = message, status, kind, param


def words(text):
    return text.split()


def message_text(message):
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def prompt_tokens(messages, tools):
    count = sum(len(words(message_text(m))) + 4 for m in messages)
    return count + (len(words(json.dumps(tools))) if tools else 0)


def thinking(prompt, n_tokens):
    seed = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    out, i = [], 0
    while len(out) < n_tokens:
        out += words(THOUGHTS[(seed + i) % len(THOUGHTS)])
        i += 1
    return " ".join(out[:n_tokens])


def answer(prompt):
    topic = " ".join(words(prompt)[:12]) or "your message"
    return (f"Kimi K3 (testbed stand-in engine) answers: {topic}. This reply is generated "
            "deterministically so tests can compare it.")


def tool_arguments(tool):
    params = (tool.get("function") or {}).get("parameters") or {}
    props = params.get("properties") or {}
    names = params.get("required") or list(props)
    sample = {"string": "Paris", "integer": 1, "number": 1.0, "boolean": True,
              "array": [], "object": {}}
    args = {}
    for name in names:
        spec = props.get(name) or {}
        args[name] = (spec.get("enum") or [None])[0] or sample.get(spec.get("type"), "example")
    return args


def chosen_tool(body):
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    if body["messages"][-1].get("role") == "tool" and not isinstance(choice, dict):
        return None  # a tool result came back: the model answers with it
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        for tool in tools:
            if (tool.get("function") or {}).get("name") == name:
                return tool
        raise BadRequest(f"Tool '{name}' was requested in tool_choice but is not in tools")
    return tools[0]


def k3_tool_markup(name, args):
    # K3's own markers, which the K2 tool parser does not recognise.
    return (f"<|k3_tool_calls|><|k3_call|>functions.{name}:0<|k3_args|>{json.dumps(args)}"
            "<|/k3_call|><|/k3_tool_calls|>")


def history_note(messages):
    """K3 expects every earlier assistant message back whole, reasoning included. A real K3
    just answers worse without it; the stand-in says so in its answer, so tests can tell."""
    earlier = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if not earlier:
        return ""
    missing = [str(n) for n, m in enumerate(earlier, 1)
               if not (m.get("reasoning_content") or m.get("reasoning"))]
    if missing:
        return (f" [stand-in: reasoning_content missing from earlier assistant message(s) "
                f"{', '.join(missing)} of {len(earlier)}]")
    return f" [stand-in: all {len(earlier)} earlier assistant message(s) kept reasoning_content]"


def image_parts(messages):
    """The OpenAI image_url content parts of every message."""
    return [p for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list)
            for p in m["content"] if isinstance(p, dict) and p.get("type") == "image_url"]


def image_note(messages):
    """Says in the answer that the images reached the model, so a test can tell an answer
    that saw them from one that was given the text alone (SGLang without its vision tower)."""
    n = len(image_parts(messages))
    return f" [stand-in: saw {n} image(s)]" if n else ""


class Generation:
    """One request's output after the engine's parsers, plus its usage."""

    def __init__(self, body, reasoning_parser, tool_parser, max_len, sees_images=True):
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list", param="messages")
        effort = body.get("reasoning_effort")
        if effort not in EFFORT_TOKENS:
            raise BadRequest(f"reasoning_effort must be one of low, medium, high; got {effort!r}",
                             param="reasoning_effort")
        prompt = message_text(messages[-1])
        self.prompt_tokens = prompt_tokens(messages, body.get("tools"))
        limit = self._max_tokens(body, max_len)
        think = words(thinking(prompt, EFFORT_TOKENS[effort]))
        reply = words(answer(prompt) + history_note(messages)
                      + (image_note(messages) if sees_images else ""))
        tool = chosen_tool(body)
        self.finish = "stop"
        if len(think) + len(reply) > limit:
            self.finish = "length"
            think, reply, tool = think[:limit], reply[:max(0, limit - len(think))], None
        self._split(think, reply, tool, reasoning_parser, tool_parser)

    def _max_tokens(self, body, max_len):
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if limit is None:
            return max(1, max_len - self.prompt_tokens)
        if not isinstance(limit, int) or limit < 1:
            raise BadRequest("max_tokens must be a positive integer", param="max_tokens")
        if self.prompt_tokens + limit > max_len:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {max_len}"
                f" tokens. You requested a total of {self.prompt_tokens + limit} tokens: "
                f"{self.prompt_tokens} tokens from the input messages and {limit} tokens for "
                "the completion. Please reduce the number of tokens in the input messages or "
                "the completion to fit within the limit.")
        return limit

    def _split(self, think, reply, tool, reasoning_parser, tool_parser):
        self.tool_calls = None
        markup = ""
        if tool is not None:  # the model calls the tool instead of answering
            name = tool["function"]["name"]
            args = tool_arguments(tool)
            reply = []
            if tool_parser in K3_PARSERS:
                self.tool_calls = [{"id": f"functions.{name}:0", "index": 0, "type": "function",
                                    "function": {"name": name, "arguments": json.dumps(args)}}]
                self.finish = "tool_calls"
            else:
                markup = k3_tool_markup(name, args)
        generated = len(think) + len(reply) + len(words(markup))
        if reasoning_parser in K3_PARSERS:
            self.reasoning = " ".join(think)
            self.content = (" ".join(reply) + markup) or None
            self.reasoning_tokens = len(think)
        else:
            self.reasoning = None
            self.content = f"<think>{' '.join(think)}</think>{' '.join(reply)}{markup}"
            self.reasoning_tokens = 0
        # As the real engines count: completion_tokens is every generated token, reasoning
        # included; completion_tokens_details.reasoning_tokens says how many of them were
        # reasoning (OpenAI's CompletionUsage: the details are a breakdown of completion_tokens).
        self.completion_tokens = generated

    def usage(self):
        # SGLang's UsageInfo (srt/entrypoints/openai/protocol.py) also has a top-level
        # `reasoning_tokens`: the same count, again a part of completion_tokens.
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "reasoning_tokens": self.reasoning_tokens,
                "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
                "prompt_tokens_details": None}
