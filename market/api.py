"""``GET /quality/status``: how fresh the market data is, for a monitor and for people.

Anyone may ask for the overall status (the worst source's), which is all a monitor needs
and says nothing of any tenant's data. A signed-in caller also gets each source of the
feeds of their tenant (a platform operator: of every tenant), with its computed status,
and the overall status of those sources only.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
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
    last_error = serializers.CharField(allow_blank=True)
    rows_today = serializers.IntegerField()


class QualityStatusSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=STATUSES)
    checked_at = serializers.DateTimeField()
    sources = SourceStatusSerializer(many=True, required=False)


class QualityStatus(APIView):
    """The market data's freshness: overall for anyone, per source for a signed-in caller."""

    permission_classes = [AllowAny]

    @extend_schema(tags=["market"], summary="Market data freshness", responses={200: QualityStatusSerializer})
    def get(self, request: Request) -> Response:
        now = jobs.now()
        feeds = MarketFeed.objects.filter(enabled=True).order_by("name", "pk")
        if not request.user.is_authenticated:
            everyone = services.source_statuses(list(feeds), now)
            return Response(
                QualityStatusSerializer(
                    {"status": freshness.overall([row.status for row in everyone]), "checked_at": now}
                ).data
            )
        # A signed-in caller's status is the worst of the sources they are shown: another
        # tenant's failing feed neither contradicts their list nor shows through it.
        sources = services.source_statuses(list(scope_queryset(feeds, request.user)), now)
        return Response(
            QualityStatusSerializer(
                {
                    "status": freshness.overall([row.status for row in sources]),
                    "checked_at": now,
                    "sources": sources,
                }
            ).data
        )
