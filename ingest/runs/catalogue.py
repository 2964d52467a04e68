"""The hook catalogue's rules: what an operator's entry may say, what a tenant's
parameters must fit, and how parameters reach a hook's process.

A tenant never chooses code. Platform operators define the entries (``HookTemplate``):
the image, the argument list, the fixed environment, resources, the time limit and the
parameters a tenant may fill, each declared with its type and bounds. A tenant's hook
names an entry and gives values. Values reach the process only as data: a ``{name}``
placeholder inside one argument is replaced by the value within that argument (never
split, never read by a shell), and every parameter is also in the environment as
``HOOK_PARAM_<NAME>``.

Everything here is pure: the admin's forms call it when an entry or a hook is saved,
and ``ingest.runs.hooks`` calls it again before every launch, so that an entry changed,
disabled or withdrawn after a hook was saved stops that hook instead of running it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import PurePosixPath
from typing import Any, TypeGuard

import regex

from ingest import conf

TYPES = ("string", "integer", "boolean", "choice")
PARAMETER_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Set by the pipeline for every hook; an entry's environment cannot shadow them.
RESERVED_ENV_PREFIXES = ("HOOK_PARAM_", "INGEST_")
# ``{{`` and ``}}`` are literal braces; ``{name}`` is a parameter's value.
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
# Programs that would read an argument as code, or run an argument as a program of its
# own (sudo, timeout, nice …): a parameter given to one would be code, not data, so an
# entry's command never starts with one. Matched on the program's name without a
# version suffix ("bash5.2" is bash).
SHELLS = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "zsh",
        "ksh",
        "mksh",
        "ash",
        "fish",
        "csh",
        "tcsh",
        "busybox",
        "toybox",
        "env",
        "xargs",
        "eval",
        "exec",
        "command",
        "builtin",
        "sudo",
        "su",
        "doas",
        "pkexec",
        "runuser",
        "setpriv",
        "chroot",
        "nohup",
        "nice",
        "ionice",
        "chrt",
        "taskset",
        "timeout",
        "setsid",
        "stdbuf",
        "strace",
        "ltrace",
        "flock",
        "time",
        "unshare",
        "nsenter",
        "firejail",
        "bwrap",
        "systemd-run",
        "watch",
        "parallel",
        "ssh",
        "script",
    }
)
# Interpreters: every argument up to and including the script (or the code after -c,
# -e …, or the module after -m) is the interpreter's own, since an option there may
# load code (node --require, perl -M, ruby -r, python -m) and the script is code. A
# parameter may only follow the script, as its argument. awk and sed read their
# program (sed's ``e`` command runs a shell) the same way.
INTERPRETER = re.compile(
    r"(python|pypy|perl|ruby|node|nodejs|php|lua|luajit|rscript|r|tclsh|wish|deno|bun|pwsh"
    r"|powershell|julia|java|jshell|groovy|guile|racket|erl|escript|elixir|awk|gawk|mawk"
    r"|nawk|sed|gsed)[0-9.]*"
)
# An option whose next argument is code or a program, in any program (python -c, perl
# -e, node --eval, find -exec, git -c); glued to it too (-c…, --eval=…).
CODE_OPTIONS = frozenset({"-c", "-e", "--eval", "--command", "--exec", "-exec", "-execdir", "-ok", "-okdir"})
# An interpreter's options whose next argument is its code or module (perl -E, node -p,
# php -r, python -m), and short options run together whose last one takes code (perl
# -ne, python -Bc, ruby -pe).
INTERPRETER_CODE_OPTIONS = CODE_OPTIONS | {"-E", "-p", "-r", "-m", "--print"}
CODE_CLUSTER = re.compile(r"-[A-Za-z]*[ceE]")
# A pattern runs on a tenant's value: the ``regex`` module can stop a match that takes
# longer than this (Python's ``re`` cannot), so a pattern that backtracks exponentially
# ("^(a|aa)+$") refuses a value instead of holding a web process or a worker.
PATTERN_SECONDS = 0.25
MAX_ARGUMENTS = 256
MAX_CHOICES = 100
MAX_CHOICE_LENGTH = 200
MAX_DESCRIPTION = 500
KEYS = {
    "string": {"max_length", "pattern"},
    "integer": {"min", "max"},
    "boolean": set(),
    "choice": {"choices"},
}
COMMON_KEYS = {"name", "type", "required", "default", "description"}
# Kubernetes quantities: a decimal number and an optional suffix.
QUANTITY = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
SUFFIXES: dict[str, int | Decimal] = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


class Refused(ValueError):
    """Something does not fit the catalogue's rules; ``problems`` names each thing."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Parameter:
    """One declared parameter of an entry."""

    name: str
    type: str
    required: bool = False
    default: Any = None
    description: str = ""
    max_length: int | None = None
    pattern: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()

    @property
    def env_name(self) -> str:
        return f"HOOK_PARAM_{self.name.upper()}"

    def summary(self) -> str:
        """One line for a tenant: what the parameter takes."""
        bounds = {
            "string": f"up to {self.max_length} characters"
            + (f", matching {self.pattern}" if self.pattern else ""),
            "integer": _range(self.minimum, self.maximum),
            "boolean": "true or false",
            "choice": "one of " + ", ".join(self.choices),
        }[self.type]
        need = (
            "required"
            if self.required
            else ("optional" if self.default is None else f"default {json.dumps(self.default)}")
        )
        text = f"{self.name} ({self.type}, {need}; {bounds})"
        return f"{text}: {self.description}" if self.description else text


