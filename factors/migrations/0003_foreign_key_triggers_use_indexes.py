"""The set-based foreign keys of migration 0002 look their rows up by index, whatever the
size of the statement and whenever their plans were made.

A PL/pgSQL function plans each of its queries once per connection and keeps the plan
until the tables it reads are invalidated (an ANALYZE, a DDL statement). A transition
table's row count is known to the planner, but only the count of the statement that
happened to run first: the cascade planned for a bulk DELETE of 200,000 entries while
``factors_emission`` was still empty kept a hash join over a sequential scan of
``factors_emission``, and every later one-entry DELETE on that connection read the whole
table (100-150 ms with a million emissions, until autovacuum's ANALYZE happened to
replan it).

Each lookup of referenced or referencing rows is now ``= ANY(ARRAY(SELECT … FROM
transition table))``: an index scan by the array's elements, whose plan does not depend
on how many there are (the planner cannot see into the array), and ``enable_seqscan =
off`` on these functions keeps a table that was small when the plan was made from being
planned as a sequential scan. The same plan is right for one row and for a batch: it
measured as fast for one row, and faster for bulk statements (DELETE of 10,000 entries
32 → 20 ms, INSERT of 10,000 emissions 40 → 31 ms, DELETE of a million entries 5.2 →
2.2 s, on a million entries and emissions).

Nothing else changes: the same rows are locked ``FOR KEY SHARE`` (modules and factors in
id order), counted against the same distinct references, with the same errors; a row
deleted concurrently is still skipped by the lock and fails the statement. Deleting a
factor still scans the emissions (``factor_id`` has no index: factors are marked stale,
not deleted), so ``factors_factors_keep_their_emissions`` keeps its hash join.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION factors_entries_reference_modules() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    PERFORM factors_require_referenced('factors_reportmodule',
        (SELECT count(DISTINCT module_id) FROM new_rows),
        (SELECT count(*) FROM (SELECT 1 FROM factors_reportmodule
                               WHERE id = ANY(ARRAY(SELECT DISTINCT module_id FROM new_rows))
                               ORDER BY id FOR KEY SHARE) AS locked));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION factors_emissions_reference_entries_and_factors() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    PERFORM factors_require_referenced('factors_dataentry',
        (SELECT count(DISTINCT data_entry_id) FROM new_rows),
        (SELECT count(*) FROM (SELECT 1 FROM factors_dataentry
                               WHERE id = ANY(ARRAY(SELECT data_entry_id FROM new_rows))
                               FOR KEY SHARE) AS locked));
    PERFORM factors_require_referenced('factors_emissionfactor',
        (SELECT count(DISTINCT factor_id) FROM new_rows),
        (SELECT count(*) FROM (SELECT 1 FROM factors_emissionfactor
                               WHERE id = ANY(ARRAY(SELECT DISTINCT factor_id FROM new_rows))
                               ORDER BY id FOR KEY SHARE) AS locked));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION factors_modules_keep_their_entries() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM factors_dataentry
               WHERE module_id = ANY(ARRAY(SELECT id FROM old_rows))) THEN
        RAISE EXCEPTION 'a module that still has data entries cannot be deleted'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION factors_entries_take_their_emissions() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    DELETE FROM factors_emission WHERE data_entry_id = ANY(ARRAY(SELECT id FROM old_rows));
    RETURN NULL;
END $$;
"""

# Migration 0002's bodies (CREATE OR REPLACE also drops the SET clause).
BACKWARD = """
CREATE OR REPLACE FUNCTION factors_entries_reference_modules() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM factors_require_referenced('factors_reportmodule',
        (SELECT count(DISTINCT module_id) FROM new_rows),
        (SELECT count(*) FROM (SELECT 1 FROM factors_reportmodule
                               WHERE id IN (SELECT module_id FROM new_rows)
                               ORDER BY id FOR KEY SHARE) AS locked));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION factors_emissions_reference_entries_and_factors() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM factors_require_referenced('factors_dataentry',
        (SELECT count(DISTINCT data_entry_id) FROM new_rows),
        (SELECT count(*) FROM (SELECT 1 FROM factors_dataentry
                               WHERE id IN (SELECT data_entry_id FROM new_rows)
                               FOR KEY SHARE) AS locked));
    PERFORM factors_require_referenced('factors_emissionfactor',
        (SELECT count(DISTINCT factor_id) FROM new_rows),
        (SELECT count(*) FROM (SELECT 1 FROM factors_emissionfactor
                               WHERE id IN (SELECT factor_id FROM new_rows)
                               ORDER BY id FOR KEY SHARE) AS locked));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION factors_modules_keep_their_entries() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM factors_dataentry
               WHERE module_id IN (SELECT id FROM old_rows)) THEN
        RAISE EXCEPTION 'a module that still has data entries cannot be deleted'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION factors_entries_take_their_emissions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM factors_emission WHERE data_entry_id IN (SELECT id FROM old_rows);
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):

    dependencies = [
        ("factors", "0002_set_based_foreign_keys"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
