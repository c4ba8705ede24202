"""The benchmark against a DuckDB baseline, and the synthetic feeds it runs on."""
