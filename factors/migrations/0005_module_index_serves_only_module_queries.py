"""The module index serves only queries that name a module.

With statistics that said ``factors_dataentry`` was empty (an ANALYZE between a delete of
every entry and a reload), every index scan costs nothing to the planner, and the
emissions' reference trigger looked entries up by ``id = ANY(…)`` through
``entry_module_type_idx``, whose third column is ``id``: a scan of the whole index per id,
minutes for a large statement. The index is now partial on ``module_id IS NOT NULL``
(true of every row): a query can use it only if its conditions imply that, which a
condition on ``module_id`` does and a lookup by id alone does not.

The module delete guard looks entries up by ``module_id = ANY(…)``, which the planner
cannot prove implies the predicate (the array might be empty), so it names it.
"""

from django.db import migrations, models

GUARD = """
CREATE OR REPLACE FUNCTION factors_modules_keep_their_entries() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM factors_dataentry
               WHERE module_id = ANY(ARRAY(SELECT id FROM old_rows))%s) THEN
        RAISE EXCEPTION 'a module that still has data entries cannot be deleted'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):

    dependencies = [("factors", "0004_entry_times_default_to_now")]

    operations = [
        migrations.RemoveIndex(model_name="dataentry", name="entry_module_type_idx"),
        migrations.AddIndex(
            model_name="dataentry",
            index=models.Index(condition=models.Q(("module__isnull", False)),
                               fields=["module", "data_entry_type", "id"],
                               name="entry_module_type_idx"),
        ),
        migrations.RunSQL(GUARD % "\n                 AND module_id IS NOT NULL", GUARD % ""),
    ]
