"""
The benchmark suite (bench/run): its pure parts only. Ratios must compare
figures of the same round, goals must say met or not met the way the issue
states them, the refusal rows must count refusals (not what the bucket let
through), the pair's and the refusals' tables must be written from the cells,
and the gRPC load client's answer must be read by its contract. No timing is
asserted and no process is started here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

import pytest
from scripts import load_script

RUN = Path(__file__).resolve().parent.parent / "bench" / "run"


def load_module() -> ModuleType:
    return load_script(RUN, "bench_run")


bench = load_module()


def result(requests: int, bad: int = 0, admitted: int | None = None, seconds: float = 2.0) -> dict:
    out = {"requests": requests, "duration_us": int(seconds * 1e6), "bad": bad, "connect": 0, "read": 0,
           "write": 0, "timeout": 0, "status": 0, "p50_us": 1500, "p99_us": 9000, "max_us": 0, "mean_us": 0}
    if admitted is not None:
        out["admitted"] = admitted
    return out


# -- figures --------------------------------------------------------------


def test_fill_counts_right_answers_only() -> None:
    cell = bench.fill(bench.Cell("send", "16", "beacon", 1), result(1000, bad=10))
    assert cell.rps == pytest.approx(495.0)
    assert (cell.ok, cell.errors, cell.admitted) == (990, 10, 0)
    assert (cell.p50_ms, cell.p99_ms) == (1.5, 9.0)


def test_fill_leaves_admitted_requests_out_of_the_refusals() -> None:
    """A refusal row's rate is refusals only: what the bucket let through is apart, and not an error."""
    cell = bench.fill(bench.Cell("refuse-429", "64", "beacon-limited", 1), result(1000, bad=4, admitted=6))
    assert cell.rps == pytest.approx(495.0)
    assert (cell.ok, cell.errors, cell.admitted) == (990, 4, 6)


def test_round_ratio_pairs_figures_of_the_same_round() -> None:
    rps = {("send", "16", "a", 1): 100.0, ("send", "16", "b", 1): 50.0,
           ("send", "16", "a", 2): 300.0, ("send", "16", "b", 2): 100.0,
           ("send", "16", "a", 3): 400.0}  # round 3: b missing, so not paired
    assert bench.round_ratio(rps, 3, ("send", "16", "a"), ("send", "16", "b")) == pytest.approx(2.5)
    assert bench.round_ratio(rps, 3, ("send", "16", "a"), ("send", "16", "c")) is None


def test_goal_row_says_met_not_met_or_na() -> None:
    assert bench.goal_row("g", 10.0, 10, ">= 10").endswith("| 10.00 | >= 10 | met |")
    assert bench.goal_row("g", 9.99, 10, ">= 10").endswith("| NOT met |")
    assert bench.goal_row("g", 0.9, 1.0, "< 1 ms", at_most=True).endswith("| met |")
    assert bench.goal_row("g", 1.1, 1.0, "< 1 ms", at_most=True).endswith("| NOT met |")
    assert bench.goal_row("g", None, 10, ">= 10") == "| g | n/a | >= 10 | n/a |"


def test_pg_connections() -> None:
    assert bench.pg_connections([1, 16, 64]) == [16, 64]
    assert bench.pg_connections([1, 16]) == [16]
    assert bench.pg_connections([1, 8]) == [8]


# -- /proc ----------------------------------------------------------------


def test_cpu_ticks_reads_utime_and_stime_past_an_odd_name() -> None:
    fields = ["S", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "250", "50", "0", "0"]
    stat = "1234 (postgres: a (b) c) " + " ".join(fields)
    assert bench.cpu_ticks(stat) == 300


def test_cpu_percent() -> None:
    assert bench.cpu_percent(100, 300, 2.0, 100) == pytest.approx(100.0)
    assert bench.cpu_percent(None, 300, 2.0, 100) is None
    assert bench.cpu_percent(100, 300, 0.0, 100) is None


def test_core_shares_are_the_core_own_line_in_percent() -> None:
    """The profile's core view reads its own core's line of /proc/stat, not the machine's or another core's."""
    before = "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 0 50 10 20 0 5 0 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\n"
    after = "cpu  99 9 9 9 9 9 9 9 0 0\ncpu0 160 0 70 15 35 0 10 0 0 0\ncpu1 500 1 1 1 1 1 1 1 0 0\n"
    assert bench.cpu_line(after, "cpu7") == {}
    assert bench.cpu_line(after, "cpu")["user"] == 99
    shares = bench.core_shares(bench.cpu_line(before, "cpu0"), bench.cpu_line(after, "cpu0"))
    # 60 user, 20 system, 5 idle, 15 iowait, 5 softirq of 105 ticks; kinds with none left out
    assert shares == pytest.approx({"user": 6000 / 105, "system": 2000 / 105, "idle": 500 / 105,
                                    "iowait": 1500 / 105, "softirq": 500 / 105})
    assert bench.core_shares({}, {}) == {}