def _range(low: int | None, high: int | None) -> str:
    if low is None and high is None:
        return "any whole number"
    if high is None:
        return f"at least {low}"
    if low is None:
        return f"at most {high}"
    return f"{low} to {high}"


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# --- an operator's declarations -------------------------------------------------------------------


def declarations(raw: Any) -> list[Parameter]:
    """The entry's parameter declarations, each checked; ``Refused`` names every one
    that is wrong and why."""
    if not isinstance(raw, list):
        raise Refused(["a JSON list of parameter declarations"])
    problems: list[str] = []
    found: list[Parameter] = []
    for index, item in enumerate(raw):
        try:
            found.append(_declaration(item, index))
        except Refused as exc:
            problems.extend(exc.problems)
    names = [parameter.name for parameter in found]
    problems += [
        f"parameter {name!r} is declared twice" for name in sorted(set(names)) if names.count(name) > 1
    ]
    if problems:
        raise Refused(problems)
    return found


def _declaration(item: Any, index: int) -> Parameter:
    if not isinstance(item, dict):
        raise Refused([f"declaration {index + 1}: a JSON object"])
    name = item.get("name")
    if not isinstance(name, str) or not PARAMETER_NAME.fullmatch(name):
        raise Refused(
            [
                f"declaration {index + 1}: its name must be lower case letters, digits "
                "and _, starting with a letter, at most 40"
            ]
        )
    kind = item.get("type")
    if kind not in TYPES:
        raise Refused([f"parameter {name!r}: type {kind!r} is not one of {', '.join(TYPES)}"])
    label = f"parameter {name!r}"
    problems = [f"{label}: unknown key {key!r}" for key in sorted(set(item) - COMMON_KEYS - KEYS[kind])]
    required = item.get("required", False)
    if not isinstance(required, bool):
        problems.append(f"{label}: required is true or false")
    description = item.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        problems.append(f"{label}: description is text of at most {MAX_DESCRIPTION} characters")
    if problems:
        raise Refused(problems)
    parameter = Parameter(
        name=name, type=kind, required=required, description=description, **_bounds(label, kind, item)
    )
    default = item.get("default")
    if default is not None:
        if required:
            raise Refused([f"{label}: a required parameter has no default"])
        problem = _misfit(parameter, default)
        if problem:
            raise Refused([f"{label}: its default {problem}"])
        parameter = Parameter(**{**parameter.__dict__, "default": default})
    return parameter


def _bounds(label: str, kind: str, item: dict[str, Any]) -> dict[str, Any]:
    """The type's bounds from a declaration, checked."""
    if kind == "string":
        return _string_bounds(label, item)
    if kind == "integer":
        low, high = item.get("min"), item.get("max")
        if any(value is not None and not _is_int(value) for value in (low, high)):
            raise Refused([f"{label}: min and max are whole numbers"])
        if low is not None and high is not None and low > high:
            raise Refused([f"{label}: min {low} is above max {high}"])
        return {"minimum": low, "maximum": high}
    if kind == "choice":
        choices = item.get("choices")
        if (
            not isinstance(choices, list)
            or not 1 <= len(choices) <= MAX_CHOICES
            or not all(
                isinstance(c, str) and c and "\x00" not in c and len(c) <= MAX_CHOICE_LENGTH for c in choices
            )
        ):
            raise Refused(
                [
                    f"{label}: choices is a list of 1 to {MAX_CHOICES} texts of 1 to "
                    f"{MAX_CHOICE_LENGTH} characters"
                ]
            )
        if len(set(choices)) != len(choices):
            raise Refused([f"{label}: a choice is listed twice"])
        return {"choices": tuple(choices)}
    return {}


