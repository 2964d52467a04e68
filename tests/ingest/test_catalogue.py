"""The hook catalogue: a tenant's values reach a hook only as data (inside one argument,
and as HOOK_PARAM_ variables), within their bounds; a hook whose entry was disabled,
withdrawn from its tenant or changed under its values fails its run, saying why, and
never runs."""

from __future__ import annotations

import json
import sys
import time

import pytest
from django.core.exceptions import ValidationError

from ingest.runs import catalogue, services
from ingest.runs.models import ExecutionStatus, HookExecution, HookTemplate, RunStatus
from tests.support.drive import drain
from tests.support.ingest import builders

pytestmark = pytest.mark.django_db(transaction=True)

# Prints what the process got: its arguments after the code, and HOOK_PARAM_ variables.
SHOW = (
    "import json, os, sys; print(json.dumps([sys.argv[1:], "
    "sorted((k, v) for k, v in os.environ.items() if k.startswith('HOOK_PARAM_'))]))"
)
NOTE = [{"name": "note", "type": "string", "required": True, "max_length": 200}]


def _declared(raw: list[dict]) -> list[catalogue.Parameter]:
    return catalogue.declarations(raw)


# --- rendering ---------------------------------------------------------------------------------


def test_a_value_stays_inside_its_one_argument_whatever_it_holds():
    value = "a b; rm -rf / $(id) `id` {other} \"'"
    rendered = catalogue.render(
        ["check", "--note={note}", "{note}", "{{literal}}"], {}, _declared(NOTE), {"note": value}
    )
    assert rendered.command == ("check", f"--note={value}", value, "{literal}")
    assert rendered.env == {"HOOK_PARAM_NOTE": value}


def test_values_of_every_type_become_text_and_defaults_fill_in():
    parameters = _declared(
        [
            {"name": "level", "type": "integer", "min": 0, "max": 9, "default": 3},
            {"name": "strict", "type": "boolean", "default": False},
            {"name": "mode", "type": "choice", "choices": ["fast", "full"], "default": "fast"},
        ]
    )
    chosen = catalogue.values(parameters, {"strict": True})
    rendered = catalogue.render(["check", "{level}", "{strict}", "{mode}"], {"FIXED": 1}, parameters, chosen)
    assert rendered.command == ("check", "3", "true", "fast")
    assert rendered.env == {
        "FIXED": "1",
        "HOOK_PARAM_LEVEL": "3",
        "HOOK_PARAM_STRICT": "true",
        "HOOK_PARAM_MODE": "fast",
    }


@pytest.mark.parametrize(
    "given, problem",
    [
        ({"note": "x" * 201}, "parameter 'note' is longer than 200 characters"),
        ({"note": "bad\x00"}, "parameter 'note' must not hold a NUL character"),
        ({"note": 7}, "parameter 'note' must be text"),
        ({}, "parameter 'note' is required"),
        ({"note": "ok", "command": "sh"}, "unknown parameter 'command'"),
        ({"note": "ok", **{f"p{n}": "x" * 100 for n in range(90)}}, "at most 8192"),
    ],
)
def test_values_that_do_not_fit_are_refused_naming_the_parameter(given, problem):
    with pytest.raises(catalogue.Refused) as refused:
        catalogue.values(_declared(NOTE), given)
    assert any(problem in line for line in refused.value.problems), refused.value.problems


def test_a_pattern_must_match_the_whole_value():
    parameters = _declared([{"name": "fields", "type": "string", "max_length": 50, "pattern": "^[a-z,]+$"}])
    assert catalogue.values(parameters, {"fields": "id,amount"}) == {"fields": "id,amount"}
    for bad in ("id\n", "id;ls", "ID"):
        with pytest.raises(catalogue.Refused):
            catalogue.values(parameters, {"fields": bad})


def test_a_pattern_that_backtracks_refuses_the_value_in_bounded_time():
    parameters = _declared([{"name": "word", "type": "string", "max_length": 100, "pattern": "^(a|aa)+$"}])
    started = time.perf_counter()
    with pytest.raises(catalogue.Refused, match="took longer than 0.25 s to match"):
        catalogue.values(parameters, {"word": "a" * 60 + "b"})
    assert time.perf_counter() - started < 5


