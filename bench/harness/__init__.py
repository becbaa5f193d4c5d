"""What every benchmark shares: one module per noun, imported from each (this file imports nothing).

- `options`: the arguments every benchmark takes (`--quick`, `--postgres`, `--write`, `--output`).
- `databases`: scratch SQLite files and PostgreSQL databases, the shop's data, the server's version.
- `servers`: our server and the baselines as processes: started, watched, their CPU read, stopped.
- `pinning`: cores for the servers and the clients, and how long a process waited for its core.
- `clients`: simulated users over the native API or the AI SDK endpoint, and a round's CPU.
- `stats`: percentiles, paired ratios, and how figures are written.
- `reports`: the environment lines, markdown tables, and the sections of `docs/benchmarks.md`.
- `bare_sse`, `adapter`: the baselines' servers (`python -m bench.harness.bare_sse` / `.adapter`).
"""