def _string_bounds(label: str, item: dict[str, Any]) -> dict[str, Any]:
    most = int(conf.get("HOOK_MAX_PARAMETERS_BYTES"))
    max_length = item.get("max_length")
    if not _is_int(max_length) or not 1 <= max_length <= most:
        raise Refused([f"{label}: max_length is a whole number from 1 to {most}"])
    pattern = item.get("pattern")
    if pattern is None:
        return {"max_length": max_length}
    if not isinstance(pattern, str) or not pattern.startswith("^") or not pattern.endswith("$"):
        raise Refused([f"{label}: pattern is a regular expression anchored with ^ and $"])
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise Refused([f"{label}: pattern is not a regular expression: {exc}"]) from None
    return {"max_length": max_length, "pattern": pattern}


def _misfit(parameter: Parameter, value: Any) -> str:
    """Why ``value`` does not fit ``parameter``; empty when it does."""
    if parameter.type == "string":
        if not isinstance(value, str):
            return "must be text"
        if "\x00" in value:
            return "must not hold a NUL character"
        if parameter.max_length is not None and len(value) > parameter.max_length:
            return f"is longer than {parameter.max_length} characters"
        return _pattern_misfit(parameter.pattern, value) if parameter.pattern else ""
    if parameter.type == "integer":
        if not _is_int(value):
            return "must be a whole number"
        if parameter.minimum is not None and value < parameter.minimum:
            return f"is below {parameter.minimum}"
        if parameter.maximum is not None and value > parameter.maximum:
            return f"is above {parameter.maximum}"
        return ""
    if parameter.type == "boolean":
        return "" if isinstance(value, bool) else "must be true or false"
    return "" if value in parameter.choices else f"must be one of {', '.join(parameter.choices)}"


def _pattern_misfit(pattern: str, value: str) -> str:
    try:
        matched = regex.fullmatch(pattern, value, timeout=PATTERN_SECONDS)
    except TimeoutError:
        return f"took longer than {PATTERN_SECONDS} s to match {pattern}"
    return "" if matched else f"does not match {pattern}"


# --- an operator's entry --------------------------------------------------------------------------


def command_problems(command: Any, parameters: list[Parameter]) -> list[str]:
    """What is wrong with an entry's argument list, given its declared parameters."""
    if (
        not isinstance(command, list)
        or not 1 <= len(command) <= MAX_ARGUMENTS
        or not all(isinstance(arg, str) and arg and "\x00" not in arg for arg in command)
    ):
        return [
            f'an argument list of 1 to {MAX_ARGUMENTS} non-empty strings, e.g. ["python", '
            '"-m", "ingest.hookkit.check_records"]'
        ]
    program = PurePosixPath(command[0]).name
    if program.rstrip("0123456789.") in SHELLS:
        return [
            f"{command[0]!r} would read its arguments as code or run them as a program: "
            "the command runs a program directly, and parameters reach it as arguments or "
            "HOOK_PARAM_ variables"
        ]
    if _placeholders(command[0]):
        return ["the program (the first argument) is the entry's own, never a parameter"]
    declared = {parameter.name: parameter for parameter in parameters}
    own = _interpreter_arguments(command) if INTERPRETER.fullmatch(program.lower()) else 0
    problems = []
    for index, argument in enumerate(command):
        for name in _placeholders(argument):
            parameter = declared.get(name)
            if parameter is None:
                problems.append(
                    f"argument {index + 1}: {{{name}}} names no declared parameter "
                    "(write {{ and }} for braces)"
                )
            elif not parameter.required and parameter.default is None:
                problems.append(
                    f"argument {index + 1}: {{{name}}} needs parameter {name!r} "
                    "to be required or to have a default"
                )
            elif index <= own:
                problems.append(
                    f"argument {index + 1}: {{{name}}} is among {program}'s own "
                    "options, script or code, which would make the parameter code; "
                    "parameters may follow the script, or read "
                    f"{parameter.env_name}"
                )
            elif command[index - 1] in CODE_OPTIONS or _glued_code_option(argument):
                option = command[index - 1] if command[index - 1] in CODE_OPTIONS else argument
                problems.append(
                    f"argument {index + 1}: {{{name}}} goes with {option}, "
                    "which would make the parameter code or a program; read "
                    f"{parameter.env_name} there instead"
                )
    return problems


