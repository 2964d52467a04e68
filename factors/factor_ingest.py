"""Upserting a factor upload in place, so that factor ids (and the emissions that point at
them) survive every re-upload.

One statement inserts new factors and updates existing ones on the unique key (type,
year, classification) — JSONB, so the order of the classification's keys cannot create
a duplicate. Factors that the upload does not list keep their row and id and are marked
stale: "not in the latest upload", visible to operators, still linked. Stale tracking
follows the (type, year) pairs the file covers: a file of one year's factors says
nothing about the other years of its type, whose factors keep their stale flag as it was.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from psycopg import sql

import jobs
from factors import catalog
from factors.staging import StagedUpload

_UPSERT = """
WITH incoming AS (
    SELECT %(type)s AS data_entry_type, s.year::int AS year,
           jsonb_build_object({classification}) AS classification,
           s.value::numeric AS value, coalesce(s.source, '') AS source
    FROM {table} s
), previous AS (
    SELECT f.id, f.value FROM factors_emissionfactor f JOIN incoming i
      ON (f.data_entry_type, f.year, f.classification)
       = (i.data_entry_type, i.year, i.classification)
), upserted AS (
    INSERT INTO factors_emissionfactor AS f (data_entry_type, year, classification, value,
                                             unit, source, last_seen_job_id, is_stale,
                                             created_at, updated_at)
    SELECT data_entry_type, year, classification, value, %(unit)s, source, %(job)s, false,
           %(now)s, %(now)s
    FROM incoming
    ON CONFLICT (data_entry_type, year, classification) DO UPDATE
       SET value = EXCLUDED.value, unit = EXCLUDED.unit, source = EXCLUDED.source,
           last_seen_job_id = EXCLUDED.last_seen_job_id, is_stale = false,
           updated_at = CASE WHEN (f.value, f.source) IS DISTINCT FROM
                                  (EXCLUDED.value, EXCLUDED.source)
                             THEN EXCLUDED.updated_at ELSE f.updated_at END
    RETURNING f.id, (xmax = 0) AS inserted, f.value, f.year
)
SELECT count(*), count(*) FILTER (WHERE u.inserted),
       count(*) FILTER (WHERE NOT u.inserted AND u.value <> p.value),
       coalesce(array_agg(DISTINCT u.year), '{{}}')
FROM upserted u LEFT JOIN previous p ON p.id = u.id
"""

_MARK_STALE = """
UPDATE factors_emissionfactor SET is_stale = (last_seen_job_id IS DISTINCT FROM %(job)s)
WHERE data_entry_type = %(type)s AND year = ANY(%(years)s)
  AND is_stale IS DISTINCT FROM (last_seen_job_id IS DISTINCT FROM %(job)s)
"""


def upsert(job: jobs.Job, data_entry_type: str, upload: StagedUpload) -> dict[str, Any]:
    """Load the staged factors of one type; in the caller's (the job's) transaction."""
    spec = catalog.spec(data_entry_type)
    table = _stage(data_entry_type, upload)
    classification = sql.SQL(", ").join(
        sql.SQL("{}, lower(s.{})").format(sql.Literal(key), sql.Identifier(f"k_{key}")) for key in spec.keys
    )
    statement = sql.SQL(_UPSERT).format(classification=classification, table=sql.Identifier(table))
    with connection.cursor() as cursor:
        cursor.execute(
            statement.as_string(cursor.connection),
            {"type": data_entry_type, "unit": spec.unit, "job": job.pk, "now": jobs.now()},
        )
        rows, inserted, changed, years = cursor.fetchone()
        cursor.execute(_MARK_STALE, {"job": job.pk, "type": data_entry_type, "years": years})
        cursor.execute(
            "SELECT count(*), (array_agg(id ORDER BY id))[1:50] "
            "FROM factors_emissionfactor WHERE data_entry_type = %s AND is_stale",
            [data_entry_type],
        )
        stale, stale_ids = cursor.fetchone()
    return {
        "rows": rows,
        "inserted": inserted,
        "value_changed": changed,
        "unchanged": rows - inserted - changed,
        "stale": stale,
        "stale_ids": stale_ids or [],
        "years": sorted(years),
    }


def _stage(data_entry_type: str, upload: StagedUpload) -> str:
    """COPY the staged file into a temporary table."""
    spec = catalog.spec(data_entry_type)
    table = f"factors_stage_factor_{data_entry_type}"
    keys = ", ".join(f"k_{key} text" for key in spec.keys)
    names = [name if name in ("year", "value", "unit", "source") else f"k_{name}" for name in upload.columns]
    with connection.cursor() as cursor:
        # Dropped at commit; dropped first too, in case this connection's last upsert ran
        # inside a transaction that has not ended (a test's).
        cursor.execute(f"DROP TABLE IF EXISTS pg_temp.{table}")
        cursor.execute(
            f"CREATE TEMPORARY TABLE {table} (year text, {keys}, value text, "
            "unit text, source text) ON COMMIT DROP"
        )
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
            sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, names))
        )
        with upload.open() as handle, cursor.copy(statement.as_string(cursor.connection)) as copy:
            while chunk := handle.read(1 << 20):
                copy.write(chunk)
    return table
