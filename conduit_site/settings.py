"""Conduit settings: one module, driven by environment variables.

Every setting has an embedded default (SQLite under ``var/``, no other service),
so ``manage.py`` works on a fresh checkout. Production sets ``CONDUIT_ENV=production``
(or ``DEBUG=false``), ``SECRET_KEY`` and ``ALLOWED_HOSTS``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.utils.csp import CSP

from infra.private_files import private_directory

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONDUIT_VAR_DIR", BASE_DIR / "var"))
# It holds the SQLite database and the operator's password: mode 0700
# (infra/private_files.py). A read-only checkout on PostgreSQL and Redis needs none.
with contextlib.suppress(OSError):
    private_directory(VAR_DIR)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


PRODUCTION = os.environ.get("CONDUIT_ENV", "development") == "production"
DEBUG = env_bool("DEBUG", not PRODUCTION)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        raise RuntimeError("SECRET_KEY must be set when CONDUIT_ENV=production")
    SECRET_KEY = "conduit-development-only-not-for-production"
ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]", "testserver"]
)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Not "daphne": its app imports twisted (about 0.3 s) in every process only to override
# runserver; `manage.py serve` runs daphne itself, and other commands never need it.
INSTALLED_APPS = [
    # The admin modules load with the URLconf (conduit_site/urls.py), not in every command.
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "django_htmx",
    "channels",
    # Only for its static files: the Swagger UI build that /api/docs/ serves (no CDN).
    "drf_spectacular_sidecar",
    "infra.apps.InfraConfig",
    "causal",
    "worklife",
    "routing",
    "controls",
    "conduit_site.console",
    # Last: its ready() runs after every other app's (conduit_site/apps.py).
    "conduit_site.apps.SiteConfig",
]

MIDDLEWARE = [
    # X-Request-ID on every answer, and request_id on every log line of the request.
    "conduit_site.requestid.RequestIdMiddleware",
    # /healthz, /readyz and /metrics, answered before the host check, the HTTPS redirect,
    # sessions, CSRF and axes: probes and scrapers reach a web process by its address
    # (conduit_site/operations.py).
    "conduit_site.operations.OperationsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files with cache headers and compression, before sessions and no-store.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Cache-Control: no-store on every page and API answer (they show payloads).
    "conduit_site.headers.NoStoreMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "conduit_site.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "conduit_site.asgi.application"

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
                # csp_nonce: a page that needs one (the setup editor's injected style) asks.
                "django.template.context_processors.csp",
            ],
            # Loaded in every template: {{ value|timetag }} (every console timestamp) and
            # wrap_at_dots (Event types).
            "builtins": [
                "conduit_site.console.templatetags.console_time",
                "conduit_site.console.templatetags.console_text",
            ],
        },
    },
]

# --- Storage -------------------------------------------------------------------------------
# SQLite (the embedded default) runs in WAL mode with synchronous=FULL so that an Event
# acknowledged by acceptance survives a power loss; writers serialise with BEGIN IMMEDIATE
# and wait up to the busy timeout for each other.
SQLITE_PATH = VAR_DIR / "conduit.sqlite3"
DATABASE_URL = os.environ.get("DATABASE_URL", "") or f"sqlite:///{SQLITE_PATH}"
# Connections are kept between requests (the web server answers from a fixed pool of threads,
# conduit_site.asgi) and between passes of the loops: opening an SQLite connection with its
# pragmas cost about a millisecond, as much as the acceptance it served. Checked before reuse.
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("CONN_MAX_AGE", 60))}
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env_bool("CONN_HEALTH_CHECKS", True)
# Threads of each web server process that run requests (conduit_site.asgi).
CONDUIT_REQUEST_THREADS = env_int("CONDUIT_REQUEST_THREADS", 16)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's backend, with write transactions taking turns fairly (see its module).
    DATABASES["default"]["ENGINE"] = "infra.sqlite_backend"
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": env_int("SQLITE_BUSY_TIMEOUT", 30),
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                f"PRAGMA synchronous={os.environ.get('SQLITE_SYNCHRONOUS', 'FULL')};"
                "PRAGMA foreign_keys=ON;"
            ),
        }
    )
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
# Lets several test runs share one database server (or one var/ folder) side by side.
if os.environ.get("TEST_DATABASE_NAME"):
    DATABASES["default"].setdefault("TEST", {})["NAME"] = os.environ["TEST_DATABASE_NAME"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels ------------------------------------------------------------------------------
# Live updates reach each web process through the database (the outbox of infra/live.py, read
# by conduit_site/live.py); the channel layer only carries them from that reader to the
# process's own websockets, so the in-memory layer serves. Redis is optional: with REDIS_URL the
# websockets of several web processes share one layer.
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    # redis-py 8 reads with a 5 s socket timeout by default, which aborts the layer's blocking
    # BZPOPMIN (5 s) and drops every idle websocket: allow a read well past it.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }
    # The cache counts the API's and the receivers' rate limits (conduit_site/api/ratelimit.py):
    # in Redis they hold across web processes and hosts.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "conduit",
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# How often a web process reads the live-update outbox besides being woken (seconds): the
# wake-up is a hint; this bounds how late a page hears of a change whose wake-up was lost
# (on PostgreSQL, where LISTEN wakes it on every commit, at least every 2 s).
CONDUIT_LIVE_POLL_SECONDS = 0.25

# --- Auth ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Sign-ins are throttled by django-axes: CONDUIT_LOGIN_FAILURE_LIMIT failures in a row for one
# login from one address lock that pair out for CONDUIT_LOGIN_COOLOFF_MINUTES (even with the right
# password), and every failure is logged as ``auth.login_failed`` (never with the password).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "routing.access.backend.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("CONDUIT_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("CONDUIT_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HANDLER = "conduit_site.console.login_guard.LoggingAxesHandler"
# Reverse proxies in front of the web processes (addresses or CIDR networks, comma-separated):
# sign-in lockouts key on the client's address from X-Forwarded-For only when the peer is one.
CONDUIT_TRUSTED_PROXIES = env_list("CONDUIT_TRUSTED_PROXIES", [])
for _proxy in CONDUIT_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError as _error:
        raise RuntimeError(f"CONDUIT_TRUSTED_PROXIES: {_proxy!r} is not an address or network") from _error
# A secret the proxy adds to every request (X-Conduit-Proxy): with it set, X-Forwarded-For is read
# only from requests that carry it, so a process on the proxy's host cannot name an address.
CONDUIT_PROXY_SECRET = os.environ.get("CONDUIT_PROXY_SECRET", "")
AXES_CLIENT_IP_CALLABLE = "conduit_site.proxies.client_ip"
AXES_LOCKOUT_TEMPLATE = "routing/login_locked.html"
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "csrfmiddlewaretoken"]
# Our handler writes one structured line per failure; axes' own prose lines would repeat it.
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console-home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# Production serves what `manage.py collectstatic` wrote: names with a content hash (cached a
# year, immutable) and gzip/brotli copies. Elsewhere the files are served from the source
# folders (cached briefly), with no collectstatic step.
if PRODUCTION:
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = DEBUG
WHITENOISE_MAX_AGE = 3600

# --- Security (production) -----------------------------------------------------------------
if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Every page, the admin's too: scripts, styles and connections (the websocket) from this origin
# only, never inline (no 'unsafe-inline', no 'unsafe-eval'); the favicon is a data: URL. A style
# element is allowed only with the request's nonce, which is in the header only when the page
# used it: the setup editor's, whose CodeMirror injects its style element with it.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# Django's debug pages (DEBUG on: a 400 for a bad Host header, a 500) hide every secret: the
# connection URLs, URLs with a password, the process environment, secret-like variables.
DEFAULT_EXCEPTION_REPORTER_FILTER = "conduit_site.errors.SecretsHiddenFilter"

# --- Conduit -------------------------------------------------------------------------------
# Route handlers and executors: name -> dotted path. The built-ins are present unless a
# deployment removes them; a user's package adds its own.
CONDUIT_ROUTE_HANDLERS = {"match": "routing.handlers.Match"}
# The user a Work's processes run as when the work loop runs as root (nobody unless set): with no
# supplementary groups, in a mount namespace where var/ and the secrets folder are hidden
# (worklife/executors/isolation.py, docs/work-engine.md).
CONDUIT_WORK_USER = os.environ.get("CONDUIT_WORK_USER", "")
CONDUIT_EXECUTORS = {
    "python": "worklife.executors.PythonExecutor",
    "command": "worklife.executors.CommandExecutor",
}
# The one directory receivers' secret files may be in (docs/receivers.md): ``{file: NAME}`` is
# taken from it and a path outside it is refused. systemd's LoadCredential= directory when the
# unit has one, else var/secrets.
CONDUIT_SECRETS_DIR = Path(
    os.environ.get("CONDUIT_SECRETS_DIR") or os.environ.get("CREDENTIALS_DIRECTORY") or VAR_DIR / "secrets"
)
CONDUIT_MAX_EVENT_BYTES = env_int("CONDUIT_MAX_EVENT_BYTES", 256 * 1024)
# The largest request body the web server reads, by path (conduit_site/edge.py): a larger
# declared Content-Length is refused (413) before any of the body is read, a chunked body is cut
# off as it passes the limit. Receivers (/hooks/...) refuse a delivery over the Event limit, the
# API and the console's forms what Django reads at most (DATA_UPLOAD_MAX_MEMORY_SIZE, also
# Django's own check of every body, 2.5 MiB by default).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)
CONDUIT_MAX_RECEIVER_BODY_BYTES = env_int("CONDUIT_MAX_RECEIVER_BODY_BYTES", CONDUIT_MAX_EVENT_BYTES)
CONDUIT_MAX_API_BODY_BYTES = env_int("CONDUIT_MAX_API_BODY_BYTES", DATA_UPLOAD_MAX_MEMORY_SIZE)
# Each web process's connection limits (conduit_site/edge.py; docs/deploy.md): a request's
# headers and body must arrive whole within CONDUIT_HEADER_TIMEOUT seconds of its first byte
# (else 408 and closed); a kept-alive connection with no request in flight is closed after
# CONDUIT_IDLE_TIMEOUT seconds without a byte (longer than Caddy's 2 minutes of keep-alive to
# its upstreams, so that the proxy closes first); past CONDUIT_MAX_CONNECTIONS open connections
# (websockets included) a new one is answered 503 with Retry-After. 0 turns a limit off.
CONDUIT_HEADER_TIMEOUT = float(os.environ.get("CONDUIT_HEADER_TIMEOUT", "30"))
CONDUIT_IDLE_TIMEOUT = float(os.environ.get("CONDUIT_IDLE_TIMEOUT", "180"))
CONDUIT_MAX_CONNECTIONS = env_int("CONDUIT_MAX_CONNECTIONS", 4096)
# Expensive reads (docs/operations.md, "Quotas and rate limits"). An impact preview over more
# than CONDUIT_IMPACT_INLINE_EVENTS Events runs in the background as a job: at most
# CONDUIT_IMPACT_JOBS_PER_LOGIN of one login and CONDUIT_IMPACT_JOBS_PER_TOKEN of one API token
# at once, CONDUIT_IMPACT_JOBS_TOTAL on the whole site (counted in the database, so across
# processes and hosts); past them a start is refused with 429 and Retry-After. A job nobody
# polled for CONDUIT_IMPACT_ABANDON_SECONDS stops. 0 turns a quota off.
CONDUIT_IMPACT_INLINE_EVENTS = env_int("CONDUIT_IMPACT_INLINE_EVENTS", 500)
CONDUIT_IMPACT_JOBS_PER_LOGIN = env_int("CONDUIT_IMPACT_JOBS_PER_LOGIN", 2)
CONDUIT_IMPACT_JOBS_PER_TOKEN = env_int("CONDUIT_IMPACT_JOBS_PER_TOKEN", 2)
CONDUIT_IMPACT_JOBS_TOTAL = env_int("CONDUIT_IMPACT_JOBS_TOTAL", 4)
CONDUIT_IMPACT_ABANDON_SECONDS = env_int("CONDUIT_IMPACT_ABANDON_SECONDS", 30)
# The API's rate limits, requests a minute (fixed one-minute windows, answered 429 with
# Retry-After past them): each API token, and each login over all its tokens; acceptance from
# senders (POST /api/events per token, /hooks/NAME per receiver) counts apart, with its own
# higher limit. Counted in Django's cache: in Redis with REDIS_URL (across processes and hosts),
# else each web process by itself in its memory (so N web processes allow up to N times these).
# 0 turns a limit off.
CONDUIT_API_RATE_PER_MINUTE = env_int("CONDUIT_API_RATE_PER_MINUTE", 600)
CONDUIT_API_LOGIN_RATE_PER_MINUTE = env_int("CONDUIT_API_LOGIN_RATE_PER_MINUTE", 1200)
CONDUIT_ACCEPT_RATE_PER_MINUTE = env_int("CONDUIT_ACCEPT_RATE_PER_MINUTE", 6000)
# How deeply an accepted JSON document may nest arrays and objects: deeper input is refused
# before it is parsed, so no document can exhaust a parser's or the router's stack.
CONDUIT_MAX_JSON_DEPTH = env_int("CONDUIT_MAX_JSON_DEPTH", 64)
CONDUIT_ROUTE_TIMEOUT = float(os.environ.get("CONDUIT_ROUTE_TIMEOUT", "5"))
# The host name in loop identities (infra.identity): one per host or container sharing a database.
CONDUIT_HOSTNAME = os.environ.get("CONDUIT_HOSTNAME", "")
# Retention (conduit_site.retention): terminal Work and the Events nothing keeps go after this many
# days; 0 keeps everything for ever.
CONDUIT_RETENTION_DAYS = env_int("CONDUIT_RETENTION_DAYS", 30)
CONDUIT_MAX_ROUTE_FAILURES = env_int("CONDUIT_MAX_ROUTE_FAILURES", 5)
CONDUIT_ROUTE_FAILURE_WINDOW = env_int("CONDUIT_ROUTE_FAILURE_WINDOW", 15 * 60)
CONDUIT_ROUTE_CLAIM_SECONDS = float(os.environ.get("CONDUIT_ROUTE_CLAIM_SECONDS", "60"))
CONDUIT_CAUSAL_MAX_DEPTH = env_int("CONDUIT_CAUSAL_MAX_DEPTH", 32)
CONDUIT_CAUSAL_RATE_PER_MINUTE = env_int("CONDUIT_CAUSAL_RATE_PER_MINUTE", 128)
# The Work engine (manage.py work_loop): attempts that may fail in a row before a Work is
# parked, attempts that may be lost in a row with their loop (run again at once) before it is
# parked, and how long an attempt's lease lasts without renewal (renewed every third of it).
CONDUIT_MAX_ATTEMPTS = env_int("CONDUIT_MAX_ATTEMPTS", 5)
CONDUIT_MAX_LOSSES = env_int("CONDUIT_MAX_LOSSES", 3)
CONDUIT_ATTEMPT_LEASE_SECONDS = float(os.environ.get("CONDUIT_ATTEMPT_LEASE_SECONDS", "30"))

# --- Metrics (GET /metrics, docs/operations.md) -----------------------------------------------
# Off by default (/metrics is a 404 and nothing is recorded). A token turns them on, and a
# scrape must then send it as ``Authorization: Bearer <token>``; CONDUIT_METRICS=on without a
# token serves them to anyone who reaches /metrics (a private network, a proxy that hides it).
CONDUIT_METRICS_TOKEN = os.environ.get("CONDUIT_METRICS_TOKEN", "")
CONDUIT_METRICS = env_bool("CONDUIT_METRICS", bool(CONDUIT_METRICS_TOKEN))

# --- Logs ------------------------------------------------------------------------------------
# ``text``: one line per record, the message then each field as key=value; ``json``: one JSON
# object per line with the same fields, for a log pipeline. Web requests' lines carry request_id.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text").strip().lower()
if LOG_FORMAT not in {"text", "json"}:
    raise RuntimeError(f"LOG_FORMAT must be text or json, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "()": "conduit_site.logformat.KeyValueFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {
            "()": "conduit_site.logformat.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "filters": {"request_id": {"()": "conduit_site.logformat.RequestIdFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if LOG_FORMAT == "json" else "plain",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # Django's own DEBUG-only console handler (its default logging) would print a second,
        # plain copy of each django line: its lines go through ours alone.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        # conduit.auth logs each failed sign-in (auth.login_failed); axes' lines would repeat it.
        "axes": {"level": "ERROR"},
    },
}
