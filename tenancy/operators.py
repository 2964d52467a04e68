"""Who may operate what: one ``operate_<model>`` permission per operated model.

An operator action (retry a job, cancel a run, gap-fill a feed …) needs the custom
permission of the model it acts on, declared in the model's ``Meta.permissions``; the
admin, the API and the management commands all ask ``may_operate``, so the three agree.
Powers that reach every tenant (the shared reference data, the hook runners' breakers)
also need a platform operator: that is the ``platform`` condition, on top.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import models

from tenancy.scoping import tenant_scope


def operate_permission(model: type[models.Model] | models.Model) -> str:
    """``"<app_label>.operate_<model_name>"``, the permission the model's actions need."""
    meta = model._meta
    return f"{meta.app_label}.operate_{meta.model_name}"


def may_operate(user: Any, model: type[models.Model] | models.Model, *, platform: bool = False) -> bool:
    """Staff granted the model's operate permission (and, for a ``platform`` power, a
    platform operator)."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_staff:
        return False
    if platform and tenant_scope(user) is not True:
        return False
    return bool(user.has_perm(operate_permission(model)))


def grant_operate_permissions(
    apps: Any, grants: Mapping[str, Sequence[str]], *, staff: Sequence[str] = ()
) -> None:
    """For a data migration: give each new ``operate_*`` permission to the users and
    groups holding any of the permissions that let them operate before (``grants``: the
    new one's "app.codename" to the old ones'), and those of ``staff`` to every staff
    user (actions no permission guarded). Nobody loses an action on upgrade."""
    from django.contrib.auth.management import create_permissions

    # The permissions of models migrated just now are otherwise made only after every
    # migration has run (post_migrate): make them here, to grant them.
    for config in apps.get_app_configs():
        config.models_module = True
        create_permissions(config, apps=apps, verbosity=0)
        config.models_module = None
    permission = apps.get_model("auth", "Permission")
    user_model, group = apps.get_model("auth", "User"), apps.get_model("auth", "Group")

    def named(names: Sequence[str]) -> Any:
        found = permission.objects.none()
        for name in names:
            app_label, codename = name.split(".")
            found |= permission.objects.filter(content_type__app_label=app_label, codename=codename)
        return found

    for new_name in [*grants, *staff]:
        new = named([new_name]).get()
        if new_name in staff:
            new.user_set.add(*user_model.objects.filter(is_staff=True))
        old = named(grants.get(new_name, ()))
        new.user_set.add(*user_model.objects.filter(user_permissions__in=old).distinct())
        new.group_set.add(*group.objects.filter(permissions__in=old).distinct())
