"""The live streams no longer need a NOTIFY per history row: they follow ``jobs_jobevent``
by id (``console.streams.pgsource``). The trigger of 0004 goes, and with it the lock every
claim and completion commit took: PostgreSQL serialises the commits of transactions that
sent a notification.

Migrating back recreates the trigger and its function exactly as 0004 made them.
"""

from django.db import migrations

DROP = """
DROP TRIGGER IF EXISTS jobs_jobevent_notify ON jobs_jobevent;
DROP FUNCTION IF EXISTS jobs_jobevent_notify();
"""


# As in 0004_jobevent_notify_trigger.
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


class Migration(migrations.Migration):
    dependencies = [("jobs", "0020_lighter_history_indexes")]

    operations = [migrations.RunSQL(DROP, CREATE)]
