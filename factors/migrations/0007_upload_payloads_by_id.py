"""Jobs enqueued before uploads were named by id carry the old payload: the upload as an
object with its path and columns. They become an id and an ``Upload`` row, so that a
job still waiting (or a failed one an operator retries) finds its file. The row is made
only when the file is where the id says it is, under the upload directory; the path the
payload names is not used. The upload directory is the one of that time
(``FACTORS_UPLOAD_DIR``, default ``VAR_DIR/uploads``): this migration does not follow
later changes to where uploads are staged."""

import os
import re
import uuid
from pathlib import Path

from django.conf import settings
from django.db import migrations

KINDS = {"factors.csv_ingest": "entries", "factors.factor_ingest": "factors",
         "factors.unit_sync": "units"}
UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


def name_uploads_by_id(apps, schema_editor):
    directory = Path(getattr(settings, "FACTORS_UPLOAD_DIR", None) or os.environ.get("FACTORS_UPLOAD_DIR")
                     or Path(settings.VAR_DIR) / "uploads")
    Job = apps.get_model("jobs", "Job")
    Upload = apps.get_model("factors", "Upload")
    for job in Job.objects.filter(type__in=list(KINDS), payload__upload__has_key="id").iterator():
        old = job.payload["upload"]
        upload_id = str(old.get("id", ""))
        if not UPLOAD_ID.match(upload_id):
            continue
        kind = KINDS[job.type]
        tenant = job.tenant_id if kind == "entries" else None
        if (directory / f"{upload_id}.csv").exists():
            Upload.objects.get_or_create(id=uuid.UUID(upload_id), defaults={
                "kind": kind, "tenant_id": tenant, "rows": int(old.get("rows") or 0),
                "columns": [str(c) for c in old.get("columns") or []],
                "filename": str(old.get("filename") or "")[:200]})
        job.payload = {**job.payload, "upload": upload_id}
        job.save(update_fields=["payload"])


class Migration(migrations.Migration):

    dependencies = [
        ("factors", "0006_uploads_named_by_id"),
        ("jobs", "0007_running_tenant_index"),
    ]

    operations = [migrations.RunPython(name_uploads_by_id, migrations.RunPython.noop)]
