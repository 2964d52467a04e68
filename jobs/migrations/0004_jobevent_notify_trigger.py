"""Every committed JobEvent row is announced on the ``conveyor_job_events`` channel.

A statement-level trigger (one call per INSERT statement, however many rows) sends the
new ids: ``lo-hi`` when they are contiguous (the usual case: one statement draws them
from the sequence together), else a comma list, or ``lo-hi`` as a superset when the list
would not fit NOTIFY's 8000 bytes (the streams hub drops ids it has already sent).
NOTIFY is delivered on commit and never for a rollback, so whatever inserts the row (the
engine's ORM writes, its SQL CTEs, bulk_create, the reaper) reaches the streams.

0020 drops the trigger: the streams now follow the table by id.
"""

from django.db import migrations

CREATE = """
CREATE FUNCTION jobs_jobevent_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lo bigint;
    hi bigint;
    n bigint;
    ids text;
BEGIN
    SELECT min(id), max(id), count(*) INTO lo, hi, n FROM new_events;
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    IF hi - lo + 1 = n THEN
        PERFORM pg_notify('conveyor_job_events', lo || '-' || hi);
        RETURN NULL;
    END IF;
    SELECT string_agg(id::text, ',') INTO ids FROM new_events;
    IF length(ids) > 7000 THEN
        ids := lo || '-' || hi;
    END IF;
    PERFORM pg_notify('conveyor_job_events', ids);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_jobevent_notify
    AFTER INSERT ON jobs_jobevent
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_jobevent_notify();
"""

DROP = """
DROP TRIGGER IF EXISTS jobs_jobevent_notify ON jobs_jobevent;
DROP FUNCTION IF EXISTS jobs_jobevent_notify();
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0003_unique_key_per_tenant")]

    operations = [migrations.RunSQL(CREATE, DROP)]
