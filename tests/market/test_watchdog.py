"""``manage.py ingest_check``, the market-data watchdog: each finding and its exit code,
the command run as cron runs it (a real process on the test database, on the real
clock), and the CronJob that schedules it.

In-process runs stand on the engine's clock: Monday 2026-11-02, 17:00 in Shanghai, so
that Friday 2026-10-30 is 3 days old, the most ``INGEST_MARKET_CHECK_MAX_AGE_DAYS``
allows.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, call_command, get_commands, load_command_class
from django.test import override_settings
from django.utils import timezone

from market import conf, freshness
from market.models import DailyBar, Dataset, MarketFeed, SourceFreshness
from tests.support.processes import Processes

FRIDAY = date(2026, 10, 30)
ENOUGH = 4000  # INGEST_MARKET_CHECK_MIN_ROWS' default
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (OK|ALERT)[ :]")


def feed_of(tenant, name: str = "cn-equities", **fields) -> MarketFeed:
    return MarketFeed.objects.create(
        tenant=tenant, name=name, api_url="http://127.0.0.1:9/", token="t", **fields
    )


def bars(feed: MarketFeed, day: date, count: int = ENOUGH) -> None:
    DailyBar.objects.bulk_create(
        DailyBar(feed=feed, ts_code=f"{n:06d}.SZ", trade_date=day, open=10.0, high=10.5, low=9.5, close=10.2)
        for n in range(count)
    )


def check(*args: str) -> tuple[int, list[str]]:
    """The command's exit code and its lines, as cron would see them."""
    out = StringIO()
    try:
        call_command("ingest_check", *args, stdout=out)
    except SystemExit as exit_:
        code = exit_.code
    else:
        code = 0
    return code, out.getvalue().splitlines()


@pytest.fixture
def feed(acme) -> MarketFeed:
    return feed_of(acme)


# --- each finding ------------------------------------------------------------------------


@pytest.mark.django_db
def test_all_ok_exits_0_with_a_line_per_check_and_a_summary(feed, clock):
    bars(feed, FRIDAY)
    SourceFreshness.objects.create(
        feed=feed, dataset=Dataset.DAILY, last_success=clock.now() - timedelta(hours=3)
    )
    code, lines = check()
    assert code == 0
    assert lines == [
        "OK acme/cn-equities latest-daily: latest trade date 2026-10-30, 3 day(s) ago (at most 3)",
        "OK acme/cn-equities last-attempts: no source's last attempt failed",
        "OK acme/cn-equities row-count: 4,000 rows on 2026-10-30 (at least 4,000)",
        "OK acme/cn-equities old-gaps: no open day to look at before the 7-day look-back (2026-10-26): "
        "looked from 2026-10-30",
        "OK: 0 alert(s) in 4 check(s)",
    ]


@pytest.mark.django_db
def test_a_latest_daily_date_too_old_is_an_alert(feed, clock):
    bars(feed, FRIDAY - timedelta(days=1))
    code, lines = check()
    assert code == 1
    assert lines[0] == (
        "ALERT acme/cn-equities latest-daily: latest trade date 2026-10-29, 4 day(s) ago (at most 3)"
    )
    assert lines[-1] == "ALERT: 1 alert(s) in 4 check(s)"


@pytest.mark.django_db
def test_no_bars_at_all_is_an_alert_and_no_row_count_is_made_up(feed, clock):
    code, lines = check()
    assert code == 1
    assert lines == [
        "ALERT acme/cn-equities latest-daily: no daily bars at all",
        "OK acme/cn-equities last-attempts: no source's last attempt failed",
        "ALERT: 1 alert(s) in 2 check(s)",
    ]


