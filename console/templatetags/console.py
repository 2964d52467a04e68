"""``{% operations_overview %}``: the front page's overview, rendered inside the admin's
own index view (console/templates/admin/index.html), so the index keeps its app list."""

from __future__ import annotations

from typing import Any

from django import template

from console import front_page

register = template.Library()


@register.inclusion_tag("admin/console/overview.html", takes_context=True)
def operations_overview(context: template.Context) -> dict[str, Any]:
    return front_page.build(context["request"])
