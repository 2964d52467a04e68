"""Foreign keys of the bulk tables, checked once per statement instead of once per row.

A FOREIGN KEY constraint checks each inserted row with its own lookup and row lock: on a
bulk load that was more than half of the time. These triggers keep the same guarantees
set-based, for any SQL (not only Conveyor's), under READ COMMITTED:

- after an INSERT or UPDATE of entries (or emissions), the distinct referenced modules
  (entries, factors) are locked FOR KEY SHARE in one statement, as a foreign key check
  would lock each; fewer rows locked than referenced means one is missing (or was
  deleted concurrently: locking skips it), and the statement fails with
  foreign_key_violation. The lock keeps them from being deleted until commit.
- deleting a module that still has entries, or a factor that still has emissions, fails
  (a deleter that waited for such a lock sees the new rows once it gets it);
- deleting entries deletes their emissions (ON DELETE CASCADE).
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION factors_require_referenced(kind text, referenced bigint, locked bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF locked < referenced THEN
        RAISE EXCEPTION 'insert or update violates foreign key: % referenced row(s) of % missing',
            referenced - locked, kind USING ERRCODE = 'foreign_key_violation';
    END IF;
END $$;

CREATE FUNCTION factors_entries_reference_modules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM factors_require_referenced('factors_reportmodule',
        (SELECT count(DISTINCT module_id) FROM new_rows),
        (SELECT count(*) FROM (SELECT 1 FROM factors_reportmodule
                               WHERE id IN (SELECT module_id FROM new_rows)
                               ORDER BY id FOR KEY SHARE) AS locked));
    RETURN NULL;
END $$;

CREATE TRIGGER factors_dataentry_module_fk_insert AFTER INSERT ON factors_dataentry
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION factors_entries_reference_modules();
CREATE TRIGGER factors_dataentry_module_fk_update AFTER UPDATE ON factors_dataentry
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION factors_entries_reference_modules();

CREATE FUNCTION factors_emissions_reference_entries_and_factors() RETURNS trigger
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

CREATE TRIGGER factors_emission_fk_insert AFTER INSERT ON factors_emission
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION factors_emissions_reference_entries_and_factors();
CREATE TRIGGER factors_emission_fk_update AFTER UPDATE ON factors_emission
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION factors_emissions_reference_entries_and_factors();

CREATE FUNCTION factors_modules_keep_their_entries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM factors_dataentry
               WHERE module_id IN (SELECT id FROM old_rows)) THEN
        RAISE EXCEPTION 'a module that still has data entries cannot be deleted'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER factors_reportmodule_restrict_delete AFTER DELETE ON factors_reportmodule
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION factors_modules_keep_their_entries();

CREATE FUNCTION factors_factors_keep_their_emissions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM factors_emission
               WHERE factor_id IN (SELECT id FROM old_rows)) THEN
        RAISE EXCEPTION 'an emission factor used by emissions cannot be deleted'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER factors_emissionfactor_protect_delete AFTER DELETE ON factors_emissionfactor
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION factors_factors_keep_their_emissions();

CREATE FUNCTION factors_entries_take_their_emissions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM factors_emission WHERE data_entry_id IN (SELECT id FROM old_rows);
    RETURN NULL;
END $$;

CREATE TRIGGER factors_dataentry_cascade_delete AFTER DELETE ON factors_dataentry
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION factors_entries_take_their_emissions();
"""

BACKWARD = """
DROP TRIGGER factors_dataentry_cascade_delete ON factors_dataentry;
DROP TRIGGER factors_emissionfactor_protect_delete ON factors_emissionfactor;
DROP TRIGGER factors_reportmodule_restrict_delete ON factors_reportmodule;
DROP TRIGGER factors_emission_fk_update ON factors_emission;
DROP TRIGGER factors_emission_fk_insert ON factors_emission;
DROP TRIGGER factors_dataentry_module_fk_update ON factors_dataentry;
DROP TRIGGER factors_dataentry_module_fk_insert ON factors_dataentry;
DROP FUNCTION factors_entries_take_their_emissions();
DROP FUNCTION factors_factors_keep_their_emissions();
DROP FUNCTION factors_modules_keep_their_entries();
DROP FUNCTION factors_emissions_reference_entries_and_factors();
DROP FUNCTION factors_entries_reference_modules();
DROP FUNCTION factors_require_referenced(text, bigint, bigint);
"""


class Migration(migrations.Migration):

    dependencies = [
        ("factors", "0001_initial"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