def _glued_code_option(argument: str) -> bool:
    """Whether a code option and the placeholder are one argument (``-c{code}``,
    ``--eval={code}``): the text before the argument's first placeholder."""
    head = PLACEHOLDER.split(argument, maxsplit=1)[0]
    if head.startswith("--"):
        return head.endswith("=") and head[:-1] in CODE_OPTIONS
    return CODE_CLUSTER.fullmatch(head) is not None and head[-1] in "ce"


def _interpreter_arguments(command: list[str]) -> int:
    """The index of an interpreter's script or code argument: options before it, then
    the script itself, or the argument after a code option (-c, -e, -m …). Everything up
    to it is the interpreter's; the length of the command when there is none."""
    index = 1
    while index < len(command):
        argument = command[index]
        if argument == "--":
            return min(index + 1, len(command))
        if argument in INTERPRETER_CODE_OPTIONS or CODE_CLUSTER.fullmatch(argument):
            return min(index + 1, len(command))
        if not argument.startswith("-") or argument == "-":
            return index
        index += 1
    return len(command)


def _placeholders(argument: str) -> list[str]:
    return [match.group(1) for match in PLACEHOLDER.finditer(argument) if match.group(0) not in ("{{", "}}")]


def env_problems(env: Any) -> list[str]:
    """What is wrong with an entry's fixed environment."""
    if not isinstance(env, dict):
        return ['an object of names and values, e.g. {"LEVEL": "strict"}']
    problems = []
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            problems.append(f"{name!r} is not a variable name (letters, digits and _)")
        elif name.startswith(RESERVED_ENV_PREFIXES):
            problems.append(
                f"{name!r}: names starting with {' or '.join(RESERVED_ENV_PREFIXES)} are set by the pipeline"
            )
        elif not isinstance(value, (str, int, float)) or isinstance(value, bool) or "\x00" in str(value):
            problems.append(f"{name}: its value is text or a number")
    return problems


def quantity(text: str) -> Decimal | None:
    """A Kubernetes quantity's value ("250m" is 0.25, "1Gi" is 2**30); None if it is not one."""
    match = QUANTITY.fullmatch(text)
    if match is None:
        return None
    try:
        return Decimal(match.group(1)) * SUFFIXES[match.group(2) or ""]
    except InvalidOperation:
        return None


def resource_problems(
    cpu_request: str, cpu_limit: str, memory_request: str, memory_limit: str
) -> dict[str, list[str]]:
    """Each resource field's problems: a quantity, within the settings' maximum, a
    request no larger than its limit."""
    problems: dict[str, list[str]] = {}
    for kind, request, limit in (("cpu", cpu_request, cpu_limit), ("memory", memory_request, memory_limit)):
        most_text = str(conf.get(f"HOOK_MAX_{kind.upper()}"))
        most = quantity(most_text)
        if most is None:  # a misconfigured bound refuses rather than lets anything through
            problems[f"{kind}_limit"] = [
                f"INGEST_HOOK_MAX_{kind.upper()}={most_text!r} is not "
                "a Kubernetes quantity; no entry can be checked"
            ]
            continue
        values = {}
        for field, text in ((f"{kind}_request", request), (f"{kind}_limit", limit)):
            if not text:
                continue
            value = quantity(text)
            if value is None:
                problems[field] = [f"{text!r} is not a Kubernetes quantity (e.g. 250m, 2, 512Mi)"]
            elif value > most:
                problems[field] = [f"{text} is above the most allowed, {most_text}"]
            else:
                values[field] = value
        if len(values) == 2 and values[f"{kind}_request"] > values[f"{kind}_limit"]:
            problems.setdefault(f"{kind}_request", []).append(f"{request} is above its limit {limit}")
    return problems


def timeout_problems(timeout: Any) -> list[str]:
    most = int(conf.get("HOOK_MAX_TIMEOUT_SECONDS"))
    if not _is_int(timeout) or not 1 <= timeout <= most:
        return [f"between 1 and {most} seconds"]
    return []


def image_problems(image: Any) -> list[str]:
    if not isinstance(image, str) or not image or len(image) > 255 or any(c.isspace() for c in image):
        return ["an image reference of 1 to 255 characters without spaces"]
    return []


