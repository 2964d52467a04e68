"""``manage.py qcluster``: django-q2's cluster, started once the database answers.

django-q2's sentinel opens its ORM broker as it starts; with the database unreachable it
exits at once, and so does the command, so a cluster started during an outage (a
restart, a failover, a whole stack booting together) would stay down unless something
restarted it. This command, which takes the place of django-q2's own (``jobs`` comes
first in ``INSTALLED_APPS``), first waits for the database with the engine's backoff.
Once the cluster runs, its engine workers wait out later faults themselves. SIGTERM
during the wait ends the command at once, as before any cluster started.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import OperationalError, connection
from django_q.management.commands.qcluster import Command as QClusterCommand

from jobs.backoff import FailureStreak

logger = logging.getLogger(__name__)


class Command(QClusterCommand):
    help = (
        "Start the django-q2 cluster (and an engine worker in each of its processes) "
        "once the database answers."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        wait_for_database()
        super().handle(*args, **options)


def wait_for_database() -> None:
    """Return once a connection to the default database opens; closed again, so that no
    process the cluster forks inherits it."""
    failures = FailureStreak()
    while True:
        try:
            connection.ensure_connection()
        except OperationalError as error:
            delay = failures.failed()
            logger.warning(
                "waiting for the database before starting the cluster (%d tries: %s); trying again in %.2f s",
                failures.failures,
                str(error).strip(),
                delay,
            )
            time.sleep(delay)
        else:
            break
        finally:
            connection.close()
