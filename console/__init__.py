"""The operators' floor, between the engine (``jobs``) and the pipelines: every page,
endpoint and stream through which people and their tools watch and act on the work.

Each surface is a room of its own: ``admin`` (the Django admin pages over the engine's
models, the dashboard, failure triage, the pipeline page), ``api`` (the REST API) and
``prometheus`` (the ``/metrics`` page). ``dashboard``, ``overview`` and ``triage``
compute the figures those pages and endpoints show. ``urls`` routes them.

The console builds on the engine (``jobs``, its models and services) and the engine never
imports it. Pipelines build their own admins and APIs on the console's public pieces: the
names listed in ``console.admin.__all__`` and ``console.api.__all__``, never a module
inside them. import-linter checks these rules (``pyproject.toml``).
"""