def test_the_program_is_never_a_parameter():
    problems = catalogue.command_problems(
        ["{tool}", "--check"],
        _declared([{"name": "tool", "type": "choice", "choices": ["lint"], "default": "lint"}]),
    )
    assert problems == ["the program (the first argument) is the entry's own, never a parameter"]


@pytest.mark.parametrize(
    "command",
    [
        ["python", "-c", "{note}"],  # the code itself
        ["python", "-cimport os; {note}"],  # code glued to -c
        ["python3.11", "-Bc", "{note}"],  # -c at the end of a cluster
        ["python", "-m", "{note}"],  # the module to run
        ["/usr/bin/python3", "{note}"],  # the script
        ["perl", "-ne", "{note}"],
        ["perl", "-M{note}", "run.pl"],  # a module loaded before the script
        ["node", "--require={note}", "run.js"],
        ["node", "-p", "{note}"],
        ["php", "-r", "{note}"],
        ["awk", "{note}"],  # awk's program
        ["sed", "-e", "{note}"],  # sed's e command runs a shell
    ],
)
def test_an_interpreters_options_script_and_code_are_never_parameters(command):
    problems = catalogue.command_problems(command, _declared(NOTE))
    assert len(problems) == 1 and "which would make the parameter code" in problems[0], problems


@pytest.mark.parametrize(
    "program",
    ["/usr/bin/dash", "bash5.2", "sudo", "timeout", "nice", "nohup", "chroot", "setsid", "stdbuf", "ssh"],
)
def test_a_program_that_runs_its_arguments_as_a_program_is_refused(program):
    problems = catalogue.command_problems([program, "10", "{note}"], _declared(NOTE))
    assert problems and "would read its arguments as code or run them as a program" in problems[0]


@pytest.mark.parametrize(
    "command",
    [
        ["tool", "-c{note}"],
        ["tool", "--eval={note}"],
        ["find", ".", "-exec", "{note}", ";"],
        ["git", "-c", "{note}", "status"],
    ],
)
def test_a_code_option_before_or_glued_to_a_placeholder_is_refused(command):
    problems = catalogue.command_problems(command, _declared(NOTE))
    assert len(problems) == 1 and "would make the parameter code or a program" in problems[0]


@pytest.mark.parametrize(
    "command",
    [
        ["python", "run.py", "{note}"],
        ["python", "-m", "ingest.hookkit.check", "--note={note}"],
        ["perl", "-w", "run.pl", "{note}"],
        ["tool", "--output={note}"],
        ["tool", "-p", "{note}"],
    ],
)
def test_parameters_after_the_script_or_as_an_options_value_are_data(command):
    assert catalogue.command_problems(command, _declared(NOTE)) == []


@pytest.mark.parametrize(
    "command, value",
    [
        (["find", "/data", "{note}"], "-delete"),
        (["tool", "{note}"], "--output=/etc/cron.d/x"),
        (["tool", "{first}{note}"], "-rf"),  # an empty value before it
    ],
)
def test_a_value_never_begins_an_argument_with_a_dash(command, value):
    parameters = _declared([*NOTE, {"name": "first", "type": "string", "max_length": 5, "default": ""}])
    with pytest.raises(catalogue.Refused, match="would read it as an option"):
        catalogue.render(command, {}, parameters, catalogue.values(parameters, {"note": value}))


def test_a_dash_value_is_data_after_double_dash_or_inside_an_argument():
    parameters = _declared(NOTE)
    for command, expected in (
        (["tool", "--", "{note}"], ("tool", "--", "-rf")),
        (["tool", "--note={note}"], ("tool", "--note=-rf")),
        (["tool", "x{note}"], ("tool", "x-rf")),
    ):
        assert catalogue.render(command, {}, parameters, {"note": "-rf"}).command == expected


def test_an_argument_list_past_its_bound_is_refused(settings):
    settings.INGEST_HOOK_MAX_ARGUMENT_BYTES = 1000
    parameters = _declared(NOTE)
    command = ["check", *["{note}"] * 10]
    with pytest.raises(catalogue.Refused, match="at most 1000"):
        catalogue.render(command, {}, parameters, {"note": "x" * 200})


# --- the pipeline ------------------------------------------------------------------------------


