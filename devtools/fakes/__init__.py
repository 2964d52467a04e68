"""Fakes of the systems at the edge of Conveyor's world, each speaking the real protocol
over real sockets, for the tests, the benchmarks and the demo: a Trino coordinator
(``trino``), a market-data API (``market_api``) and a Kubernetes API server
(``kubernetes``)."""
