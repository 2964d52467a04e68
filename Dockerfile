# One image for every Conveyor process; the command picks the process:
#   web            python -m project.web --host 0.0.0.0 --port 8000   (the default)
#   cluster        python manage.py qcluster
#   export worker  python manage.py export_worker
#   migrations     python manage.py migrate --noinput
#
# The product only: devtools/ (the dev server, the embedded PostgreSQL, the fakes, the
# demo), tests/ and bench/ are not copied, and DATABASE_URL is required (without it the
# settings still load, for an export worker, but nothing may use the database).
#
# Build: docker build -t conveyor:latest .

# --- build: compile what needs compiling into a virtual environment ------------------
FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY project project
COPY appsettings appsettings
COPY jobs jobs
COPY console console
COPY tenancy tenancy
COPY intake intake
COPY factors factors
COPY ingest ingest
COPY market market
COPY exports exports
COPY manage.py ./
# The application and the object-store filesystems (s3://, gs://); no test tools.
RUN pip install ".[s3,gcs]"

# --- run: the environment and the code, no compilers, not root -----------------------
FROM python:3.11-slim-bookworm
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=project.settings \
    CONVEYOR_VAR_DIR=/var/lib/conveyor
RUN groupadd --system --gid 10001 conveyor \
 && useradd --system --uid 10001 --gid conveyor --home-dir /app --shell /usr/sbin/nologin conveyor \
 && mkdir -p /var/lib/conveyor && chown conveyor:conveyor /var/lib/conveyor
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --chown=conveyor:conveyor manage.py ./
COPY --chown=conveyor:conveyor project project
COPY --chown=conveyor:conveyor appsettings appsettings
COPY --chown=conveyor:conveyor jobs jobs
COPY --chown=conveyor:conveyor console console
COPY --chown=conveyor:conveyor tenancy tenancy
COPY --chown=conveyor:conveyor intake intake
COPY --chown=conveyor:conveyor factors factors
COPY --chown=conveyor:conveyor ingest ingest
COPY --chown=conveyor:conveyor market market
COPY --chown=conveyor:conveyor exports exports
# The admin's CSS and JS, collected once into the image (a front proxy or SERVE_STATIC
# serves them). collectstatic needs settings, not a database or a real secret.
RUN CONVEYOR_ALLOW_DEV_SECRET=1 python manage.py collectstatic --noinput -v 0 \
 && chown -R conveyor:conveyor /var/lib/conveyor
# Numeric, so that a kubelet can tell it is not root (runAsNonRoot) without a passwd file.
USER 10001:10001
EXPOSE 8000
# The web process's liveness (project/probes.py); other processes set their own probes.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PORT', '8000'), timeout=4)"]
CMD ["python", "-m", "project.web", "--host", "0.0.0.0", "--port", "8000"]
