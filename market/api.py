"""``GET /quality/status``: how fresh the market data is, for a monitor and for people.

Anyone may ask for the overall status (the worst source's), which is all a monitor needs
and says nothing of any tenant's data. A signed-in caller also gets each source of the
feeds of their tenant (a platform operator: of every tenant), with its computed status,
and the overall status of those sources only.

An overall ``error`` is answered with HTTP 503 and the same body, so that a plain uptime
check, which reads the status code only, alerts too.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

import jobs
from market import freshness, services
from market.models import MarketFeed
from tenancy.scoping import scope_queryset

STATUSES = [freshness.HEALTHY, freshness.STALE, freshness.ERROR, freshness.NEVER_INGESTED]


class SourceStatusSerializer(serializers.Serializer):
    feed = serializers.CharField()
    source = serializers.CharField(source="dataset")
    status = serializers.ChoiceField(choices=STATUSES)
    last_success = serializers.DateTimeField(allow_null=True)
    last_failure = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True, help_text="The last failed attempt's error.")
    rows_today = serializers.IntegerField(
        help_text="Rows of the current market date, each once: the daily bars of that date; the "
        "feed's instruments once a load of them succeeded that day; the calendar rows of the "
        "day's latest successful load."
    )
    old_gaps = serializers.IntegerField(
        help_text="Open days before the gap-fill's look-back without bars (daily only): no batch "
        "heals them; any makes the source an error."
    )
    message = serializers.CharField(
        allow_blank=True, help_text="What else makes the status what it is (the old gaps, newest first)."
    )


class QualityStatusSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=STATUSES)
    checked_at = serializers.DateTimeField()
    sources = SourceStatusSerializer(many=True, required=False)


class QualityStatus(APIView):
    """The market data's freshness: overall for anyone, per source for a signed-in caller."""

    permission_classes = [AllowAny]

    @extend_schema(
        tags=["market"],
        summary="Market data freshness",
        responses={
            200: OpenApiResponse(QualityStatusSerializer, description="The overall status is not `error`."),
            503: OpenApiResponse(
                QualityStatusSerializer,
                description="The overall status is `error` (the same body): an uptime check alerts.",
            ),
        },
    )
    def get(self, request: Request) -> Response:
        now = jobs.now()
        feeds = MarketFeed.objects.filter(enabled=True).order_by("name", "pk")
        if not request.user.is_authenticated:
            everyone = services.source_statuses(list(feeds), now)
            return _answer({"status": freshness.overall([row.status for row in everyone]), "checked_at": now})
        # A signed-in caller's status is the worst of the sources they are shown: another
        # tenant's failing feed neither contradicts their list nor shows through it.
        sources = services.source_statuses(list(scope_queryset(feeds, request.user)), now)
        return _answer(
            {
                "status": freshness.overall([row.status for row in sources]),
                "checked_at": now,
                "sources": sources,
            }
        )


def _answer(body: dict[str, Any]) -> Response:
    return Response(
        QualityStatusSerializer(body).data, status=503 if body["status"] == freshness.ERROR else 200
    )
