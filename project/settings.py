"""Conveyor settings, read from the environment (12-factor).

Nothing here needs editing between a laptop and production: ``DATABASE_URL`` picks the
database (unset: an embedded PostgreSQL under ``var/``), ``REDIS_URL`` switches the
django-q2 broker and the channel layer to Redis.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
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


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and os.environ.get("CONVEYOR_ALLOW_DEV_SECRET") != "1":
        raise ImproperlyConfigured("SECRET_KEY must be set (or DEBUG=true for development).")
    SECRET_KEY = "conveyor-development-only-secret-key-not-for-production"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # daphne first so that runserver serves ASGI (SSE and WebSocket in development).
    "daphne",
    # The engine; its cluster integration hooks django-q2 (jobs/cluster.py).
    "jobs",
    "tenancy",
    "factors",
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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
            ],
        },
    },
]


def _database() -> dict:
    url = os.environ.get("DATABASE_URL")
    if url:
        config = dj_database_url.parse(url, conn_max_age=env_int("CONN_MAX_AGE", 0))
        if config["ENGINE"] != "django.db.backends.postgresql":
            raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL; nothing else is supported.")
        return config
    from project import embedded_db

    server = embedded_db.ensure_running(VAR_DIR / "pg")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": server.socket_dir,
        "CONN_MAX_AGE": env_int("CONN_MAX_AGE", 0),
    }


DATABASES = {"default": _database()}
# One test database per test run, so that two runs on one server never share tables.
DATABASES["default"].setdefault("TEST", {})["NAME"] = os.environ.get(
    "CONVEYOR_TEST_DB", f"test_conveyor_{os.getpid()}"
)
# channels-postgres reaches its tables through this alias: the same database (tests
# mirror it onto the test database rather than creating a second one).
DATABASES["channels_postgres"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
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
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                   "capacity": 1_000, "expiry": 30, "prefix": "conveyor"},
    } if REDIS_URL else {
        "BACKEND": "jobs.channel_layer.PostgresChannelLayer",
        "CONFIG": {"prefix": "conveyor", "expiry": 30, "group_expiry": 86_400},
    },
}
STREAMS_KEEPALIVE_SECONDS = float(os.environ.get("STREAMS_KEEPALIVE_SECONDS", "15"))

REST_FRAMEWORK = {
    # Token first: an anonymous API client gets 401 with a WWW-Authenticate challenge.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Bad input is a 400 naming the problem: cursors checked against their ordering,
    # JSON of bounded depth (jobs/filters.py, jobs/parsers.py).
    "DEFAULT_PAGINATION_CLASS": "jobs.filters.NewestFirst",
    "DEFAULT_PARSER_CLASSES": [
        "jobs.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Conveyor API",
    "DESCRIPTION": "Jobs, pipelines and operator actions of the Conveyor back office.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The 400/401/403/404 answers every endpoint can give, documented (project/api_schema.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "project.api_schema.document_error_answers"],
}

# /metrics without credentials (a scraper on a private network); otherwise it needs
# "Authorization: Bearer $METRICS_TOKEN" or a staff platform operator (jobs/views.py).
METRICS_PUBLIC = env_bool("METRICS_PUBLIC", False)

# The job engine (jobs/conf.py holds the defaults and their meaning).
JOBS_LEASE_SECONDS = env_int("JOBS_LEASE_SECONDS", 6)
JOBS_HEARTBEAT_SECONDS = float(os.environ.get("JOBS_HEARTBEAT_SECONDS", "1"))
JOBS_REAPER_SECONDS = float(os.environ.get("JOBS_REAPER_SECONDS", "2"))
JOBS_QUEUES = env_list("JOBS_QUEUES", [])
JOBS_HANDLER_MODULES = env_list("JOBS_HANDLER_MODULES", [])

# The CO2 calculator's bulk path (factors/conf.py holds the defaults and their meaning):
# batch sizes can be tuned per deployment without a code change.
for _name in ("INGEST_BATCH_ROWS", "RECALC_BATCH_ROWS", "RECALC_CHUNK_ROWS"):
    if f"FACTORS_{_name}" in os.environ:
        globals()[f"FACTORS_{_name}"] = env_int(f"FACTORS_{_name}", 0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django_q": {"level": os.environ.get("DJANGO_Q_LOG_LEVEL", "WARNING")},
        "pgserver": {"level": "WARNING"},
    },
}
