"""The fleet check (docs/fleet.md): which of many nodes, or which link, drags a job down, and what is done about it.
One package per audience, data flowing down from act to run to plan (tests/test_layers.py holds it):

- `plan/`: the pure planner and judge (no engine, no operate, no results I/O, no run): adaptive rounds of node,
  pair and group tests, each test weighed against the fleet's own centre and the SKU, the planner's knowledge of
  every node and link between rounds, the verdicts. Simulated at 16,384 nodes in benchmarks/.
- `run/`: one check as it runs: its request and settings (`request`), the rounds sent as engine jobs (`job`,
  `driver`), what the node's worker runs and prints (`node_worker`, `worker_request`, `lines`), the lines read
  back per node, the records stored (`records`), the end (`outcome`).
- `act/`: what follows a verdict: the drains and their evidence (`drains`, `grounds`, through operate.act), and the
  one re-test with known-good partners behind `jobs diagnose --retest` and `gpuval fleet retest` (`retests`), with
  its window made safe to stop (`windows`).
"""
