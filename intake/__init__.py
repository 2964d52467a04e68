"""Domain-free intake shared by the pipelines: reading what tenants send or point us at.

- ``intake.http_sources``: fetches tenant-supplied URLs under the outbound rules (public
  addresses only unless allow-listed, every hop checked, a total deadline, a size
  bound); reads JSON documents, fetched or uploaded, with numbers kept as text.
- ``intake.addresses`` and ``intake.connections``: the address rules and the guarded
  connections the fetches go through.
- ``intake.csv_validation``: streaming CSV validation against a schema (``CsvSchema``,
  ``Column``), with a bounded error report (``ValidationReport``, ``CsvError``).
- ``intake.staging``: staged files through fsspec under ``INTAKE_STAGING_URL``, one area
  per app; ``stage_csv`` validates and stages in one pass.
- ``intake.uploads``: API views' uploads: 413 before a too large body is read, and a
  refused file's report as a 400 body.
- ``intake.conf`` and ``intake.checks``: the ``INTAKE_*`` settings and their system
  checks.

Nothing here knows a domain app or the job engine: callers turn its errors into their
own outcomes, and keep their own records of what they staged.
"""
