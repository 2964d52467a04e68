"""The engine's operator surfaces, each in a room of its own: ``admin`` (the Django admin
pages and the dashboard), ``api`` (the REST API) and ``prometheus`` (the ``/metrics``
page). ``dashboard`` computes the figures that the admin's dashboard page and the API's
dashboard endpoint both show. The live streams are ``jobs.streams``.

The surfaces build on the engine's core (``jobs.engine``, ``jobs.models``, ...); the core
never imports them. import-linter checks both rules (``pyproject.toml``).
"""
