"""Conveyor's development tools: what a checkout needs and production never runs.

``./conveyor start`` (``devserver``) with the embedded PostgreSQL it starts when
``DATABASE_URL`` is unset (``embedded_db``) and the process groups it stops
(``process_groups``); fakes of the outside systems Conveyor talks to, each speaking the
real protocol (``fakes``); and ``manage.py demo`` (this package is also the Django app
that holds it, installed only with ``DEBUG``).

Not part of the product: the wheel leaves this package out and the image does not copy
it. ``./conveyor start`` and ``./conveyor test`` find it because they run from the
checkout, whose root is on ``sys.path``. The product imports one module of it,
``embedded_db``, and only inside the functions that run where ``DATABASE_URL`` is unset
(the settings, ``manage.py``, ``project/web.py``); without this package there, the
settings load and the database refuses every use (``project/no_database``).
"""
