"""PostgreSQL commands that are not queries, read from DuckDB's tokenizer (never from patterns).

Drivers and BI tools send session commands on every connection (`SET extra_float_digits = 3`,
`SHOW transaction isolation level`, `BEGIN READ ONLY`, `SAVEPOINT`, `DISCARD ALL` ...), declare
cursors (`DECLARE c CURSOR FOR ...`, then `FETCH FORWARD 2000 FROM c`) and read results with
`COPY (query) TO STDOUT`. None of these reaches DuckDB: the server answers them from the
session's state. This module only recognises them: DuckDB's tokenizer (the PostgreSQL scanner,
linear in the text, in C++) splits the text into tokens, and the command is read from the token
list, so quoting, comments and case never confuse it, and no text is rewritten.

`split` cuts a query string into statements at top-level semicolons the same way, so a string
DuckDB's parser cannot read (a PostgreSQL-only command) still splits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

_STRING = duckdb.token_type.string_const
_COMMENT = duckdb.token_type.comment
_IDENT = duckdb.token_type.identifier
_KEYWORD = duckdb.token_type.keyword
_NUMBER = duckdb.token_type.numeric_const


class CommandError(ValueError):
    """A command that is recognised but malformed or not allowed; carries a SQLSTATE."""

    def __init__(self, message: str, sqlstate: str = "42601") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class Token:
    text: str  # as written (quotes included for strings and quoted identifiers)
    kind: object
    start: int
    end: int

    @property
    def word(self) -> str:
        """An unquoted word in lower case; a quoted identifier as written inside its quotes."""
        if self.kind == _IDENT and self.text.startswith('"'):
            return self.text[1:-1].replace('""', '"')
        return self.text.lower()

    @property
    def value(self) -> str:
        """A string constant's value ('it''s' -> it's; E'' escapes are kept as written)."""
        t = self.text
        if self.kind == _STRING and t.endswith("'"):
            body = t[t.index("'") + 1 : -1]
            return body.replace("''", "'")
        if self.kind == _STRING and t.startswith("$"):
            tag = t[: t.index("$", 1) + 1]
            return t[len(tag) : -len(tag)]
        return self.word


def tokens(text: str) -> list[Token]:
    """The text's tokens, comments dropped (raises CommandError where the scanner cannot read it)."""
    try:
        raw = duckdb.tokenize(text)
    except (duckdb.Error, RuntimeError) as exc:
        raise CommandError(str(exc).splitlines()[0] if str(exc) else "cannot read the statement") from exc
    out = []
    for i, (start, kind) in enumerate(raw):
        end = raw[i + 1][0] if i + 1 < len(raw) else len(text)
        piece = text[start:end].rstrip()
        if kind == _COMMENT:
            continue
        out.append(Token(piece, kind, start, start + len(piece)))
    return out


def split(text: str) -> list[str]:
    """The statements of a query string, cut at top-level semicolons (empty ones dropped)."""
    try:
        toks = tokens(text)
    except CommandError:
        return [text] if text.strip() else []
    parts, start = [], 0
    for tok in toks:
        if tok.kind != _STRING and tok.kind != _IDENT and tok.text.startswith(";"):
            parts.append(text[start : tok.start])
            start = tok.start + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if _has_content(p)]


def _has_content(piece: str) -> bool:
    if not piece.strip():
        return False
    try:
        return bool(tokens(piece))
    except CommandError:
        return True


@dataclass(frozen=True)
class Command:
    """A recognised non-query command. `args` are strings (they travel as JSON)."""

    kind: str
    text: str
    args: tuple[str, ...] = ()


# SHOW's multi-word forms and the parameter each one shows.
_SHOW_PHRASES = {
    ("transaction", "isolation", "level"): "transaction_isolation",
    ("time", "zone"): "timezone",
    ("session", "authorization"): "session_authorization",
}
_SET_NOOP_FIRST = {"transaction", "names", "role", "constraints"}
_BEGIN_WORDS = {"begin", "start"}
_COMMIT_WORDS = {"commit", "end"}
_ROLLBACK_WORDS = {"rollback", "abort"}
FETCH_DIRECTIONS = {"next", "prior", "first", "last", "absolute", "relative", "all", "forward", "backward"}


