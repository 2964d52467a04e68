"""Hooks come from a catalogue that platform operators define.

Each existing hook's image, command, environment, resources and time limit become a
catalogue entry of their own, disabled and offered only to the hook's tenant: what a
tenant wrote is reviewed by an operator before it runs again. The hook then names its
entry, with no parameters. Going back copies each entry's fields onto its hooks.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import F, Func, Q, Value
from django.db.models.lookups import Exact


def _json_type(field, kind):
    return Exact(Func(F(field), function="jsonb_typeof", output_field=models.CharField()),
                 Value(kind))


FIELDS = ("image", "command", "env", "cpu_request", "memory_request", "cpu_limit",
          "memory_limit", "timeout_seconds")


def _entry_name(hook) -> str:
    """Unique by the hook's id; readable by its tenant, source and name."""
    suffix = f"-{hook.pk}"
    base = f"{hook.source.tenant.slug}-{hook.source.name}-{hook.name}"[:64 - len(suffix)]
    return base.strip("-") + suffix


def hooks_to_entries(apps, schema_editor):
    Hook = apps.get_model("ingest", "Hook")
    HookTemplate = apps.get_model("ingest", "HookTemplate")
    for hook in Hook.objects.select_related("source__tenant").order_by("pk").iterator():
        entry = HookTemplate.objects.create(
            name=_entry_name(hook), enabled=False, parameters=[],
            description=(f"Made from hook {hook.name!r} of source {hook.source.name!r} "
                         f"(tenant {hook.source.tenant.slug}) when hooks moved to the catalogue. "
                         "Review its command, image and environment before enabling it."),
            **{field: getattr(hook, field) for field in FIELDS})
        entry.tenants.add(hook.source.tenant_id)
        hook.template = entry
        hook.parameters = {}
        hook.save(update_fields=["template", "parameters"])


def entries_to_hooks(apps, schema_editor):
    Hook = apps.get_model("ingest", "Hook")
    for hook in Hook.objects.select_related("template").order_by("pk").iterator():
        for field in FIELDS:
            setattr(hook, field, getattr(hook.template, field))
        hook.save(update_fields=list(FIELDS))