def entry_problems(entry: Any) -> dict[str, list[str]]:
    """Everything wrong with an entry (a ``HookTemplate``), field by field."""
    problems: dict[str, list[str]] = {}
    try:
        parameters = declarations(entry.parameters)
    except Refused as exc:
        problems["parameters"] = exc.problems
        parameters = []
    for field, found in (
        ("image", image_problems(entry.image)),
        ("command", command_problems(entry.command, parameters)),
        ("env", env_problems(entry.env)),
        ("timeout_seconds", timeout_problems(entry.timeout_seconds)),
    ):
        if found:
            problems[field] = found
    problems.update(
        resource_problems(entry.cpu_request, entry.cpu_limit, entry.memory_request, entry.memory_limit)
    )
    return problems


# --- a tenant's values ----------------------------------------------------------------------------


def values(parameters: list[Parameter], given: Any) -> dict[str, Any]:
    """The values a hook runs with: ``given`` checked against the declarations, and the
    defaults of those not given. ``Refused`` names each parameter that does not fit."""
    if not isinstance(given, dict):
        raise Refused(['an object of parameter names and values, e.g. {"level": 3}'])
    declared = {parameter.name: parameter for parameter in parameters}
    problems = [f"unknown parameter {name!r}" for name in given if name not in declared]
    most = int(conf.get("HOOK_MAX_PARAMETERS_BYTES"))
    size = len(json.dumps(given, separators=(",", ":"), ensure_ascii=False, default=str).encode())
    if size > most:
        problems.append(f"the parameters take {size} bytes; at most {most}")
    chosen: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name in given:
            problem = _misfit(parameter, given[parameter.name])
            if problem:
                problems.append(f"parameter {parameter.name!r} {problem}")
            chosen[parameter.name] = given[parameter.name]
        elif parameter.required:
            problems.append(f"parameter {parameter.name!r} is required")
        elif parameter.default is not None:
            chosen[parameter.name] = parameter.default
    if problems:
        raise Refused(problems)
    return chosen


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Rendered:
    command: tuple[str, ...]
    env: dict[str, str]


def render(
    command: list[str], env: dict[str, Any], parameters: list[Parameter], chosen: dict[str, Any]
) -> Rendered:
    """The argument list and environment a hook runs with: each placeholder replaced by
    its value within its own argument (one pass: a value's own braces stay as they are),
    and ``HOOK_PARAM_<NAME>`` for each parameter with a value. ``Refused`` when the
    whole would pass ``HOOK_MAX_ARGUMENT_BYTES``."""
    texts = {name: _text(value) for name, value in chosen.items()}

    def replace(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole in ("{{", "}}"):
            return whole[0]
        return texts[match.group(1)]

    arguments = tuple(PLACEHOLDER.sub(replace, argument) for argument in command)
    problems = _options_from_values(command, arguments, parameters)
    if problems:
        raise Refused(problems)
    variables = {str(name): _text(value) for name, value in env.items()}
    declared = {parameter.name: parameter for parameter in parameters}
    variables.update({declared[name].env_name: text for name, text in texts.items()})
    size = sum(len(argument.encode()) + 1 for argument in arguments) + sum(
        len(name.encode()) + len(value.encode()) + 2 for name, value in variables.items()
    )
    most = int(conf.get("HOOK_MAX_ARGUMENT_BYTES"))
    if size > most:
        raise Refused([f"its arguments and environment take {size} bytes; at most {most}"])
    return Rendered(arguments, variables)


def _options_from_values(
    command: list[str], arguments: tuple[str, ...], parameters: list[Parameter]
) -> list[str]:
    """Values that make an argument begin with ``-`` where the entry's text does not: the
    program would read such an argument as an option of its own (``--output=/elsewhere``,
    ``-delete``), not as the value, unless the argument before it is ``--``, which ends
    the options. A choice is the operator's own text and may be an option."""
    kinds = {parameter.name: parameter.type for parameter in parameters}
    problems = []
    for index, (template, argument) in enumerate(zip(command, arguments, strict=True)):
        names = _placeholders(template)
        if (
            not argument.startswith("-")
            or template.startswith("-")
            or all(kinds.get(name) == "choice" for name in names)
            or (index > 0 and command[index - 1] == "--")
        ):
            continue
        problems.append(
            f"parameter {', '.join(repr(name) for name in names)}: argument "
            f"{index + 1} would start with '-', and the program would read it as "
            "an option; a value there must not start with '-'"
        )
    return problems


def check_hook(entry: Any, given: Any) -> Rendered:
    """A hook's entry and values, all checked, rendered; ``Refused`` says what does not
    fit (the entry's own problems first)."""
    problems = entry_problems(entry)
    if problems:
        raise Refused([f"{field}: {line}" for field, lines in problems.items() for line in lines])
    parameters = declarations(entry.parameters)
    return render(entry.command, entry.env, parameters, values(parameters, given))
