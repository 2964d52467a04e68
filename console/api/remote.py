"""The internal API of remote workers (``jobs.remote``): how a worker outside the cluster,
with no database credentials, runs the engine's jobs.

Every call carries ``Authorization: Bearer <token>`` of a credential of
``JOBS_REMOTE_WORKERS`` and the worker's name; the reports carry the ``lease`` of the
claim that took the job.

    POST /internal/jobs/claim                {"worker", "limit", "queues"?}
         → {"lease", "heartbeat_seconds", "jobs": [{"id", "type", "queue", "payload",
            "attempt", "lease_seconds", "deadline", "details", …}]}
    POST /internal/jobs/heartbeat            {"worker", "lease", "jobs", "progress"?}
         → {"renewed": [ids], "lost": [{"id", "state", "reason"}], "heartbeat_seconds"}
    POST /internal/jobs/<id>/complete        {"worker", "lease", "result"?, "progress"?}
    POST /internal/jobs/<id>/fail            {"worker", "lease", "error", "permanent"?}
    POST /internal/jobs/<id>/snooze          {"worker", "lease", "seconds", "message"?, "wake_on"?,
                                              "details"?}
         → {"job": {"id", "state", "attempts", "run_after"}}, or 409 {"lost": {…}}
    POST /internal/jobs/release              {"worker", "lease", "jobs"} → {"released": n}

A job the lease no longer holds (cancelled, recovered, rescued, past its time limit) is
answered 409 with what became of it, and comes back in a heartbeat's ``lost``: the
worker stops its work. A wrong token counts against its address as a wrong API token
does (``console.throttling.wrong_token``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console.throttling import wrong_token
from jobs import remote
from jobs.errors import InvalidArgument
from jobs.models import Job


class RemoteWorker(BasePermission):
    message = "remote workers send Authorization: Bearer <the token of their JOBS_REMOTE_WORKERS credential>"

    def has_permission(self, request: Request, view: Any) -> bool:
        offered = request.headers.get("Authorization", "")
        credential = remote.authenticate(offered)
        if credential is None:
            if offered:
                wrong_token(request)
            return False
        request.remote_credential = credential  # type: ignore[attr-defined]
        return True


class ProgressSerializer(serializers.Serializer):
    done = serializers.IntegerField(min_value=0)
    total = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    message = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class WorkerSerializer(serializers.Serializer):
    worker = serializers.CharField(max_length=remote.WORKER_NAME_LENGTH)


class ClaimSerializer(WorkerSerializer):
    limit = serializers.IntegerField(min_value=1, max_value=remote.MAX_CLAIM)
    queues = serializers.ListField(child=serializers.CharField(max_length=50), required=False, max_length=50)


class LeaseSerializer(WorkerSerializer):
    lease = serializers.UUIDField()


class HeldSerializer(LeaseSerializer):
    jobs = serializers.ListField(child=serializers.IntegerField(min_value=1), max_length=remote.MAX_HELD)


class HeartbeatSerializer(HeldSerializer):
    progress = serializers.DictField(child=ProgressSerializer(), required=False, default=dict)

    def validate_progress(self, value: dict[str, Any]) -> dict[int, tuple[int, int | None, str]]:
        steps = {}
        for key, step in value.items():
            if not str(key).isdigit():
                raise ValidationError(f"progress is keyed by job id, got {key!r}")
            steps[int(key)] = (step["done"], step["total"], step["message"])
        return steps


class CompleteSerializer(LeaseSerializer):
    result = serializers.JSONField(required=False, allow_null=True, default=None)
    progress = ProgressSerializer(required=False, allow_null=True, default=None)


class FailSerializer(LeaseSerializer):
    error = serializers.CharField(max_length=10_000)
    permanent = serializers.BooleanField(required=False, default=False)


class SnoozeSerializer(LeaseSerializer):
    seconds = serializers.FloatField(min_value=0, max_value=remote.MAX_SNOOZE_SECONDS)
    message = serializers.CharField(max_length=2_000, required=False, allow_blank=True, default="")
    wake_on = serializers.CharField(max_length=200, required=False, allow_null=True, default=None)
    # What the worker waits for, for the job type's own rows (a query's id, say).
    details = serializers.DictField(required=False, default=dict)


def job_answer(job: Job) -> dict[str, Any]:
    return {
        "id": job.pk,
        "state": job.state,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_after": job.run_after,
        "error_kind": job.error_kind,
    }


def claimed_job(job: Job, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": job.pk,
        "type": job.type,
        "queue": job.queue,
        "payload": job.payload,
        "tenant": job.tenant_id,
        "pipeline": job.pipeline_id,
        "attempt": job.attempts,
        "max_attempts": job.max_attempts,
        "lease_seconds": remote.lease_of(job),
        "lease_expires_at": job.lease_expires_at,
        "deadline": remote.deadline_of(job),
        "details": details,
    }


class _Remote(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [RemoteWorker]
    throttle_classes: list[Any] = []
    serializer_class: type[serializers.Serializer] = WorkerSerializer

    def valid(self, request: Request) -> dict[str, Any]:
        serializer = self.serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def credential(self, request: Request) -> remote.Credential:
        return request.remote_credential  # type: ignore[attr-defined]

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, remote.NotHeld):
            return Response({"detail": str(exc), "lost": exc.lost}, status=status.HTTP_409_CONFLICT)
        if isinstance(exc, InvalidArgument):
            exc = ValidationError({exc.argument: [str(exc)]})
        return super().handle_exception(exc)


@extend_schema(exclude=True)
class Claim(_Remote):
    serializer_class = ClaimSerializer

    def post(self, request: Request) -> Response:
        data = self.valid(request)
        claimed = remote.claim(
            self.credential(request), data["worker"], limit=data["limit"], queues=data.get("queues")
        )
        return Response(
            {
                "lease": claimed.token,
                "worker": claimed.worker,
                "heartbeat_seconds": claimed.heartbeat_seconds,
                "jobs": [claimed_job(job, claimed.details[job.pk]) for job in claimed.jobs],
            }
        )


@extend_schema(exclude=True)
class Heartbeat(_Remote):
    serializer_class = HeartbeatSerializer

    def post(self, request: Request) -> Response:
        data = self.valid(request)
        beat = remote.heartbeat(
            self.credential(request), data["worker"], data["lease"], data["jobs"], progress=data["progress"]
        )
        return Response(
            {"renewed": beat.renewed, "lost": beat.lost, "heartbeat_seconds": beat.heartbeat_seconds}
        )


@extend_schema(exclude=True)
class Complete(_Remote):
    serializer_class = CompleteSerializer

    def post(self, request: Request, job_id: int) -> Response:
        data = self.valid(request)
        step = data["progress"]
        job = remote.complete(
            self.credential(request),
            data["worker"],
            job_id,
            data["lease"],
            result=data["result"],
            progress=None if step is None else (step["done"], step["total"], step["message"]),
        )
        return Response({"job": job_answer(job)})


@extend_schema(exclude=True)
class Fail(_Remote):
    serializer_class = FailSerializer

    def post(self, request: Request, job_id: int) -> Response:
        data = self.valid(request)
        job = remote.fail(
            self.credential(request),
            data["worker"],
            job_id,
            data["lease"],
            error=data["error"],
            permanent=data["permanent"],
        )
        return Response({"job": job_answer(job)})


@extend_schema(exclude=True)
class Snooze(_Remote):
    serializer_class = SnoozeSerializer

    def post(self, request: Request, job_id: int) -> Response:
        data = self.valid(request)
        job = remote.snooze(
            self.credential(request),
            data["worker"],
            job_id,
            data["lease"],
            seconds=data["seconds"],
            message=data["message"],
            wake_on=data["wake_on"],
            details=data["details"],
        )
        return Response({"job": job_answer(job)})


@extend_schema(exclude=True)
class Release(_Remote):
    serializer_class = HeldSerializer

    def post(self, request: Request) -> Response:
        data = self.valid(request)
        released = remote.release(self.credential(request), data["worker"], data["lease"], data["jobs"])
        return Response({"released": released})
