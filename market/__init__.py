"""Market data: a market-data API's trading calendar, instruments and daily bars,
loaded on a schedule that heals its own gaps (``docs/market.md``)."""