class Migration(migrations.Migration):

    dependencies = [
        # Not 0005_market_data: the hooks never needed the market tables.
        ('ingest', '0004_composite_tenant_keys'),
        ('tenancy', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='HookTemplate',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(help_text='How tenants and the run pages name the entry.', max_length=64, unique=True, verbose_name='name')),
                ('description', models.TextField(blank=True, help_text='What the hook checks, for the tenants offered it.', verbose_name='description')),
                ('image', models.CharField(help_text='The container image, on Kubernetes.', max_length=255, verbose_name='image')),
                ('command', models.JSONField(default=list, help_text='The argument list, run directly (no shell), e.g. ["python", "-m", "ingest.hookkit.check_records", "--require", "{fields}"]. {name} inside an argument is replaced by that parameter\'s value, within that argument; {{ and }} are literal braces.', verbose_name='command')),
                ('parameters', models.JSONField(blank=True, default=list, help_text='What a tenant fills, a JSON list, e.g. [{"name": "fields", "type": "string", "required": true, "max_length": 200, "pattern": "^[a-z_,]+$"}]. Types: string (max_length, pattern), integer (min, max), boolean, choice (choices); each may have a default and a description. Each value is also in the environment as HOOK_PARAM_<NAME>.', verbose_name='parameters')),
                ('env', models.JSONField(blank=True, default=dict, help_text='Fixed variables the hook gets, whoever uses it.', verbose_name='environment')),
                ('cpu_request', models.CharField(blank=True, max_length=16, verbose_name='CPU request')),
                ('memory_request', models.CharField(blank=True, max_length=16, verbose_name='memory request')),
                ('cpu_limit', models.CharField(blank=True, max_length=16, verbose_name='CPU limit')),
                ('memory_limit', models.CharField(blank=True, max_length=16, verbose_name='memory limit')),
                ('timeout_seconds', models.PositiveIntegerField(default=600, verbose_name='time limit (seconds)')),
                ('enabled', models.BooleanField(default=True, help_text='Hooks of a disabled entry do not run: the batch\'s run fails, saying so.', verbose_name='enabled')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created')),
                ('updated_at', models.DateTimeField(auto_now=True, verbose_name='updated')),
                ('tenants', models.ManyToManyField(blank=True, help_text='Only these tenants may use the entry; none chosen: every tenant.', related_name='+', to='tenancy.tenant', verbose_name='offered to')),
            ],
            options={
                'verbose_name': 'hook catalogue entry',
                'verbose_name_plural': 'hook catalogue',
                'ordering': ['name'],
                'constraints': [
                    models.CheckConstraint(condition=models.Q(('name', ''), _negated=True), name='ingest_hook_template_name_not_empty'),
                    models.CheckConstraint(condition=_json_type("command", "array"), name='ingest_hook_template_command_is_list'),
                    models.CheckConstraint(condition=_json_type("parameters", "array"), name='ingest_hook_template_parameters_is_list'),
                    models.CheckConstraint(condition=_json_type("env", "object"), name='ingest_hook_template_env_is_object'),
                    models.CheckConstraint(condition=models.Q(('timeout_seconds__gte', 1), ('timeout_seconds__lte', 86400)), name='ingest_hook_template_timeout_in_range'),
                ],
            },
        ),
        migrations.AddField(
            model_name='hook',
            name='template',
            field=models.ForeignKey(null=True, help_text='What runs: an entry of the hook catalogue.', on_delete=django.db.models.deletion.PROTECT, related_name='hooks', to='ingest.hooktemplate', verbose_name='catalogue entry'),
        ),
        migrations.AddField(
            model_name='hook',
            name='parameters',
            field=models.JSONField(blank=True, default=dict, help_text='Values of the entry\'s parameters, e.g. {"fields": "id,amount"}.', verbose_name='parameters'),
        ),
        # Going back re-adds the image and command columns; on a table with rows they need
        # a default (the entries' values are then copied in).
        migrations.AlterField(
            model_name='hook',
            name='image',
            field=models.CharField(default='', help_text='The container image, on Kubernetes.', max_length=255, verbose_name='image'),
        ),
        migrations.AlterField(
            model_name='hook',
            name='command',
            field=models.JSONField(default=list, verbose_name='command'),
        ),
        migrations.RunPython(hooks_to_entries, entries_to_hooks, elidable=False),
        migrations.AlterField(
            model_name='hook',
            name='template',
            field=models.ForeignKey(help_text='What runs: an entry of the hook catalogue.', on_delete=django.db.models.deletion.PROTECT, related_name='hooks', to='ingest.hooktemplate', verbose_name='catalogue entry'),
        ),
        migrations.RemoveConstraint(model_name='hook', name='ingest_hook_command_is_list'),
        migrations.RemoveConstraint(model_name='hook', name='ingest_hook_env_is_object'),
        migrations.RemoveConstraint(model_name='hook', name='ingest_hook_timeout_in_range'),
        migrations.RemoveField(model_name='hook', name='image'),
        migrations.RemoveField(model_name='hook', name='command'),
        migrations.RemoveField(model_name='hook', name='env'),
        migrations.RemoveField(model_name='hook', name='cpu_request'),
        migrations.RemoveField(model_name='hook', name='memory_request'),
        migrations.RemoveField(model_name='hook', name='cpu_limit'),
        migrations.RemoveField(model_name='hook', name='memory_limit'),
        migrations.RemoveField(model_name='hook', name='timeout_seconds'),
        migrations.AddConstraint(
            model_name='hook',
            constraint=models.CheckConstraint(condition=_json_type("parameters", "object"), name='ingest_hook_parameters_is_object'),
        ),
    ]