def test_thread_costs_split_the_reactor_from_the_other_threads() -> None:
    hz = 100
    before = {10: (100, 10), 11: (5, 5)}
    after = {10: (200, 30), 11: (25, 15), 12: (10, 0)}  # thread 12 started in between
    costs = bench.thread_costs(10, before, after, answers=1000, hz=hz)
    # ticks of 10 ms over 1000 answers: 10 us a tick
    assert costs == {"reactor thread": pytest.approx((1000.0, 200.0)),
                     "other threads": pytest.approx((300.0, 100.0))}
    assert bench.thread_costs(10, before, after, answers=0) == {}


PERF_BY_DSO = """\
# To display the perf.data header info, please use --header/--header-only options.
#
# Overhead  Command          Shared Object
# ........  ...............  ....................
#
    57.73%  twistd           libpython3.11.so.1.0
    20.00%  twistd           [kernel.kallsyms]
     8.34%  swapper          [kernel.kallsyms]
     4.65%  twistd           libsqlite3.so.0.8.6
     4.16%  twistd           libc.so.6
     2.00%  kworker/0:1H-kb  [kernel.kallsyms]
     1.13%  twistd           _json.cpython-311-x86_64-linux-gnu.so
     0.64%  twistd           libcrypto.so.3
"""

PERF_BY_SYMBOL = """\
# Children      Self  Symbol
# ........  ........  ..........
#
    20.06%     0.56%  [k] do_syscall_64
     6.06%     0.02%  [k] __x64_sys_sendto
     4.95%     0.00%  [k] __x64_sys_fdatasync
     1.10%     0.01%  [k] __x64_sys_epoll_wait
     0.90%     0.20%  [k] __x64_sys_epoll_ctl
     0.80%     0.00%  [k] __x64_sys_pwrite64
"""


def test_perf_core_summary_groups_the_core_samples() -> None:
    lines = bench.perf_core_summary(PERF_BY_DSO, PERF_BY_SYMBOL, "twistd")
    assert lines[:4] == [
        "- the server: the Python interpreter: 57.7 %",
        "- the server: the kernel: 20.0 %",
        "- idle (nothing to run on the core): 8.3 %",
        "- the server: SQLite: 4.7 %",
    ]
    assert "- other processes and kernel threads: 2.0 %" in lines
    assert "- the server: other code of the server: 0.6 %" in lines
    assert lines[-1] == (
        "- the server's system calls (each with the kernel's work for it, within the above): "
        "sending (sendto) 6.1 %, syncing (fdatasync) 5.0 %, writing files (pwrite64, write) 0.8 %, "
        "epoll (epoll_wait, epoll_ctl) 2.0 %"
    )


def test_perf_core_summary_of_nothing_says_nothing() -> None:
    assert bench.perf_core_summary("# nothing\n", "", "twistd") == []


# -- the gRPC load client's answer ----------------------------------------


def test_grpc_result_reads_the_contract_line() -> None:
    line = json.dumps({"requests": 3000, "errors": 2, "seconds": 2.0, "rps": 1500.0, "p50_ms": 4.5, "p99_ms": 20.0})
    parsed = bench.grpc_result("warming up\n" + line + "\n")
    assert parsed is not None
    cell = bench.fill(bench.Cell("grpc-send", "16", "beacon", 1), parsed)
    assert cell.rps == pytest.approx(1499.0)
    assert (cell.errors, cell.p50_ms, cell.p99_ms) == (2, 4.5, 20.0)


@pytest.mark.parametrize("out", ["", "no json here", '{"requests": "x"}', '{"rps": 1}'])
def test_grpc_result_refuses_what_is_not_the_contract(out: str) -> None:
    assert bench.grpc_result(out) is None


# -- the report -----------------------------------------------------------


def make_run(cells: list, servers: list[str], parts: list[str], grpc_why_not: str | None = None):
    args = bench.parse_args(["--rounds", "2", "--connections", "1,16,64"])
    args.part_list = parts
    run = bench.Run(
        args, [bench.Server(n, [], 0, Path("/nonexistent.log")) for n in servers],
        bench.Load("wrk", [], None, "t"), [1, 16, 64], 0.0, 60.0, grpc_why_not=grpc_why_not,
    )
    run.cells = cells
    return run


def cell(workload: str, conns: str, server: str, rnd: int, rps: float, **kw) -> object:
    c = bench.Cell(workload, conns, server, rnd, rps=rps, p50_ms=0.5, p99_ms=2.0)
    for key, value in kw.items():
        setattr(c, key, value)
    return c