@pytest.mark.django_db
def test_a_source_whose_last_attempt_failed_is_an_alert_on_one_line(feed, clock):
    """A traceback's lines must not become lines of their own: cron and the log read one
    finding per line."""
    now = clock.now()
    bars(feed, FRIDAY)
    SourceFreshness.objects.create(
        feed=feed,
        dataset=Dataset.DAILY,
        last_success=now - timedelta(hours=2),
        last_failure=now - timedelta(hours=1),
        last_error="daily: HTTP 503 from the API\nTraceback:\n  boom",
    )
    SourceFreshness.objects.create(
        feed=feed,
        dataset=Dataset.CALENDAR,  # recovered since
        last_success=now - timedelta(hours=1),
        last_failure=now - timedelta(hours=2),
        last_error="timeout",
    )
    code, lines = check()
    assert code == 1
    assert lines == [
        "OK acme/cn-equities latest-daily: latest trade date 2026-10-30, 3 day(s) ago (at most 3)",
        "ALERT acme/cn-equities daily: last attempt failed at 2026-11-02 08:00 UTC: "
        "daily: HTTP 503 from the API Traceback: boom",
        "OK acme/cn-equities row-count: 4,000 rows on 2026-10-30 (at least 4,000)",
        "OK acme/cn-equities old-gaps: no open day to look at before the 7-day look-back (2026-10-26): "
        "looked from 2026-10-30",
        "ALERT: 1 alert(s) in 4 check(s)",
    ]


@pytest.mark.django_db
def test_a_source_that_only_ever_failed_is_an_alert(feed, clock):
    bars(feed, FRIDAY)
    SourceFreshness.objects.create(
        feed=feed, dataset=Dataset.INSTRUMENTS, last_failure=clock.now(), last_error="401"
    )
    code, lines = check()
    assert code == 1
    assert "ALERT acme/cn-equities stock_basic: last attempt failed at 2026-11-02 09:00 UTC: 401" in lines


@pytest.mark.django_db
def test_too_few_rows_on_the_latest_day_is_an_alert(feed, clock):
    bars(feed, FRIDAY - timedelta(days=1))  # a full older day does not make up for it
    bars(feed, FRIDAY, ENOUGH - 1)
    code, lines = check()
    assert code == 1
    assert lines[2] == "ALERT acme/cn-equities row-count: 3,999 rows on 2026-10-30 (at least 4,000)"
    assert lines[-1] == "ALERT: 1 alert(s) in 4 check(s)"


@pytest.mark.django_db
@override_settings(INGEST_MARKET_CHECK_MAX_AGE_DAYS=1, INGEST_MARKET_CHECK_MIN_ROWS=10)
def test_the_thresholds_are_settings(feed, clock):
    bars(feed, date(2026, 11, 1), 10)
    assert check()[0] == 0
    clock.advance(24 * 3600)
    code, lines = check()
    assert code == 1
    assert "2 day(s) ago (at most 1)" in lines[0]


# --- which feeds, and usage errors -------------------------------------------------------


@pytest.fixture
def two_tenants(acme, globex, clock) -> None:
    """Both have a feed named cn-equities; Acme's is fine, Globex's has no bars."""
    bars(feed_of(acme), FRIDAY)
    feed_of(globex)
    feed_of(globex, "retired", enabled=False)


@pytest.mark.django_db
def test_each_tenants_feed_is_checked_and_named_with_its_tenant(two_tenants):
    code, lines = check()
    assert code == 1
    assert [line.split(":")[0] for line in lines] == [
        "OK acme/cn-equities latest-daily",
        "OK acme/cn-equities last-attempts",
        "OK acme/cn-equities row-count",
        "OK acme/cn-equities old-gaps",
        "ALERT globex/cn-equities latest-daily",
        "OK globex/cn-equities last-attempts",
        "ALERT",
    ]


@pytest.mark.django_db
def test_tenant_and_feed_narrow_the_check(two_tenants):
    assert check("--tenant", "acme")[0] == 0
    code, lines = check("--tenant", "globex", "--feed", "cn-equities")
    assert code == 1
    assert all("acme" not in line for line in lines)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--feed", "nope"], "no enabled market feed named 'nope'"),
        (["--feed", "retired"], "no enabled market feed named 'retired'"),
        (["--tenant", "initech"], "no tenant 'initech'"),
    ],
)
def test_nothing_to_check_is_a_usage_error_exit_2_not_an_alert(two_tenants, args, message):
    with pytest.raises(CommandError) as error:
        check(*args)
    assert str(error.value) == message
    assert error.value.returncode == 2


