"""Market data becomes an app of its own; its tables, and their rows, stay where they are.

The tables were created by ingest's migration 0005_market_data, while market data was a
part of the ingest app, and keep their names (each model's ``db_table``). This migration
changes no table. It moves the models' content types from ``ingest`` to ``market``, so
that their permissions (and the users and groups holding them) and the admin's log
entries follow the models, then takes the models into the market app's state. Ingest
lets them go afterwards (``ingest 0010_market_data_moves_out``, which depends on this).

It depends on ingest's 0005 alone, which depends on nothing of ingest: migrating ingest
back (to 0002, before the handoffs, say) unapplies neither, and leaves the market data
alone. A new database gets the tables from ingest's 0005, a migrated one keeps them.
Going back moves the content types back to ``ingest``; the tables stay.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = [
    "marketfeed",
    "tradingday",
    "instrument",
    "dailybar",
    "sourcefreshness",
    "dailybatch",
    "dayload",
    "marketaction",
]


def _content_types_to(apps, source, target):
    """Give the models' content types of app ``source`` to app ``target``. Where
    ``target`` has one already (made by code that asked for it before this migration
    ran: the admin logging a change, say), its grants and log entries are folded into
    the one that moves, and it goes."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        moving = content_type.objects.filter(app_label=source, model=model).first()
        if moving is None:  # a new database: post_migrate makes them afterwards
            continue
        made_meanwhile = content_type.objects.filter(app_label=target, model=model).first()
        if made_meanwhile is not None:
            _fold(apps, made_meanwhile, into=moving)
        moving.app_label = target
        moving.save(update_fields=["app_label"])
    content_type.objects.clear_cache()


def _fold(apps, extra, into):
    permission = apps.get_model("auth", "Permission")
    holders = [
        (apps.get_model("auth", "Group").permissions.through, "group_id"),
        (apps.get_model(settings.AUTH_USER_MODEL).user_permissions.through, "user_id"),
    ]
    for spare in permission.objects.filter(content_type=extra):
        kept = permission.objects.filter(content_type=into, codename=spare.codename).first()
        if kept is None:
            permission.objects.filter(pk=spare.pk).update(content_type=into)
            continue
        for through, holder in holders:
            grants = through.objects.filter(permission_id=spare.pk).values_list(holder, flat=True)
            through.objects.bulk_create(
                [through(**{holder: pk, "permission_id": kept.pk}) for pk in grants], ignore_conflicts=True
            )
        spare.delete()
    apps.get_model("admin", "LogEntry").objects.filter(content_type=extra).update(content_type=into)
    extra.delete()


def adopt_content_types(apps, schema_editor):
    _content_types_to(apps, "ingest", "market")


def hand_back_content_types(apps, schema_editor):
    _content_types_to(apps, "market", "ingest")


