# Conduit's image: the web processes or one loop per container (compose.yaml, docs/deploy.md).
FROM python:3.13-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CONDUIT_ENV=production \
    CONDUIT_VAR_DIR=/var/lib/conduit \
    PATH=/srv/conduit/.venv/bin:$PATH
WORKDIR /srv/conduit

# The locked packages first (requirements.txt: pinned, with hashes), so that a change of the code
# reuses this layer.
COPY requirements.txt ./
RUN python -m venv .venv \
    && .venv/bin/pip install --no-cache-dir --disable-pip-version-check --require-hashes -r requirements.txt

RUN useradd --system --home-dir /var/lib/conduit --shell /usr/sbin/nologin conduit \
    && install -d -o conduit -g conduit -m 0700 /var/lib/conduit /run/conduit/metrics
COPY manage.py ./
COPY conduit_site conduit_site/
COPY controls controls/
COPY routing routing/
COPY worklife worklife/
COPY causal causal/
COPY infra infra/
COPY templates templates/
COPY static static/

USER conduit
# Static files with content-hashed names and compressed copies, served by whitenoise.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput --verbosity 0

EXPOSE 8000
ENTRYPOINT ["python", "manage.py"]
CMD ["serve", "--no-router", "--host", "0.0.0.0", "--port", "8000"]
