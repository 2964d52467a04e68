"""Market data: feeds, their normalised datasets (calendar, instruments, daily bars),
source freshness, daily batches, day loads and operators' actions.

The market app owns these tables now (``market/migrations/0001_initial.py`` takes the
models, ``0010_market_data_moves_out`` lets them go); this migration still creates them
on a new database. It depends on nothing of ingest, as nothing here needs ingest's
tables: migrating ingest back to any of its migrations (the handoffs' 0003, say) leaves
it applied and the market data in place. Only ``migrate ingest zero`` reverses it.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenancy', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
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
                ('feed', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='actions', to='ingest.marketfeed')),
            ],
            options={
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
                ('feed', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='ingest.marketfeed')),
            ],
            options={
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
                ('batch', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='loads', to='ingest.dailybatch')),
                ('requested_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='requested by')),
                ('feed', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='loads', to='ingest.marketfeed')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.AddField(
            model_name='dailybatch',
            name='feed',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='batches', to='ingest.marketfeed'),
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
                ('feed', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='ingest.marketfeed')),
            ],
            options={
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
                ('feed', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='freshness', to='ingest.marketfeed')),
            ],
            options={
                'verbose_name_plural': 'source freshness',
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
                ('feed', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='ingest.marketfeed')),
            ],
            options={
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
