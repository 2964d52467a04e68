"""Staged uploads moved from the calculator's own directory to the intake's store: a file
staged before the move, whose job is still waiting (or failed, for an operator to
retry), is copied to where the job now looks for it, then removed from the old place.

The old place is the one of that time (``FACTORS_UPLOAD_DIR``, default
``VAR_DIR/uploads``, files named ``<id>.csv``); the new one is the ``factors`` area of
``INTAKE_STAGING_URL`` (default ``VAR_DIR/staging``), files named by id. Only ids that
are 32 hex digits name files; nothing else in the old directory is touched.
"""

import os
import re
import shutil
from pathlib import Path

from django.conf import settings
from django.db import migrations
from fsspec.core import url_to_fs

UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


def move_staged_files(apps, schema_editor):
    old = Path(getattr(settings, "FACTORS_UPLOAD_DIR", None) or os.environ.get("FACTORS_UPLOAD_DIR")
               or Path(settings.VAR_DIR) / "uploads")
    if not old.is_dir():
        return
    url = (getattr(settings, "INTAKE_STAGING_URL", None) or os.environ.get("INTAKE_STAGING_URL")
           or str(Path(settings.VAR_DIR) / "staging"))
    fs, root = url_to_fs(f"{url.rstrip('/')}/factors",
                         **(getattr(settings, "INTAKE_STAGING_OPTIONS", None) or {}))
    Upload = apps.get_model("factors", "Upload")
    for upload_id in Upload.objects.values_list("id", flat=True).iterator():
        name = upload_id.hex
        source = old / f"{name}.csv"
        if not UPLOAD_ID.match(name) or not source.is_file():
            continue
        target = f"{root.rstrip('/')}/{name}"
        if not fs.exists(target):
            fs.makedirs(root, exist_ok=True)
            with source.open("rb") as reader, fs.open(target, "wb") as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)
        source.unlink()


class Migration(migrations.Migration):

    dependencies = [("factors", "0009_load_chunks")]

    operations = [migrations.RunPython(move_staged_files, migrations.RunPython.noop)]
