"""What ships with rote but is not the product: the scripted stand-in model (standin/),
the demo's website and scenario (demo/) and the benchmarks (bench/). `rote demo`,
`rote bench`, `rote model serve` and `rote site serve` drive them; no service imports
them (an import-linter contract in pyproject.toml holds that)."""