# The models as ingest's 0005 created them (and as market/models.py declares them).
STATE = [
    migrations.CreateModel(
        name='DailyBatch',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('market_date', models.DateField(verbose_name='market date')),
            ('status', models.CharField(choices=[('running', 'running'), ('succeeded', 'succeeded'), ('failed', 'failed'), ('missed', 'missed')], max_length=10, verbose_name='status')),
            ('due_at', models.DateTimeField(verbose_name='due')),
            ('started_at', models.DateTimeField(blank=True, null=True, verbose_name='started')),
            ('finished_at', models.DateTimeField(blank=True, null=True, verbose_name='finished')),
            ('gaps', models.JSONField(blank=True, default=list, help_text='Open days of the look-back with no bars, newest first.', verbose_name='gaps found')),
            ('note', models.TextField(blank=True, verbose_name='note')),
        ],
        options={
            'verbose_name_plural': 'daily batches',
            'db_table': 'ingest_dailybatch',
            'ordering': ['-market_date'],
        },
    ),
    migrations.CreateModel(
        name='MarketFeed',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('name', models.SlugField(help_text='Unique within the tenant; commands and the API use it.', max_length=100, verbose_name='name')),
            ('api_url', models.URLField(max_length=500, verbose_name='API URL')),
            ('token', models.CharField(help_text="Sent in every call's body.", max_length=200, verbose_name='token')),
            ('exchange', models.CharField(default='SSE', help_text='Whose trading calendar decides the trading days.', max_length=10, verbose_name='calendar exchange')),
            ('enabled', models.BooleanField(default=True, help_text='A disabled feed is skipped by the daily batch.', verbose_name='enabled')),
            ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created')),
            ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.tenant', verbose_name='tenant')),
        ],
        options={
            'db_table': 'ingest_marketfeed',
            'ordering': ['name'],
        },
    ),
    migrations.CreateModel(
        name='MarketAction',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('action', models.CharField(max_length=30, verbose_name='action')),
            ('via', models.CharField(max_length=10, verbose_name='via')),
            ('at', models.DateTimeField(verbose_name='at')),
            ('detail', models.JSONField(blank=True, default=dict, verbose_name='detail')),
            ('actor', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='by')),
            ('feed', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='actions', to='market.marketfeed')),
        ],
        options={
            'db_table': 'ingest_marketaction',
            'ordering': ['-at', '-id'],
        },
    ),
    migrations.CreateModel(
        name='Instrument',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('ts_code', models.CharField(max_length=20, verbose_name='code')),
            ('symbol', models.CharField(blank=True, max_length=20, verbose_name='symbol')),
            ('name', models.CharField(blank=True, max_length=100, verbose_name='name')),
            ('area', models.CharField(blank=True, max_length=50, verbose_name='area')),
            ('industry', models.CharField(blank=True, max_length=50, verbose_name='industry')),
            ('market', models.CharField(blank=True, max_length=20, verbose_name='market')),
            ('list_status', models.CharField(choices=[('L', 'listed'), ('D', 'delisted'), ('P', 'paused')], max_length=1, verbose_name='listing')),
            ('list_date', models.DateField(blank=True, null=True, verbose_name='listed')),
            ('delist_date', models.DateField(blank=True, null=True, verbose_name='delisted')),
            ('feed', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='market.marketfeed')),
        ],
        options={
            'db_table': 'ingest_instrument',
            'ordering': ['ts_code'],
        },
    ),
    migrations.CreateModel(
        name='DayLoad',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('trade_date', models.DateField(verbose_name='trade date')),
            ('trigger', models.CharField(choices=[('schedule', 'the daily batch'), ('gap_fill', "the daily batch's gap-fill"), ('operator', "an operator's gap-fill")], max_length=10, verbose_name='by')),
            ('status', models.CharField(choices=[('queued', 'queued'), ('running', 'running'), ('succeeded', 'succeeded'), ('failed', 'failed')], default='queued', max_length=10, verbose_name='status')),
            ('job_id', models.BigIntegerField(blank=True, help_text='The engine job that loads it (no foreign key: retention prunes jobs).', null=True, verbose_name='job')),
            ('rows', models.PositiveIntegerField(blank=True, null=True, verbose_name='rows')),
            ('error', models.TextField(blank=True, verbose_name='error')),
            ('created_at', models.DateTimeField(verbose_name='queued')),
            ('finished_at', models.DateTimeField(blank=True, null=True, verbose_name='finished')),
            ('batch', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='loads', to='market.dailybatch')),
            ('requested_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='requested by')),
            ('feed', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='loads', to='market.marketfeed')),
        ],
        options={
            'db_table': 'ingest_dayload',
            'ordering': ['-created_at', '-id'],
        },
    ),
    migrations.AddField(
        model_name='dailybatch',
        name='feed',
        field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='batches', to='market.marketfeed'),
    ),
    migrations.CreateModel(
        name='DailyBar',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('ts_code', models.CharField(max_length=20, verbose_name='code')),
            ('trade_date', models.DateField(verbose_name='trade date')),
            ('open', models.FloatField(verbose_name='open')),
            ('high', models.FloatField(verbose_name='high')),
            ('low', models.FloatField(verbose_name='low')),
            ('close', models.FloatField(verbose_name='close')),
            ('pre_close', models.FloatField(blank=True, null=True, verbose_name='previous close')),
            ('change', models.FloatField(blank=True, null=True, verbose_name='change')),
            ('pct_chg', models.FloatField(blank=True, null=True, verbose_name='change %')),
            ('vol', models.FloatField(blank=True, null=True, verbose_name='volume')),
            ('amount', models.FloatField(blank=True, null=True, verbose_name='amount')),
            ('feed', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='market.marketfeed')),
        ],
        options={
            'db_table': 'ingest_dailybar',
            'ordering': ['-trade_date', 'ts_code'],
        },
    ),
    migrations.CreateModel(
        name='SourceFreshness',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('dataset', models.CharField(choices=[('trade_cal', 'trading calendar'), ('stock_basic', 'instruments'), ('daily', 'daily bars')], max_length=20, verbose_name='dataset')),
            ('last_success', models.DateTimeField(blank=True, null=True, verbose_name='last success')),
            ('last_failure', models.DateTimeField(blank=True, null=True, verbose_name='last failure')),
            ('last_error', models.TextField(blank=True, verbose_name='last error')),
            ('rows_today', models.PositiveIntegerField(default=0, verbose_name='rows today')),
            ('rows_date', models.DateField(blank=True, null=True, verbose_name='rows on')),
            ('feed', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='freshness', to='market.marketfeed')),
        ],
        options={
            'verbose_name_plural': 'source freshness',
            'db_table': 'ingest_sourcefreshness',
            'ordering': ['feed', 'dataset'],
        },
    ),
    migrations.CreateModel(
        name='TradingDay',
        fields=[
            ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
            ('exchange', models.CharField(max_length=10, verbose_name='exchange')),
            ('cal_date', models.DateField(verbose_name='date')),
            ('is_open', models.BooleanField(verbose_name='open')),
            ('pretrade_date', models.DateField(blank=True, null=True, verbose_name='previous trading day')),
            ('feed', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='market.marketfeed')),
        ],
        options={
            'db_table': 'ingest_tradingday',
            'ordering': ['-cal_date'],
        },
    ),
    migrations.AddConstraint(
        model_name='marketfeed',
        constraint=models.UniqueConstraint(fields=('tenant', 'name'), name='market_feed_name_per_tenant'),
    ),
    migrations.AddConstraint(
        model_name='marketfeed',
        constraint=models.CheckConstraint(condition=models.Q(('name', ''), _negated=True), name='market_feed_name_not_empty'),
    ),
    migrations.AddConstraint(
        model_name='instrument',
        constraint=models.UniqueConstraint(fields=('feed', 'ts_code'), name='market_instrument_key'),
    ),
    migrations.AddConstraint(
        model_name='instrument',
        constraint=models.CheckConstraint(condition=models.Q(('list_status__in', ['L', 'D', 'P'])), name='market_instrument_status_valid'),
    ),
    migrations.AddIndex(
        model_name='dayload',
        index=models.Index(fields=['feed', 'trade_date'], name='market_load_by_day'),
    ),
    migrations.AddConstraint(
        model_name='dayload',
        constraint=models.UniqueConstraint(condition=models.Q(('status__in', ['queued', 'running'])), fields=('feed', 'trade_date'), name='market_load_one_active_per_day'),
    ),
    migrations.AddConstraint(
        model_name='dayload',
        constraint=models.CheckConstraint(condition=models.Q(('status__in', ['queued', 'running', 'succeeded', 'failed'])), name='market_load_status_valid'),
    ),
    migrations.AddConstraint(
        model_name='dayload',
        constraint=models.CheckConstraint(condition=models.Q(('trigger__in', ['schedule', 'gap_fill', 'operator'])), name='market_load_trigger_valid'),
    ),
    migrations.AddConstraint(
        model_name='dailybatch',
        constraint=models.UniqueConstraint(fields=('feed', 'market_date'), name='market_batch_once_a_day'),
    ),
    migrations.AddConstraint(
        model_name='dailybatch',
        constraint=models.CheckConstraint(condition=models.Q(('status__in', ['running', 'succeeded', 'failed', 'missed'])), name='market_batch_status_valid'),
    ),
    migrations.AddConstraint(
        model_name='dailybatch',
        constraint=models.CheckConstraint(condition=models.Q(models.Q(('finished_at__isnull', True), ('status', 'running')), models.Q(models.Q(('status', 'running'), _negated=True), ('finished_at__isnull', False)), _connector='OR'), name='market_batch_finished_when_done'),
    ),
    migrations.AddConstraint(
        model_name='dailybar',
        constraint=models.UniqueConstraint(fields=('feed', 'trade_date', 'ts_code'), name='market_daily_bar_key'),
    ),
    migrations.AddConstraint(
        model_name='dailybar',
        constraint=models.CheckConstraint(condition=models.Q(('low__lte', models.F('high'))), name='market_daily_bar_range'),
    ),
    migrations.AddConstraint(
        model_name='sourcefreshness',
        constraint=models.UniqueConstraint(fields=('feed', 'dataset'), name='market_freshness_key'),
    ),
    migrations.AddConstraint(
        model_name='sourcefreshness',
        constraint=models.CheckConstraint(condition=models.Q(('dataset__in', ['trade_cal', 'stock_basic', 'daily'])), name='market_freshness_dataset_valid'),
    ),
    migrations.AddConstraint(
        model_name='tradingday',
        constraint=models.UniqueConstraint(fields=('feed', 'exchange', 'cal_date'), name='market_trading_day_key'),
    ),
]


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("ingest", "0005_market_data"),
        ("tenancy", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("admin", "0003_logentry_add_action_flag_choices"),
    ]

    operations = [
        migrations.RunPython(adopt_content_types, hand_back_content_types, elidable=False),
        migrations.SeparateDatabaseAndState(state_operations=STATE, database_operations=[]),
    ]
