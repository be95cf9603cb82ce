"""The subset of Go's text/template that `docker --format` users write: field paths, pipes,
json/index/join/println/lower/upper/len/title, method-like `.Label "k"`, range/if/else/end."""
import json
import re
import shlex

MISSING = object()


class TemplateError(Exception):
    pass


def go_str(value):
    """fmt.Sprint of a value decoded from JSON, as Go would print it."""
    if value is MISSING:
        return "<no value>"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(go_str(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_str(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def go_json(value):
    text = json.dumps(None if value is MISSING else value, separators=(",", ":"), sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


FUNCS = {
    "json": lambda v: go_json(v),
    "println": lambda *v: " ".join(go_str(x) for x in v) + "\n",
    "print": lambda *v: "".join(go_str(x) for x in v),
    "lower": lambda v: go_str(v).lower(),
    "upper": lambda v: go_str(v).upper(),
    "title": lambda v: go_str(v).title(),
    "len": lambda v: len(v),
    "join": lambda v, sep: sep.join(go_str(x) for x in v),
    "index": lambda v, *keys: _index(v, keys),
    "split": lambda v, sep: go_str(v).split(sep),
}


def _index(value, keys):
    for key in keys:
        if isinstance(value, dict):
            value = value.get(key, MISSING)
        elif isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value):
            value = value[key]
        else:
            raise TemplateError(f"error calling index: cannot index {go_str(value)} with {key!r}")
    return value


def _field(dot, path):
    value = dot
    for part in [p for p in path.split(".") if p]:
        if isinstance(value, dict):
            value = value.get(part, MISSING)
        elif value is MISSING or value is None:
            raise TemplateError(f"nil pointer evaluating .{part}")
        else:
            raise TemplateError(f"can't evaluate field {part} in type {type(value).__name__}")
    return value


def _arg(token, dot):
    if token.startswith('"') or token.startswith("`"):
        return token[1:-1]
    if re.fullmatch(r"-?\d+", token):
        return int(token)
    if token.startswith("."):
        return _field(dot, token)
    raise TemplateError(f'function "{token}" not defined')


def _command(words, dot, piped):
    head, rest = words[0], words[1:]
    args = [_arg(w, dot) for w in rest] + ([] if piped is MISSING else [piped])
    if head in FUNCS:
        try:
            return FUNCS[head](*args)
        except TypeError:
            raise TemplateError(f"wrong number of args for {head}") from None
    value = _arg(head, dot)
    if callable(value):
        return value(*args)
    if args:
        raise TemplateError(f"{head} is not a method but has arguments")
    return value


def _pipeline(text, dot):
    try:
        words = shlex.split(text.replace("|", " | "), posix=False)
    except ValueError as e:
        raise TemplateError(str(e)) from None
    value = MISSING
    while words:
        cut = words.index("|") if "|" in words else len(words)
        if cut == 0:
            raise TemplateError("missing command")
        value = _command(words[:cut], dot, value)
        words = words[cut + 1:]
    return value


def _tokens(template):
    """[('text', s) | ('action', s)] with {{- and -}} whitespace trimming applied."""
    parts = re.split(r"({{.*?}})", template, flags=re.S)
    out = []
    for part in parts:
        if part.startswith("{{") and part.endswith("}}"):
            inner = part[2:-2]
            if inner.startswith("-") and out and out[-1][0] == "text":
                out[-1] = ("text", out[-1][1].rstrip())
            out.append(("action", inner.strip("-").strip()))
            if inner.endswith("-"):
                out.append(("trim", ""))
        elif part:
            if out and out[-1][0] == "trim":
                out.pop()
                part = part.lstrip()
            out.append(("text", part))
    return [t for t in out if t[0] != "trim"]


def _parse(tokens, pos=0, stop=("end",)):
    """Build a tree: list of ('text', s) | ('expr', s) | ('range'|'if', expr, body, else_body)."""
    nodes = []
    while pos < len(tokens):
        kind, text = tokens[pos]
        word = text.split(" ", 1)[0]
        if kind == "action" and word in stop:
            return nodes, pos, word
        if kind == "action" and word in ("range", "if"):
            body, pos, ended = _parse(tokens, pos + 1, ("end", "else"))
            other = []
            if ended == "else":
                other, pos, ended = _parse(tokens, pos + 1, ("end",))
            if ended != "end":
                raise TemplateError(f"unexpected EOF in {word}")
            nodes.append((word, text[len(word):].strip(), body, other))
        elif kind == "action":
            if word in ("end", "else"):
                raise TemplateError(f"unexpected {{{{{word}}}}}")
            nodes.append(("expr", text))
        else:
            nodes.append(("text", text))
        pos += 1
    return nodes, pos, None


def _truthy(value):
    return value not in (MISSING, None, False, 0, "") and not (isinstance(value, (list, dict)) and not value)


def _run(nodes, dot, out):
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "expr":
            value = _pipeline(node[1], dot)
            out.append(value if isinstance(value, str) else go_str(value))
        elif node[0] == "if":
            _run(node[2] if _truthy(_pipeline(node[1], dot)) else node[3], dot, out)
        else:
            items = _pipeline(node[1], dot)
            seq = [items[k] for k in sorted(items)] if isinstance(items, dict) else items
            if not seq or seq is MISSING:
                _run(node[3], dot, out)
            for item in seq if isinstance(seq, list) else []:
                _run(node[2], item, out)


def render(template, dot):
    """Render `template` with `dot`; raises TemplateError with Go-like messages."""
    nodes, _, ended = _parse(_tokens(template))
    if ended is not None:
        raise TemplateError(f"unexpected {{{{{ended}}}}}")
    out = []
    _run(nodes, dot, out)
    return "".join(out)


def docker_format(fmt):
    """Docker's preformat: strip 'table', turn literal \\t and \\n into real ones."""
    table = fmt.startswith("table")
    body = fmt[len("table"):] if table else fmt
    return table, body.strip(" ").replace("\\t", "\t").replace("\\n", "\n")


def tabwrite(lines, minwidth=10, padding=3):
    """Go tabwriter(minwidth 10, padding 3) as docker's tables use it."""
    rows = [line.split("\t") for line in lines]
    widths = {}
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths.get(i, 0), len(cell) + padding, minwidth)
    return ["".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + row[-1] for row in rows]
