"""The upgrade to the operate permissions takes no action from anyone: each app's data
migration grants its new ``operate_<model>`` permissions through one helper
(``tenancy.operators.grant_operate_permissions``), so the factors app's, which uses both
of its ways (from an old permission, and to every staff user), stands for them all."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.support.base import staff

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("factors", "0012_names_with_the_app_label")
OPERATE = ("factors", "0013_operate_permissions")


@pytest.fixture
def forward_at_the_end():
    """Whatever the test does, the next one finds every app migrated to the end."""
    yield
    call_command("migrate", verbosity=0)


def migrate(target: tuple[str, str]) -> None:
    """As ``manage.py migrate`` does, without its post_migrate signal: the permissions
    the migration grants must be made by the migration itself."""
    MigrationExecutor(connection).migrate([target])
    ContentType.objects.clear_cache()


def holds(user: User, name: str) -> bool:
    return User.objects.get(pk=user.pk).has_perm(name)


def test_upgrading_grants_each_operate_permission_to_whoever_operated_before(forward_at_the_end):
    migrate(BEFORE)
    # A database from before the upgrade has none of the new permissions.
    Permission.objects.filter(content_type__app_label="factors", codename__startswith="operate_").delete()
    viewer = staff("vera")
    viewer.user_permissions.add(Permission.objects.get(codename="view_carbonreport"))
    readers = Group.objects.create(name="report readers")
    readers.permissions.add(Permission.objects.get(codename="view_carbonreport"))
    plain_staff = staff("sam")
    member = staff("mia", is_staff=False)

    migrate(OPERATE)

    assert holds(viewer, "factors.operate_carbonreport")
    assert readers.permissions.filter(codename="operate_carbonreport").exists()
    assert not holds(plain_staff, "factors.operate_carbonreport")
    # The uploads and actions any staff user had: every staff user keeps them.
    for user in (viewer, plain_staff):
        assert holds(user, "factors.operate_dataentry") and holds(user, "factors.operate_emissionfactor")
    assert not User.objects.get(pk=member.pk).user_permissions.exists()
