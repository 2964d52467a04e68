"""App settings (``jobs.AppSettings``): declared once with a default, read from Django's
settings at each call, so a test's override applies at once."""

from __future__ import annotations

import importlib

import pytest

import jobs

SETTINGS = jobs.AppSettings("TESTS_")
batch = SETTINGS.integer("BATCH", 20)
label = SETTINGS.text("LABEL", "x")
queues = SETTINGS.strings("QUEUES", [])


def test_an_unset_setting_is_its_default():
    assert batch() == 20
    assert SETTINGS.get("BATCH") == 20


def test_a_deployments_value_is_read_at_each_call_and_turned_into_the_declared_type(settings):
    settings.TESTS_BATCH = "35"
    assert batch() == 35
    settings.TESTS_BATCH = 40
    assert SETTINGS.get("BATCH") == 40


def test_a_text_setting_set_to_none_is_empty_not_the_word_none(settings):
    settings.TESTS_LABEL = None
    assert label() == ""


def test_a_list_of_strings_is_a_new_list_each_time(settings):
    settings.TESTS_QUEUES = ("a", "b")
    assert queues() == ["a", "b"]
    queues().append("c")
    assert queues() == ["a", "b"]


def test_a_name_not_declared_is_a_key_error():
    with pytest.raises(KeyError):
        SETTINGS.get("NOPE")


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="TESTS_BATCH is declared twice"):
        SETTINGS.integer("BATCH", 1)


@pytest.mark.parametrize(
    ("module", "prefix"),
    [
        ("jobs.conf", "JOBS_"),
        ("intake.conf", "INTAKE_"),
        ("factors.conf", "FACTORS_"),
        ("ingest.conf", "INGEST_"),
        ("market.conf", "INGEST_"),
        ("exports.conf", "EXPORTS_"),
    ],
)
def test_every_apps_settings_are_declared_on_one_base(module, prefix):
    """``conf.SETTINGS`` lists them and ``conf.get`` reads one by name, in every app."""
    conf = importlib.import_module(module)
    assert isinstance(conf.SETTINGS, jobs.AppSettings) and conf.SETTINGS.prefix == prefix
    assert conf.get == conf.SETTINGS.get
    assert all(setting.name == prefix + name for name, setting in conf.SETTINGS.declared().items())