def test_report_postgres_refusals_pair_and_grpc() -> None:
    cells = []
    for rnd in (1, 2):
        cells += [
            cell("send", "1", "beacon", rnd, 2000.0),
            cell("send", "16", "beacon-pg", rnd, 3000.0), cell("send", "16", "a2a-sdk-pg", rnd, 200.0),
            cell("send", "64", "beacon-pg", rnd, 3000.0), cell("send", "64", "a2a-sdk-pg", rnd, 400.0),
            cell("card", "64", "beacon", rnd, 10000.0, cpu_us=40.0),
            cell("refuse-429", "64", "beacon-limited", rnd, 12000.0, admitted=3, cpu_us=32.0 + rnd * 8),
            cell("refuse-ws", "ws 1x64", "beacon-limited", rnd, 5000.0, cpu_us=20.0),
            cell("refuse-413", "64", "beacon", rnd, 10000.0, cpu_us=80.0),
            cell("pair", "64", "beacon-pg-a", rnd, 1000.0, cpu={"beacon-pg-a": 90.0, "machine": 150.0}),
            cell("pair", "2x64", "beacon-pg-a+beacon-pg-b", rnd, 1600.0, split=[800.0, 800.0],
                 cpu={"beacon-pg-a": 80.0, "beacon-pg-b": 80.0, "machine": 199.0}),
        ]
    cells.append(bench.Cell("grpc-send", "16", "beacon", 1, failed="not run: no grpc_load.py"))
    run = make_run(cells, ["beacon", "beacon-pg", "a2a-sdk-pg"], ["pair", "refusals"], grpc_why_not="no grpc_load.py")
    text = bench.report(run, {"date": "today"})

    assert "| 16 | 15.00 | 2.00 | 2.00 | n/a |" in text  # Beacon-pg/a2a-sdk-pg, p99s, no SQLite figure
    assert "| SendMessage at 16 on PostgreSQL: Beacon-pg/a2a-sdk-pg | 15.00 | >= 10 | met |" in text
    assert "| SendMessage at 64 on PostgreSQL: Beacon-pg/a2a-sdk-pg | 7.50 | >= 10 | NOT met |" in text
    assert "| SendMessage at 1: Beacon p50 (ms) | 0.50 | < 1 ms | met |" in text

    assert "| 1 | 1000 | 1600 (800 + 800) | 1.60 |" in text
    assert "Median pair/one: 1.60." in text
    assert "machine 199 %" in text

    # Round 1: the 429 cost 40 us, as the card; round 2: 48 us. CPU ratios 1.0 and 0.83, median 0.92.
    assert ("| 429s, one source flooding SendMessage over HTTP | 64 | beacon-limited | 12000 | 0.50 | 2.00 | 6 | 0 "
            "| 10000 | 1.20 | 44.0 | 40.0 | 0.92 |") in text
    assert ("| 429s, one source flooding SendMessage over HTTP: Beacon's CPU per card answer over its CPU per "
            "refusal | 0.92 | >= 1 | NOT met |") in text
    assert "| 429s, one source flooding SendMessage over HTTP: refusals/s over card req/s (shown) | 1.20 | none | shown |" in text
    assert ("| -31429 refusals, one WebSocket flooding frames: Beacon's CPU per card answer over its CPU per "
            "refusal | 2.00 | >= 1 | met |") in text
    assert ("| 413s, declared Content-Length over max_body: Beacon's CPU per card answer over its CPU per "
            "refusal | 0.50 | >= 1 | NOT met |") in text
    assert "| 413s, declared Content-Length over max_body: refusals/s over card req/s (shown) | 1.00 | none | shown |" in text
    assert "SendMessage over gRPC: not run: no grpc_load.py." in text
    assert "| SendMessage (gRPC) | 16 | beacon | not run: no grpc_load.py |" in text
    assert "## What each row means" in text


def test_report_grpc_ratio_to_jsonrpc() -> None:
    cells = [cell("send", "16", "beacon", 1, 4000.0), cell("grpc-send", "16", "beacon", 1, 3000.0),
             cell("send", "16", "beacon", 2, 4000.0), cell("grpc-send", "16", "beacon", 2, 5000.0)]
    run = make_run(cells, ["beacon"], [])
    text = bench.report(run, {})
    assert "| 16 | 1.00 |" in text  # the median of 0.75 and 1.25


