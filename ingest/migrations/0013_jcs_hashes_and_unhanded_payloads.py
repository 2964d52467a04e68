"""Payload hashes become RFC 8785 (JCS) ones, and payloads stored without a handoff get
one.

1. A stored hash is recomputed where JCS writes the payload otherwise than before: a
   float (``1.0`` is ``1``), or a key past U+FFFF. The reference's hash and its handoff of
   that payload change together, so that the next sync of the same payload finds it
   unchanged and a failed handoff of it can still be redriven; the handoffs' ``updated_at``
   is left as it was (their trigger is held for the statement).
2. A reference whose payload has no handoff (it was stored while this app was migrated
   back below 0003, when syncs store references only) is handed off: a queued handoff,
   waiting for no job yet, which the runs' sweep (``ingest.ReconcileRuns``) queues. Going
   back below 0003 and forward again runs this once more, for what was stored meanwhile.

Going back changes nothing: JCS hashes of the older form's payloads are still hashes.
"""

from django.db import migrations, models

CHUNK = 1000


def rehash(apps, schema_editor):
    from ingest.scraping.hashing import payload_hash

    references = apps.get_model("ingest", "ScrapeReference")._meta.db_table
    handoffs = apps.get_model("ingest", "IngestionHandoff")._meta.db_table
    connection = schema_editor.connection
    after = 0
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {handoffs} DISABLE TRIGGER trg_update_ingestion_handoff_timestamp")
        while True:
            # jsonb writes numbers without an exponent: a float has its point.
            cursor.execute(
                f"""
                SELECT id, payload::text, payload_hash FROM {references}
                WHERE id > %s AND (payload::text LIKE '%%.%%' OR payload::text ~ '[\\U00010000-\\U0010FFFF]')
                ORDER BY id LIMIT %s""",
                [after, CHUNK],
            )
            rows = cursor.fetchall()
            if not rows:
                break
            after = rows[-1][0]
            changed = [(pk, old, new) for pk, text, old in rows if (new := payload_hash(_loads(text))) != old]
            if changed:
                cursor.execute(
                    f"""
                    WITH c AS (
                        SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS c(id, old, new)
                    ), r AS (
                        UPDATE {references} r SET payload_hash = c.new FROM c WHERE r.id = c.id
                    )
                    UPDATE {handoffs} h SET payload_hash = c.new FROM c
                    WHERE h.reference_id = c.id AND h.payload_hash = c.old
                      AND NOT EXISTS (
                          SELECT 1 FROM {handoffs} o
                          WHERE o.reference_id = c.id AND o.payload_hash = c.new)""",
                    [[row[0] for row in changed], [row[1] for row in changed], [row[2] for row in changed]],
                )
        # The foreign keys' checks of the rows updated, now: ALTER TABLE refuses to run
        # with trigger events pending.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute(f"ALTER TABLE {handoffs} ENABLE TRIGGER trg_update_ingestion_handoff_timestamp")


def _loads(text):
    import json

    return json.loads(text)


def hand_off_unhanded(apps, schema_editor):
    references = apps.get_model("ingest", "ScrapeReference")._meta.db_table
    handoffs = apps.get_model("ingest", "IngestionHandoff")._meta.db_table
    transitions = apps.get_model("ingest", "HandoffTransition")._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH opened AS (
                INSERT INTO {handoffs} (
                    tenant_id, source_id, reference_id, payload_hash, scrape_run_id, status,
                    reason_code, attempts, last_error, job_id, ingest_run_id, created_by_id,
                    created_at, updated_at)
                SELECT r.tenant_id, r.source_id, r.id, r.payload_hash, r.changed_in_id, 'queued',
                       'queued_from_scrape', 0, '', NULL, NULL, NULL, now(), now()
                FROM {references} r
                WHERE NOT EXISTS (
                    SELECT 1 FROM {handoffs} h
                    WHERE h.reference_id = r.id AND h.payload_hash = r.payload_hash)
                ORDER BY r.id
                RETURNING id
            )
            INSERT INTO {transitions} (
                handoff_id, at, from_status, to_status, kind, message, actor_id, via, detail)
            SELECT id, now(), '', 'queued', 'queued_from_scrape',
                   'stored while the handoff tables were not migrated; handed off by the migration',
                   NULL, 'migration', '{{}}'::jsonb
            FROM opened"""
        )


class Migration(migrations.Migration):
    dependencies = [("ingest", "0012_history_vocabulary")]

    operations = [
        migrations.AlterField(
            model_name="scrapereference",
            name="payload_hash",
            field=models.CharField(
                help_text="SHA-256 of the payload as canonical JSON (RFC 8785, JCS).",
                max_length=64,
                verbose_name="payload hash",
            ),
        ),
        migrations.RunPython(rehash, migrations.RunPython.noop),
        migrations.RunPython(hand_off_unhanded, migrations.RunPython.noop),
    ]