def command(text: str) -> Command | None:
    """The non-query command `text` is, or None for anything else (a query for DuckDB)."""
    try:
        toks = tokens(text)
    except CommandError:
        return None
    while toks and toks[-1].text == ";":
        toks.pop()
    if not toks or toks[0].kind not in (_KEYWORD, _IDENT):
        return None
    first = toks[0].word
    reader = _READERS.get(first)
    return reader(text, toks) if reader is not None else None


def _words(toks: list[Token]) -> list[str]:
    return [t.word for t in toks]


def _value_text(text: str, toks: list[Token]) -> str:
    """A SET value as PostgreSQL shows it: one string constant unquoted, a list joined by ', '."""
    items: list[list[Token]] = [[]]
    for t in toks:
        if t.text == "," and t.kind != _STRING:
            items.append([])
        else:
            items[-1].append(t)
    shown = []
    for item in items:
        if len(item) == 1 and item[0].kind == _STRING:
            shown.append(item[0].value)
        elif item:
            shown.append(text[item[0].start : item[-1].end])
    return ", ".join(shown)


def _set(text: str, toks: list[Token]) -> Command:
    words = _words(toks)
    i = 1
    if (
        len(words) > i
        and words[i] in ("session", "local")
        and not (
            len(words) > i + 1
            and words[i] == "session"
            and words[i + 1] in ("characteristics", "authorization")
        )
    ):
        i += 1
    rest = words[i:]
    if not rest:
        raise CommandError("syntax error at end of input")
    if rest[0] == "session" and len(rest) > 1 and rest[1] in ("characteristics", "authorization"):
        return Command("set_noop", text)
    if rest[0] in _SET_NOOP_FIRST:
        return Command("set_noop", text)
    if rest[:2] == ["time", "zone"]:
        value = _value_text(text, toks[i + 2 :])
        return Command("set", text, ("timezone", "UTC" if value.lower() == "local" else value))
    # name {TO | =} value[, ...]; the name may be dotted (a custom setting)
    j = i
    name_parts = [toks[j].word]
    j += 1
    while j + 1 < len(toks) and toks[j].text == ".":
        name_parts.append(toks[j + 1].word)
        j += 2
    if j >= len(toks) or toks[j].word not in ("to", "="):
        raise CommandError(f'syntax error at or near "{toks[j].text if j < len(toks) else ""}"')
    value = _value_text(text, toks[j + 1 :])
    if not value:
        raise CommandError("syntax error at end of input")
    return Command("set", text, (".".join(name_parts), value))


def _reset(text: str, toks: list[Token]) -> Command:
    words = _words(toks)[1:]
    if (words[:1] == ["session"] and words[1:2] == ["authorization"]) or words[:1] == ["role"]:
        return Command("set_noop", text)
    if words[:2] == ["time", "zone"]:
        return Command("reset", text, ("timezone",))
    if words[:3] == ["transaction", "isolation", "level"]:
        return Command("reset", text, ("transaction_isolation",))
    if not words:
        raise CommandError("syntax error at end of input")
    return Command("reset", text, (".".join(w for w in words if w != "."),))


def _show(text: str, toks: list[Token]) -> Command | None:
    words = _words(toks)[1:]
    if not words:
        raise CommandError("syntax error at end of input")
    phrase = _SHOW_PHRASES.get(tuple(words))
    if phrase is not None:
        return Command("show", text, (phrase,))
    if words in (["tables"], ["all", "tables"], ["databases"]) or words[0] in ("tables", "databases"):
        return None  # DuckDB's own SHOW TABLES: a query
    if len(words) == 1 or all(w == "." for w in words[1::2]):
        return Command("show", text, (".".join(w for w in words if w != "."),))
    return None