def test_report_grpc_peer_cpu_and_goals() -> None:
    """Beacon over a2a-sdk-grpc and over its JSON-RPC twin, for SendMessage and GetTask; CPU per answer; the goals."""
    cells = []
    for rnd in (1, 2):
        cells += [cell("send", "64", "beacon", rnd, 4000.0, cpu_us=120.0),
                  cell("grpc-send", "64", "beacon", rnd, 2000.0, cpu_us=360.0),
                  cell("grpc-send", "64", "a2a-sdk-grpc", rnd, 500.0, cpu_us=2000.0),
                  cell("get", "64", "beacon", rnd, 8000.0, cpu_us=80.0),
                  cell("grpc-get", "64", "beacon", rnd, 3000.0, cpu_us=300.0),
                  cell("grpc-get", "64", "a2a-sdk-grpc", rnd, 3000.0, cpu_us=310.0)]
    run = make_run(cells, ["beacon", "a2a-sdk-grpc"], [])
    text = bench.report(run, {})
    assert "| SendMessage (gRPC) | 64 | 0.50 | 4.00 | 360 | 120 | 2000 |" in text
    assert "| GetTask (gRPC) | 64 | 0.38 | 1.00 | 300 | 80 | 310 |" in text
    assert "| SendMessage (gRPC) at 64: Beacon gRPC/JSON-RPC (issue 44) | 0.50 | >= 0.8 | NOT met |" in text
    assert "| SendMessage (gRPC) at 64: Beacon/a2a-sdk-grpc (issue 44) | 4.00 | >= 3 | met |" in text
    assert "| GetTask (gRPC) at 64: Beacon/a2a-sdk-grpc (issue 44) | 1.00 | >= 3 | NOT met |" in text


def test_make_servers_a2a_sdk_grpc(tmp_path: Path) -> None:
    """a2a-sdk's gRPC server at its best (spans off), its own gRPC port; the gRPC rows only."""
    (server,) = bench.make_servers(["a2a-sdk-grpc"], tmp_path, Path("/venv/bin/python"), None)
    assert server.argv[1].endswith("a2a_sdk_grpc_server.py") and "--grpc-port" in server.argv
    assert server.env["OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"] == "false"
    assert [w for w in bench.WORKLOADS if server.serves(w)] == ["grpc-send", "grpc-get"]
    server._read_card({"supportedInterfaces": [{"url": "127.0.0.1:5", "protocolBinding": "GRPC"}]})
    assert server.grpc_url == "127.0.0.1:5"


def test_parse_args_parts() -> None:
    assert bench.parse_args([]).part_list == ["pair", "refusals"]
    assert bench.parse_args(["--parts", "none"]).part_list == []
    with pytest.raises(SystemExit):
        bench.parse_args(["--parts", "bogus"])


def test_make_servers_a2a_sdk_variants(tmp_path: Path) -> None:
    """At its best: --tuned and the SDK's spans switched off; as installed: neither."""
    python = Path("/venv/bin/python")
    tuned, default = bench.make_servers(["a2a-sdk", "a2a-sdk-default"], tmp_path, python, None)
    assert "--tuned" in tuned.argv and tuned.env["OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"] == "false"
    assert "--tuned" not in default.argv and "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED" not in default.env


def test_beacon_gets_a_grpc_listener_only_when_asked(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    (plain,) = bench.make_servers(["beacon"], tmp_path / "a", None, None)
    (with_grpc,) = bench.make_servers(["beacon"], tmp_path / "b", None, None, grpc=True)
    assert "[grpc]" not in Path(plain.argv[plain.argv.index("--config") + 1]).read_text()
    config = Path(with_grpc.argv[with_grpc.argv.index("--config") + 1]).read_text()
    assert '[grpc]\nlisten = ["127.0.0.1:' in config
    assert "max_calls_per_source = 0" in config  # the load is one source with up to 64 calls


def test_grpc_row_says_why_it_cannot_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "GRPC_LOAD", tmp_path / "h2_load.py")
    why = bench.grpc_unavailable()
    assert why is not None and "bench/h2_load.py is not here" in why


def test_charge_is_server_cpu_per_right_answer() -> None:
    """A cell's CPU cost: the server's clock ticks over the cell, in microseconds per right answer."""
    hz = os.sysconf("SC_CLK_TCK")
    charged = bench.Cell("card", "64", "beacon", 1, ok=2000)
    bench.charge(charged, 1000, 1000 + hz)  # one second of CPU for 2000 answers
    assert charged.cpu_us == 500.0
    for before, after, ok in ((None, 5, 10), (5, None, 10), (5, 9, 0)):
        uncharged = bench.Cell("card", "64", "beacon", 1, ok=ok)
        bench.charge(uncharged, before, after)
        assert uncharged.cpu_us is None


def test_disk_sync_says_what_an_fdatasync_takes_where_the_servers_write(tmp_path: Path) -> None:
    """The results header's disk line: measured in the directory given, which it leaves as it found it."""
    line = bench.disk_sync(tmp_path)
    assert line.startswith("fdatasync of a 200-byte append in the servers' directory, 500 calls before the first "
                           "cell: median "), line
    assert line.endswith(" ms") and ", p90 " in line
    assert list(tmp_path.iterdir()) == []
