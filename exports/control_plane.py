"""The control plane's internal API for export workers: the only way a worker reads or
changes export jobs. A worker holds no credentials for Conveyor's database; it holds
the bearer token ``EXPORTS_WORKER_TOKEN``, which opens these four endpoints and nothing
else (it is no user's token, and no other view accepts it).

    POST /internal/exports/claim                     {"worker", "limit"}  → {"jobs": [...]}
    POST /internal/exports/pollable                  {"worker", "limit"}  → {"jobs": [...]}
    POST /internal/exports/jobs/<id>/report          a Report             → {"job": {...}}
    POST /internal/exports/snapshots/<id>/finalize                         → {"status"}

A claim and a poll answer each job with a secret ``claim_token`` for that worker alone
(the control plane keeps its hash). A report carries it with the claim's number; one
from a claim that is no longer the job's, or without the secret of the current claim
or poll, is answered 409 with the job's status and claim: the worker drops the job (and
cancels a query it submitted late). A completion's ``files`` must lie inside the job's
folder, else 400 and nothing changes.
"""

from __future__ import annotations

import hmac
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import StreamedJSONParser, wrong_token
from exports import conf, services
from exports.models import ExportJob, JobStatus, Snapshot
from exports.spec import JobSpec
from intake.uploads import body_limit


def worker_token_matches(authorization: str) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <EXPORTS_WORKER_TOKEN>`` (in
    constant time). The web server's body limiter asks it too (project/bodylimit.py)."""
    token = conf.get("WORKER_TOKEN")
    return bool(token) and hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode())


class WorkerToken(BasePermission):
    """The caller sends ``Authorization: Bearer <EXPORTS_WORKER_TOKEN>``. A wrong one
    counts against its address as a wrong API token does, and past that rate is a 429
    (``console.throttling.wrong_token``); the right one is never refused for the others."""

    message = "export workers send Authorization: Bearer <EXPORTS_WORKER_TOKEN>"

    def has_permission(self, request: Request, view: Any) -> bool:
        offered = request.headers.get("Authorization", "")
        if worker_token_matches(offered):
            return True
        if offered:
            wrong_token(request)
        return False


def spec_of(job: ExportJob, claim_token: str = "") -> dict[str, Any]:
    """The job as a worker is told it; the claim's secret only in the answer that issued it."""
    return JobSpec(
        id=job.pk,
        snapshot_id=job.snapshot_id,
        tenant_id=job.tenant_id,
        generation=job.generation,
        job_type=job.job_type,
        entity_name=job.entity_name,
        engine=job.engine,
        sql=job.sql,
        column_names=tuple(job.column_names),
        column_types=tuple(job.column_types),
        catalog=job.catalog,
        starburst_role=job.starburst_role,
        destination=job.destination,
        status=job.status,
        query_id=job.query_id,
        next_uri=job.next_uri,
        poll_count=job.poll_count,
        claim_token=claim_token,
        heartbeat_seconds=services.heartbeat_seconds(),
    ).to_json()


# The workers' reports are the largest bodies; every address of the internal API takes one.
@body_limit(conf.report_max_bytes)
class _Internal(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [WorkerToken]
    throttle_classes: list[Any] = []


class TakeSerializer(serializers.Serializer):
    worker = serializers.CharField(max_length=200)
    limit = serializers.IntegerField(min_value=1, max_value=100)


def _valid(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


@extend_schema(exclude=True)
class Claim(_Internal):
    """Claim up to ``limit`` pending jobs (at most ``EXPORTS_CLAIM_LIMIT``)."""

    def post(self, request: Request) -> Response:
        data = _valid(TakeSerializer, request.data)
        taken = services.claim(data["worker"], data["limit"])
        return Response({"jobs": [spec_of(job, token) for job, token in taken]})


@extend_schema(exclude=True)
class Pollable(_Internal):
    """Take up to ``limit`` submitted jobs due for a poll (at most ``EXPORTS_POLL_LIMIT``)."""

    def post(self, request: Request) -> Response:
        data = _valid(TakeSerializer, request.data)
        taken = services.due_for_poll(data["worker"], data["limit"])
        return Response({"jobs": [spec_of(job, token) for job, token in taken]})


# A report's file list: at most this many paths of at most this many characters (an
# object store's key takes 1,024 bytes, and a path adds its scheme and bucket). Such a
# report is about 12 MB of JSON, within EXPORTS_REPORT_MAX_BYTES (16 MB), the web
# server's limit for the internal API's views too (their body_limit).
MAX_REPORT_FILES = 10_000
MAX_FILE_PATH = 1_200


class ReportBodyParser(StreamedJSONParser):
    """A report's JSON, read as it arrives: up to ``EXPORTS_REPORT_MAX_BYTES``, more than
    Django keeps of a body in memory (``DATA_UPLOAD_MAX_MEMORY_SIZE``)."""

    max_bytes_setting = "EXPORTS_REPORT_MAX_BYTES"


class ReportSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[
            JobStatus.PENDING,
            JobStatus.CLAIMED,
            JobStatus.SUBMITTED,
            JobStatus.COMPLETED,
            JobStatus.FAILED,
        ]
    )
    generation = serializers.IntegerField(min_value=0)
    worker = serializers.CharField(max_length=200)
    # Missing or wrong, the report is refused as a lost claim is (409), not as a bad one.
    claim_token = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    query_id = serializers.CharField(max_length=200, required=False, default="")
    next_uri = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    poll_count = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    row_count = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    size_bytes = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    files = serializers.ListField(
        child=serializers.CharField(max_length=MAX_FILE_PATH),
        max_length=MAX_REPORT_FILES,
        required=False,
        default=list,
    )
    error_message = serializers.CharField(max_length=4000, required=False, default="", allow_blank=True)
    note = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


@extend_schema(exclude=True)
class Report(_Internal):
    """A worker's report on a job it holds."""

    parser_classes = [ReportBodyParser]

    def post(self, request: Request, job_id: int) -> Response:
        data = _valid(ReportSerializer, request.data)
        data["files"] = tuple(data["files"])
        try:
            job = services.report(job_id, services.Report(**data))
        except ExportJob.DoesNotExist:
            raise NotFound(f"no export job {job_id}") from None
        except services.InvalidReport as error:
            raise ValidationError({error.field: [str(error)]}) from None
        except services.ClaimLost as lost:
            return Response(
                {"detail": str(lost), "status": lost.job.status, "generation": lost.job.generation},
                status=status.HTTP_409_CONFLICT,
            )
        return Response({"job": spec_of(job)})


@extend_schema(exclude=True)
class Finalize(_Internal):
    """Finish the snapshot if none of its jobs is left; its status either way."""

    def post(self, request: Request, snapshot_id: int) -> Response:
        if not Snapshot.objects.filter(pk=snapshot_id).exists():
            raise NotFound(f"no snapshot {snapshot_id}")
        services.finish_snapshot(snapshot_id)
        return Response({"status": Snapshot.objects.values_list("status", flat=True).get(pk=snapshot_id)})
