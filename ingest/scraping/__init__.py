"""Scraped references and their handoffs to ingestion (``POST /scraping/{source}/sync``)."""