def _begin(text: str, toks: list[Token]) -> Command:
    words = _words(toks)
    if words[0] == "start" and words[1:2] != ["transaction"]:
        raise CommandError(f'syntax error at or near "{toks[1].text if len(toks) > 1 else "start"}"')
    return Command("begin", text)


def _commit(text: str, toks: list[Token]) -> Command:
    return Command("commit", text)


def _rollback(text: str, toks: list[Token]) -> Command:
    words = [w for w in _words(toks)[1:] if w not in ("work", "transaction")]
    if words[:1] == ["to"]:
        name = [w for w in words[1:] if w != "savepoint"]
        if len(name) != 1:
            raise CommandError("syntax error in ROLLBACK TO SAVEPOINT")
        return Command("rollback_to", text, (name[0],))
    if words and words[0] == "prepared":
        raise CommandError("prepared transactions are not supported", "0A000")
    return Command("rollback", text)


def _savepoint(text: str, toks: list[Token]) -> Command:
    if len(toks) != 2:
        raise CommandError("syntax error in SAVEPOINT")
    return Command("savepoint", text, (toks[1].word,))


def _release(text: str, toks: list[Token]) -> Command:
    words = [w for w in _words(toks)[1:] if w != "savepoint"]
    if len(words) != 1:
        raise CommandError("syntax error in RELEASE SAVEPOINT")
    return Command("release", text, (words[0],))


def _discard(text: str, toks: list[Token]) -> Command:
    words = _words(toks)[1:]
    if words not in (["all"], ["plans"], ["sequences"], ["temp"], ["temporary"]):
        raise CommandError("syntax error in DISCARD")
    return Command("discard", text, (words[0],))


def _deallocate(text: str, toks: list[Token]) -> Command:
    words = [t for t in toks[1:] if t.word != "prepare"]
    if len(words) != 1:
        raise CommandError("syntax error in DEALLOCATE")
    return Command("deallocate", text, ("ALL" if words[0].word == "all" else words[0].word,))


def _listen(text: str, toks: list[Token]) -> Command:
    return Command("noop", text, (toks[0].word.upper(),))


def _close(text: str, toks: list[Token]) -> Command:
    if len(toks) != 2:
        raise CommandError("syntax error in CLOSE")
    return Command("close", text, ("ALL" if toks[1].word == "all" else toks[1].word,))


def _declare(text: str, toks: list[Token]) -> Command:
    """DECLARE name [BINARY] [ASENSITIVE | INSENSITIVE] [[NO] SCROLL] CURSOR [{WITH|WITHOUT} HOLD]
    FOR query"""
    if len(toks) < 4:
        raise CommandError("syntax error in DECLARE")
    name = toks[1].word
    binary = hold = False
    i = 2
    while i < len(toks) and toks[i].word != "for":
        w = toks[i].word
        if w == "binary":
            binary = True
        elif w == "with" and i + 1 < len(toks) and toks[i + 1].word == "hold":
            hold = True
        elif w not in ("asensitive", "insensitive", "no", "scroll", "cursor", "without", "hold"):
            raise CommandError(f'syntax error at or near "{toks[i].text}"')
        i += 1
    if i >= len(toks) - 1 or "cursor" not in _words(toks[2:i]):
        raise CommandError("syntax error in DECLARE: expected CURSOR ... FOR query")
    return Command(
        "declare", text, (name, "1" if binary else "0", "1" if hold else "0", text[toks[i + 1].start :])
    )


