"""How ``fronde … --help`` reads: click's plain layout and metavars over typer.

Typer 0.29 writes a value's Python type where click wrote a metavar (``--port <int>``,
``--help <bool>``, ``profile <str>``, ``--mode <list[baseline|...]>``), and its rich
layout takes a ``[default: 8080]`` written in a help text for markup and drops it.
:func:`fronde_typer` builds a typer app that keeps typer's parsing and gives help in
click's plain layout (no markup, so a written ``[default: ...]`` stays), with click's
metavars (``INTEGER``, ``TEXT``, ``PATH``, ``[a|b]`` for a choice, ``PROFILE`` for an
argument, none for a flag), and each command's whole first sentence in a list of
commands, wrapped rather than cut at 80 columns.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args, get_origin

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["fronde_typer"]

TYPE_NAMES: dict[Any, str] = {int: "INTEGER", float: "FLOAT", str: "TEXT", Path: "PATH"}
"""Metavar of each value type, as click names them."""

SHORT_HELP_CHARS = 1000
"""Limit for a command's line in a list of commands: its whole first sentence."""


def option_metavar(param: Any) -> str | None:
    """Click's metavar for a typer option, or None to leave typer's (a flag, a type not known).

    Args:
        param: a typer option; only typer >= 0.29 carries ``type_descriptor``, older
            ones are click's own options, which need nothing.
    """
    desc = getattr(param, "type_descriptor", None)
    if desc is None or getattr(param, "is_flag", False):
        return None
    choices: Sequence[Any] | None = desc.choices
    if choices:
        return "[" + "|".join(str(c) for c in choices) + "]"
    kind = desc.annotation
    if get_origin(kind) is list:
        (kind,) = get_args(kind)
    return TYPE_NAMES.get(kind)


def _argument_name(param: Any) -> str:
    """An argument as click shows it: its metavar, else its name in capitals."""
    return str(param.metavar or (param.name or "").upper())


def _whole_first_sentence(command: Any) -> None:
    command.short_help = command.short_help or command.get_short_help_str(SHORT_HELP_CHARS)


class _Command(TyperCommand):
    """A command with click's metavars (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None and param.param_type_name == "option":
                param.metavar = option_metavar(param)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """``[OPTIONS] NAME [NAME]``: a required argument bare, an optional one in brackets."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The Arguments and Options sections, an argument named without typer's type."""
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                sections["Arguments"].append((_argument_name(param), record[1]))
            else:
                sections["Options"].append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class _Group(TyperGroup):
    """A group whose list of commands shows each one's whole first sentence."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            _whole_first_sentence(command)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The list of commands, wrapped between words only.

        Click's wrapper also breaks after a hyphen, which cut an option named in a
        command's line in two (``--max-`` / ``tokens``).
        """
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(SHORT_HELP_CHARS)))
        if not rows:
            return
        first = max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            indent = " " * formatter.current_indent
            width = max((formatter.width or 80) - len(indent) - first - 2, 20)
            for name, text in rows:
                lines = textwrap.wrap(
                    text, width, break_on_hyphens=False, break_long_words=False
                ) or [""]
                formatter.write(f"{indent}{name:<{first}}  {lines[0]}\n")
                for line in lines[1:]:
                    formatter.write(f"{indent}{'':<{first}}  {line}\n")


class _Typer(typer.Typer):
    """A typer app whose commands are :class:`_Command` unless told otherwise."""

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any
    ) -> Callable[[Any], Any]:
        """Register a command, as :meth:`typer.Typer.command` does."""
        return super().command(name, cls=cls or _Command, **kwargs)


def fronde_typer(help_text: str) -> typer.Typer:
    """A typer app (or sub-app) with Fronde's help (see the module docstring).

    Args:
        help_text: the app's help, shown above its list of commands.
    """
    return _Typer(
        cls=_Group,
        help=help_text,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