def show_entry(**fields) -> HookTemplate:
    return builders.entry(
        [sys.executable, "-c", SHOW, "--note={note}", "{note}"], "show", parameters=NOTE, **fields
    )


def test_a_hook_gets_its_values_as_data_on_the_local_runner(clock, acme):
    value = "x; echo pwned > /tmp/pwned $(id)"
    run = services.start_ingest(
        builders.source(acme, batches=1, hooks=[show_entry()], parameters={"note": value})
    )
    drain(clock)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert HookExecution.objects.get(batch__run=run).tries == 1
    printed = json.loads(HookExecution.objects.get(batch__run=run).log_tail.strip())
    assert printed == [[f"--note={value}", value], [["HOOK_PARAM_NOTE", value]]]


def _disable(entry: HookTemplate, acme, globex) -> None:
    entry.enabled = False
    entry.save()


def _withdraw(entry: HookTemplate, acme, globex) -> None:
    entry.tenants.set([globex])


def _tighten(entry: HookTemplate, acme, globex) -> None:
    entry.parameters = [{**NOTE[0], "max_length": 3}]
    entry.save()


@pytest.mark.parametrize(
    "change, reason",
    [
        (_disable, "catalogue entry 'show' is disabled"),
        (_withdraw, "catalogue entry 'show' is not offered to this tenant"),
        (_tighten, "does not fit catalogue entry 'show': parameter 'note' is longer than 3"),
    ],
    ids=["disabled", "withdrawn", "tightened"],
)
def test_a_hook_whose_entry_changed_under_it_fails_its_run_and_never_runs(
    clock, acme, globex, change, reason
):
    entry = show_entry()
    run = services.start_ingest(
        builders.source(acme, batches=3, hooks=[entry], parameters={"note": "long enough"}, max_failures=5)
    )
    change(entry, acme, globex)
    drain(clock)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert reason in run.failure_reason
    failed = HookExecution.objects.filter(batch__run=run, status=ExecutionStatus.FAILED)
    assert failed.count() == 1 and reason in failed.get().reason
    assert set(HookExecution.objects.filter(batch__run=run).values_list("tries", flat=True)) == {0}


def test_the_failed_hooks_run_once_the_entry_is_put_right(clock, acme):
    entry = show_entry(enabled=False)
    run = services.start_ingest(builders.source(acme, batches=1, hooks=[entry], parameters={"note": "n"}))
    drain(clock)
    HookTemplate.objects.filter(pk=entry.pk).update(enabled=True)

    services.retry_failed_hooks(run)
    drain(clock)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert HookExecution.objects.get(batch__run=run).tries == 1


# --- an entry's own rules, wherever it is saved from ------------------------------------------


def entry(**fields) -> HookTemplate:
    return HookTemplate(
        **{
            "name": "lint",
            "image": "hooks/lint:1",
            "command": ["lint"],
            "cpu_request": "250m",
            "cpu_limit": "1",
            "memory_request": "128Mi",
            "memory_limit": "512Mi",
            **fields,
        }
    )


@pytest.mark.parametrize(
    "fields, problems",
    [
        (
            {"cpu_request": "lots"},
            {"cpu_request": ["'lots' is not a Kubernetes quantity (e.g. 250m, 2, 512Mi)"]},
        ),
        (
            {"memory_limit": "1e3Mi"},
            {"memory_limit": ["'1e3Mi' is not a Kubernetes quantity (e.g. 250m, 2, 512Mi)"]},
        ),
        ({"cpu_request": "2", "cpu_limit": "500m"}, {"cpu_request": ["2 is above its limit 500m"]}),
        (
            {"command": ["lint", "{level}"]},
            {"command": ["argument 2: {level} names no declared parameter (write {{ and }} for braces)"]},
        ),
    ],
)
def test_the_models_validation_refuses_what_the_catalogue_refuses(fields, problems):
    with pytest.raises(ValidationError) as refused:
        entry(**fields).full_clean()

    assert refused.value.message_dict == problems


def test_a_valid_entry_passes_the_models_validation_and_a_field_left_out_is_not_judged():
    entry().full_clean()
    entry(cpu_request="lots").full_clean(exclude=["cpu_request"])
    # Nor the command, when its parameters are left out: its placeholders are read against them.
    entry(parameters="not a list", command=["lint", "{x}"]).full_clean(exclude=["parameters"])
