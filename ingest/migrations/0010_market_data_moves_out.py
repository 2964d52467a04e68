"""Market data is an app of its own (``market``): ingest lets its models go, from its
state only. The tables, their rows and their names stay; the market app took the models
first (``market 0001_initial``, on which this depends, having moved their content types).

Going back gives ingest the models again, in its state only: migrating ingest back to a
migration before this one (0002, before the handoffs, say) changes no market table.
"""

from django.db import migrations

# Those that point at a model first, the feeds last.
MODELS = [
    "DailyBar",
    "Instrument",
    "TradingDay",
    "SourceFreshness",
    "MarketAction",
    "DayLoad",
    "DailyBatch",
    "MarketFeed",
]


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0005_market_data"),
        ("ingest", "0009_names_with_the_app_label"),
        ("market", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name=name) for name in MODELS],
            database_operations=[],
        ),
    ]