@pytest.mark.django_db
def test_a_log_it_cannot_append_to_is_exit_2_after_the_findings_are_printed(two_tenants, tmp_path):
    out = StringIO()
    with pytest.raises(CommandError) as error:
        call_command("ingest_check", "--tenant", "acme", "--log", str(tmp_path), stdout=out)
    assert error.value.returncode == 2
    assert str(error.value).startswith(f"cannot append to {tmp_path}")
    assert out.getvalue().splitlines()[-1] == "OK: 0 alert(s) in 4 check(s)"


# --- as cron runs it: a real process -----------------------------------------------------


def ingest_check(procs: Processes, name: str, *args: str) -> tuple[int, list[str], str]:
    """``python manage.py ingest_check`` on the test database: its exit code, stdout lines
    and stderr."""
    proc = procs.manage(name, "ingest_check", *args, stdout_pipe=True)
    code = proc.wait(60)
    assert proc.popen.stdout is not None
    return code, proc.popen.stdout.read().decode().splitlines(), proc.log.read_text()


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_a_healthy_feed_exits_0_from_a_real_process(processes, acme):
    """The process has the real clock: the data is as fresh as the real now."""
    now = timezone.now()
    feed = feed_of(acme)
    bars(feed, freshness.market_date(now))
    SourceFreshness.objects.create(feed=feed, dataset=Dataset.DAILY, last_success=now - timedelta(hours=1))
    code, lines, stderr = ingest_check(processes, "ok")
    assert code == 0, stderr
    assert [line.split(":")[0] for line in lines] == [
        "OK acme/cn-equities latest-daily",
        "OK acme/cn-equities last-attempts",
        "OK acme/cn-equities row-count",
        "OK acme/cn-equities old-gaps",
        "OK",
    ]
    assert lines[-1] == "OK: 0 alert(s) in 4 check(s)"


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_an_alert_exits_1_from_a_real_process_and_each_run_appends_to_the_log(processes, acme, tmp_path):
    now = timezone.now()
    feed = feed_of(acme)
    bars(feed, freshness.market_date(now) - timedelta(days=10), 10)
    log = tmp_path / "ingest_check.log"

    first = ingest_check(processes, "alert-1", "--log", str(log))
    after_first = log.read_text()
    second = ingest_check(processes, "alert-2", "--log", str(log))

    for code, lines, stderr in (first, second):
        assert code == 1, stderr
        assert lines[-1] == "ALERT: 2 alert(s) in 4 check(s)"
        assert "Traceback" not in stderr
    logged = log.read_text().splitlines()
    assert log.read_text().startswith(after_first)  # appended, not overwritten
    assert len(logged) == len(first[1]) + len(second[1]) == 10
    assert all(STAMPED.match(line) for line in logged), logged
    assert [line.split(" ", 1)[1] for line in logged] == first[1] + second[1]


@pytest.mark.system
@pytest.mark.django_db(transaction=True)
def test_a_real_process_tells_a_usage_error_from_an_alert(processes, acme):
    feed_of(acme)
    code, lines, stderr = ingest_check(processes, "no-feed", "--feed", "nope")
    assert code == 2
    assert "CommandError: no enabled market feed named 'nope'" in stderr
    assert lines == []
    assert ingest_check(processes, "bad-option", "--no-such-option")[0] == 2


# --- the CronJob -------------------------------------------------------------------------


def test_the_cronjob_runs_the_watchdog_at_20_on_weekdays_in_shanghai_one_at_a_time():
    path = Path(settings.BASE_DIR) / "deploy" / "base" / "market-watchdog.yaml"
    (job,) = list(yaml.safe_load_all(path.read_text()))
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "CronJob")
    spec = job["spec"]
    assert spec["schedule"] == "0 20 * * 1-5"
    assert spec["timeZone"] == "Asia/Shanghai" == conf.get("MARKET_TIMEZONE")
    assert spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # an ALERT fails the Job; it is not rerun
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:3] == ["python", "manage.py", "ingest_check"]
    # The command exists and takes these arguments as they are written.
    app = get_commands()["ingest_check"]
    parser = load_command_class(app, "ingest_check").create_parser("manage.py", "ingest_check")
    options = parser.parse_args(command[3:])
    # The findings go to the pod's log, which outlives the pod in the cluster's logging;
    # a log file would need a volume of its own.
    assert options.log is None
