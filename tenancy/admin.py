from django.contrib import admin

from tenancy.models import Membership, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "is_platform_operator"]
    list_filter = ["is_platform_operator", "tenant"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]
