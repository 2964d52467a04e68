"""Organisations and who belongs to them.

Every user (and so every API token, which is a user's) belongs to one tenant or is a
platform operator who sees all tenants. A user with neither sees nothing.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Tenant(models.Model):
    name = models.CharField("name", max_length=200, unique=True)
    slug = models.SlugField("slug", max_length=60, unique=True)
    created_at = models.DateTimeField("created", auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="members",
        help_text="The organisation this user acts for. Empty for platform operators.",
    )
    is_platform_operator = models.BooleanField(
        "platform operator",
        default=False,
        help_text="Sees and acts on every tenant's jobs.",
    )

    class Meta:
        constraints = [
            # A member is either scoped to one tenant or a platform operator, never both.
            models.CheckConstraint(
                name="tenancy_membership_tenant_xor_operator",
                condition=(
                    models.Q(tenant__isnull=False, is_platform_operator=False)
                    | models.Q(tenant__isnull=True, is_platform_operator=True)
                ),
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant or 'platform'}"