def _fetch(text: str, toks: list[Token]) -> Command:
    """FETCH/MOVE [direction] [FROM | IN] name -> (name, direction, count)."""
    body = toks[1:]
    if not body:
        raise CommandError(f"syntax error in {toks[0].word.upper()}")
    name = body[-1].word
    words = body[:-1]
    if words and words[-1].word in ("from", "in"):
        words = words[:-1]
    merged: list[Token] = []  # a sign and the number after it are one count
    for t in words:
        if merged and merged[-1].text in ("-", "+") and t.kind == _NUMBER:
            sign = merged.pop()
            t = Token(sign.text + t.text, _NUMBER, sign.start, t.end)
        merged.append(t)
    words = merged
    direction, count = "forward", "1"
    w = [t.word for t in words]

    def number(t: Token) -> str:
        if t.kind != _NUMBER and not (t.text.lstrip("+-").isdigit()):
            raise CommandError(f'syntax error at or near "{t.text}"')
        return str(int(t.text))

    if not w:
        pass
    elif len(w) == 1 and w[0] in ("next", "prior", "first", "last", "all", "forward", "backward"):
        direction = {"next": "forward", "prior": "backward"}.get(w[0], w[0])
        count = "all" if w[0] == "all" else "1"
        if w[0] == "all":
            direction = "forward"
    elif len(w) == 1:
        direction, count = "forward", number(words[0])
    elif w[0] in ("forward", "backward") and len(w) == 2:
        direction, count = w[0], "all" if w[1] == "all" else number(words[1])
    elif w[0] in ("absolute", "relative") and len(w) == 2:
        direction, count = w[0], number(words[1])
    elif len(w) == 2 and w[0] in ("-", "+"):
        direction, count = "forward", number(Token(w[0] + w[1], _NUMBER, 0, 0))
    else:
        raise CommandError(f"syntax error in {toks[0].word.upper()}")
    return Command(toks[0].word, text, (name, direction, count))


_COPY_OPTIONS = {"format", "delimiter", "null", "header", "quote", "escape", "force_quote", "encoding"}


def _copy(text: str, toks: list[Token]) -> Command:
    """COPY (query) TO STDOUT [[WITH] (options) | legacy options]; COPY table [(cols)] TO STDOUT.

    args: (query, options as JSON). Anything else (a file, FROM STDIN, PROGRAM) is refused."""
    i = 1
    if i < len(toks) and toks[i].text == "(":
        depth, j = 0, i
        while j < len(toks):
            if toks[j].text == "(":
                depth += 1
            elif toks[j].text == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= len(toks):
            raise CommandError("syntax error in COPY: unbalanced parentheses")
        query = text[toks[i + 1].start : toks[j].start].strip()
        i = j + 1
    else:
        j = i
        while j < len(toks) and toks[j].word not in ("to", "from", "("):
            j += 1
        table = text[toks[i].start : toks[j - 1].end] if j > i else ""
        columns = "*"
        if j < len(toks) and toks[j].text == "(":
            k = j
            while k < len(toks) and toks[k].text != ")":
                k += 1
            columns = text[toks[j + 1].start : toks[k - 1].end] if k > j + 1 else "*"
            j = k + 1
        if not table:
            raise CommandError("syntax error in COPY")
        query = f"SELECT {columns} FROM {table}"
        i = j
    if i >= len(toks) or toks[i].word not in ("to", "from"):
        raise CommandError("syntax error in COPY: expected TO STDOUT")
    if toks[i].word == "from":
        raise CommandError("COPY FROM is not allowed: the catalog is read-only", "42501")
    if i + 1 >= len(toks) or toks[i + 1].word != "stdout":
        raise CommandError(
            "COPY to a file or program is not allowed: the catalog has no file access "
            "(dumpcat serve answers COPY (query) TO STDOUT)",
            "42501",
        )
    options = _copy_options(toks[i + 2 :])
    return Command("copy", text, (query, json.dumps(options)))


def _copy_options(toks: list[Token]) -> dict[str, str]:
    opts: dict[str, str] = {}
    if toks and toks[0].word == "with":
        toks = toks[1:]
    if toks and toks[0].text == "(":
        if toks[-1].text != ")":
            raise CommandError("syntax error in COPY options")
        items: list[list[Token]] = [[]]
        for t in toks[1:-1]:
            if t.text == ",":
                items.append([])
            else:
                items[-1].append(t)
        for item in items:
            if not item:
                continue
            key = item[0].word
            if key not in _COPY_OPTIONS:
                raise CommandError(f'option "{key}" not recognized', "42601")
            opts[key] = item[1].value if len(item) > 1 else "true"
        return _checked(opts)
    # the pre-9.0 syntax: BINARY | DELIMITER [AS] 'd' | NULL [AS] 'n' | CSV [HEADER] [QUOTE ...]
    i = 0
    while i < len(toks):
        w = toks[i].word
        if w == "binary":
            opts["format"] = "binary"
        elif w == "csv":
            opts["format"] = "csv"
        elif w == "header":
            opts["header"] = "true"
        elif w in ("delimiter", "null", "quote", "escape"):
            i += 1
            if i < len(toks) and toks[i].word == "as":
                i += 1
            if i >= len(toks):
                raise CommandError("syntax error in COPY options")
            opts[w] = toks[i].value
        elif w == "force":
            opts["force_quote"] = "*"
            i = len(toks)
        else:
            raise CommandError(f'syntax error at or near "{toks[i].text}"')
        i += 1
    return _checked(opts)


def _checked(opts: dict[str, str]) -> dict[str, str]:
    fmt = opts.get("format", "text").lower()
    if fmt not in ("text", "csv", "binary"):
        raise CommandError(f'COPY format "{fmt}" not recognized', "22023")
    opts["format"] = fmt
    for key in ("delimiter", "quote", "escape"):
        if key in opts and len(opts[key].encode()) != 1:
            raise CommandError(f"COPY {key} must be a single one-byte character", "0A000")
    if "header" in opts:
        opts["header"] = "true" if opts["header"].lower() in ("true", "on", "1", "match") else "false"
    return opts


def _create(text: str, toks: list[Token]) -> Command | None:
    """CREATE [OR REPLACE] {TEMP | TEMPORARY} VIEW name [(columns)] AS query: a view of this session
    only (args: name, query, or_replace, columns). Anything else CREATE is a query for the guard to
    refuse."""
    words = _words(toks)
    i = 1
    replace = words[1:3] == ["or", "replace"]
    if replace:
        i = 3
    if i >= len(words) or words[i] not in ("temp", "temporary") or words[i + 1 : i + 2] != ["view"]:
        return None
    i += 2
    if i >= len(toks):
        raise CommandError("syntax error in CREATE VIEW")
    name = toks[i].word
    i += 1
    columns = ""
    if i < len(toks) and toks[i].text == "(":
        j = i
        while j < len(toks) and toks[j].text != ")":
            j += 1
        columns = ",".join(t.word for t in toks[i + 1 : j] if t.text != ",")
        i = j + 1
    if i >= len(toks) - 1 or toks[i].word != "as":
        raise CommandError("syntax error in CREATE VIEW: expected AS query")
    return Command("create_view", text, (name, text[toks[i + 1].start :], "1" if replace else "0", columns))


def _drop(text: str, toks: list[Token]) -> Command | None:
    """DROP VIEW [IF EXISTS] name [, ...] [CASCADE | RESTRICT] (args: if_exists, names...): the
    server drops this session's views and refuses any other DROP."""
    words = _words(toks)
    if words[1:2] != ["view"]:
        return None
    i = 2
    exists = words[2:4] == ["if", "exists"]
    if exists:
        i = 4
    names = [t.word for t in toks[i:] if t.text != "," and t.word not in ("cascade", "restrict")]
    if not names:
        raise CommandError("syntax error at end of input")
    return Command("drop_view", text, ("1" if exists else "0", *names))


_READERS = {
    "set": _set,
    "reset": _reset,
    "show": _show,
    "begin": _begin,
    "start": _begin,
    "commit": _commit,
    "end": _commit,
    "rollback": _rollback,
    "abort": _rollback,
    "savepoint": _savepoint,
    "release": _release,
    "discard": _discard,
    "deallocate": _deallocate,
    "listen": _listen,
    "unlisten": _listen,
    "notify": _listen,
    "close": _close,
    "declare": _declare,
    "fetch": _fetch,
    "move": _fetch,
    "copy": _copy,
    "create": _create,
    "drop": _drop,
}
