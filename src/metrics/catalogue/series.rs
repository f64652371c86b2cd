//! The catalogue's table: every series, with how it is built (see `catalogue.rs` for what a
//! series is and who reads the table).

use super::Section::*;
use super::make::{counter, gauge, histogram, in_unit, labelled};
use super::{Series, Unit};

/// One member of `cgmon_flow_owners_total`: the flows counted at `Metrics::flow_owners[i]`.
macro_rules! owners {
    ($i:literal, $how:literal, $says:literal) => {
        labelled(
            ("how", $how),
            counter(Flows, "cgmon_flow_owners", $says, OWNERS_HELP, |m| m.flow_owners[$i].get()),
        )
    };
}

/// The help of `cgmon_flow_owners_total`.
const OWNERS_HELP: &str = "Flows ended, by how the process that owned the socket was found \
     (socket, listener) or why not (not_found, skipped, none: a connecting socket seen only in \
     its destroy event, or --no-process)";

/// Every series of the monitor's own, in the order `/metrics` exposes them.
pub static SERIES: &[Series] = &[
    counter(Dumps, "cgmon_dumps", "taken", "sock_diag dumps taken", |m| m.dumps.get()),
    counter(
        Dumps,
        "cgmon_netlink_errors",
        "failed (netlink error or timeout)",
        "Dumps that failed (netlink error or timeout)",
        |m| m.dump_errors.get(),
    ),
    counter(
        Dumps,
        "cgmon_dumps_incomplete",
        "incomplete",
        "Dumps interrupted (NLM_F_DUMP_INTR), truncated or malformed; no flow ended on them",
        |m| m.dumps_incomplete.get(),
    ),
    counter(
        Dumps,
        "cgmon_ticks_overrun",
        "ticks overrun",
        "Ticks missed because a dump outlasted the interval",
        |m| m.ticks_overrun.get(),
    ),
    gauge(
        Dumps,
        "cgmon_dump_sockets",
        "sockets in the last",
        "Sockets in the last full dump (a namespace it did not walk: as at its last walk)",
        |m| m.sockets_last_dump.get(),
    ),
    counter(
        Sampling,
        "cgmon_exact_polls",
        "exact polls",
        "Ticks that asked only for the hot flows, by exact requests",
        |m| m.exact_polls.get(),
    ),
    counter(
        Sampling,
        "cgmon_exact_requests",
        "exact requests",
        "Sockets asked for by exact requests",
        |m| m.exact_requests.get(),
    ),
    counter(
        Sampling,
        "cgmon_exact_gone",
        "exact requests answered gone",
        "Exact requests answered gone (ENOENT/ESTALE): the flow ended there",
        |m| m.exact_gone.get(),
    ),
    counter(
        Sampling,
        "cgmon_exact_unanswered",
        "exact requests unanswered",
        "Exact requests whose answers overran the socket buffer (asked again at the next tick)",
        |m| m.exact_unanswered.get(),
    ),
    gauge(
        Sampling,
        "cgmon_hot_flows",
        "hot flows",
        "Flows polled every tick (their counters move)",
        |m| m.hot_flows.get(),
    ),
    gauge(
        Namespaces,
        "cgmon_netns_sampled",
        "sampled",
        "Network namespaces sampled (--netns)",
        |m| m.netns_sampled.get(),
    ),
    gauge(
        Namespaces,
        "cgmon_netns_unreachable",
        "found but not reachable",
        "Network namespaces found but not sampled: not readable or not enterable (capabilities)",
        |m| m.netns_unreachable.get(),
    ),
    counter(
        Namespaces,
        "cgmon_netns_walks_skipped",
        "walks left out (nothing moved in them)",
        "Namespaces a full dump did not walk: no TCP segment sent or received in them since \
         their last walk",
        |m| m.netns_walks_skipped.get(),
    ),
    gauge(
        Namespaces,
        "cgmon_netns_shared_tcp_hash",
        "sharing the host's TCP table",
        "Namespaces sampled that share the host's TCP hash table (each walk of one reads \
         every TCP socket of the host)",
        |m| m.netns_shared_tcp_hash.get(),
    ),
    counter(
        Sampling,
        "cgmon_full_dumps_cheaper",
        "full dumps taken as cheaper",
        "Full dumps taken because the hot set was too large for exact requests to be cheaper",
        |m| m.full_dumps_cheaper.get(),
    ),
    counter(
        Sampling,
        "cgmon_flows_discovered_late",
        "flows found late",
        "Flows found by a full dump more than an interval after the one before",
        |m| m.flows_discovered_late.get(),
    ),
    gauge(Flows, "cgmon_flows_active", "tracked", "Flows being tracked", |m| m.flows_active.get()),
    gauge(
        Flows,
        "cgmon_flows_packed",
        "of them idle and packed",
        "Flows being tracked that are idle (no change for a minute, or since the first dump) and kept packed: their latest counters and one sample, about 90 bytes",
        |m| m.flows_packed.get(),
    ),
    in_unit(
        Unit::Bytes,
        gauge(
            Flows,
            "cgmon_flows_packed_bytes",
            "held by packed flows",
            "Bytes the packed flows take (dead entries not yet reclaimed included)",
            |m| m.flows_packed_bytes.get(),
        ),
    ),
    counter(
        Flows,
        "cgmon_flows_refused",
        "refused by -tracker-max-flows",
        "Flows not recorded for -tracker-max-flows",
        |m| m.flows_refused.get(),
    ),
    owners!(0, "socket", "process found by its socket"),
    owners!(1, "listener", "process of its listener"),
    owners!(2, "not_found", "no process found"),
    owners!(3, "skipped", "process not looked for (walker behind)"),
    owners!(4, "none", "nothing to look for"),
    counter(Destroy, "cgmon_destroy_events", "received", "Socket destroy events received", |m| {
        m.destroy_events.get()
    }),
    counter(
        Destroy,
        "cgmon_destroy_overruns",
        "overruns (ENOBUFS)",
        "ENOBUFS errors on the destroy sockets: the kernel dropped one or more events each time",
        |m| m.destroy_overruns.get(),
    ),
    counter(
        Destroy,
        "cgmon_destroy_events_lost",
        "lost (buffer full)",
        "Destroy events the kernel dropped for want of room in the socket's buffer (its drop \
         counter), all namespaces",
        |m| m.destroy_events_lost.get(),
    ),
    gauge(
        Destroy,
        "cgmon_destroy_buffer_bytes",
        "buffer bytes (all namespaces)",
        "The destroy sockets' receive buffers, summed over the namespaces (--destroy-buffer; \
         capped by net.core.rmem_max without CAP_NET_ADMIN)",
        |m| m.destroy_buffer_bytes.get(),
    ),
    gauge(
        Destroy,
        "cgmon_flows_awaiting_destroy",
        "flows awaiting theirs",
        "Flows that left the dumps, waiting for their destroy event (-tracker-destroy-grace)",
        |m| m.flows_awaiting_destroy.get(),
    ),
    counter(
        Destroy,
        "cgmon_destroy_awaited",
        "flows that got theirs in the grace period",
        "Flows that left the dumps and got their destroy event within the grace period",
        |m| m.destroy_awaited.get(),
    ),
    counter(
        Destroy,
        "cgmon_destroy_wait_expired",
        "flows ended as gone",
        "Flows that left the dumps and ended as gone: no destroy event within the grace period",
        |m| m.destroy_wait_expired.get(),
    ),
    counter(
        Destroy,
        "cgmon_destroy_events_late",
        "late (the flow was written as gone)",
        "Destroy events for flows already written as gone (counted, not written again)",
        |m| m.destroy_late.get(),
    ),
    gauge(
        Flows,
        "cgmon_samples_held",
        "samples held",
        "Retained samples held by the flows being tracked (-tracker-max-samples bounds them)",
        |m| m.samples_held.get(),
    ),
    counter(
        Flows,
        "cgmon_windows_cut_for_memory",
        "windows cut for memory",
        "Windows written early to keep the samples held within -tracker-max-samples",
        |m| m.windows_cut_for_memory.get(),
    ),
    gauge(Http, "cgmon_http_connections", "connections open", "HTTP connections open", |m| {
        m.http.connections.get()
    }),
    counter(
        Http,
        "cgmon_http_refused",
        "refused",
        "HTTP connections closed at once: at --http-max-connections with every slot \
         mid-response",
        |m| m.http.refused.get(),
    ),
    counter(
        Http,
        "cgmon_http_evicted",
        "evicted",
        "Idle or half-sent HTTP connections closed to make room for a new one at \
         --http-max-connections",
        |m| m.http.evicted.get(),
    ),
    counter(
        Http,
        "cgmon_http_timeouts",
        "timed out",
        "HTTP connections closed by the header-read, write or idle timeout",
        |m| m.http.timeouts.get(),
    ),
    counter(
        Http,
        "cgmon_http_accept_errors",
        "accepts failed",
        "HTTP accepts that failed (e.g. out of file descriptors)",
        |m| m.http.accept_errors.get(),
    ),
    counter(Records, "cgmon_records_written", "written", "Flow records written", |m| {
        m.records_written.get()
    }),
    counter(
        Records,
        "cgmon_writer_files_deleted",
        "rotated files deleted",
        "Rotated output files deleted to stay within --writer-keep-files and --writer-keep-size",
        |m| m.files_deleted.get(),
    ),
    counter(
        Records,
        "cgmon_records_partial_skipped",
        "partial not written",
        "Partial flow records not written (no -writer-partial)",
        |m| m.records_partial_skipped.get(),
    ),
    counter(
        Records,
        "cgmon_records_dropped",
        "dropped (channel full)",
        "Flow records dropped because a stage's channel was full",
        |m| m.records_dropped.get(),
    ),
    counter(
        Records,
        "cgmon_records_lost",
        "lost (output failed)",
        "Flow records lost because the output failed",
        |m| m.records_lost.get(),
    ),
    counter(Records, "cgmon_write_errors", "write errors", "Output write errors", |m| {
        m.write_errors.get()
    }),
    counter(Records, "cgmon_rotations", "rotations", "Output files rotated", |m| m.rotations.get()),
    gauge(
        Records,
        "cgmon_output_failing",
        "output failing (1 while it fails)",
        "1 while the output fails (write, flush or rotation; records wait in the backlog)",
        |m| m.output_failing.get(),
    ),
    histogram(
        Dumps,
        "cgmon_dump_duration_seconds",
        "dumps timed",
        "Time per dump, request to last socket tracked",
        |m| &m.dump_seconds,
    ),
    histogram(
        Dumps,
        "cgmon_tick_lateness_seconds",
        "ticks timed against the grid",
        "How late each dump started after its point on the interval's grid (jitter)",
        |m| &m.tick_lateness,
    ),
    in_unit(
        Unit::Nanos,
        gauge(
            Sampling,
            "cgmon_full_dump_interval_seconds",
            "between full dumps",
            "Time between the last two full dumps (the full-dump pace achieved)",
            |m| m.full_dump_interval_ns.get(),
        ),
    ),
    in_unit(
        Unit::Nanos,
        gauge(
            Sampling,
            "cgmon_full_dump_interval_planned_seconds",
            "between full dumps as the budget allows (new flows are found at most this late)",
            "Time between full dumps that --cpu-budget (and --max-full-interval) allows now: a flow that begins is found by a full dump at most this late, or by its destroy event if it ends first",
            |m| m.full_dump_interval_planned_ns.get(),
        ),
    ),
    in_unit(
        Unit::Ppm,
        gauge(
            Sampling,
            "cgmon_cpu_budget_ratio",
            "of a core as budget",
            "--cpu-budget, as a share of one core",
            |m| m.cpu_budget_ppm.get(),
        ),
    ),
    in_unit(
        Unit::Ppm,
        gauge(
            Sampling,
            "cgmon_sampling_cpu_planned_ratio",
            "of a core planned (hot flows' polls and full dumps at the planned pace)",
            "CPU the sampling pace costs now, as a share of one core: exact polls of the hot flows every interval and full dumps at the planned interval",
            |m| m.sampling_cpu_planned_ppm.get(),
        ),
    ),
    gauge(
        Sampling,
        "cgmon_sampling_over_budget",
        "over budget (1 while the planned pace costs more than --cpu-budget)",
        "1 while the planned pace costs more than --cpu-budget: the hot flows' polls leave full dumps less than a quarter of it, or --max-full-interval forces more dumps",
        |m| m.over_budget.get(),
    ),
    in_unit(
        Unit::Nanos,
        counter(
            Sampling,
            "cgmon_sampling_cpu_seconds",
            "of CPU sampling",
            "CPU time spent in dumps and exact polls, the kernel's part included",
            |m| m.sampling_cpu_ns.get(),
        ),
    ),
    in_unit(
        Unit::Nanos,
        counter(
            Sampling,
            "cgmon_naming_cpu_seconds",
            "of CPU naming programs",
            "CPU time the process walks that name each flow's program spent; with cgmon_sampling_cpu_seconds_total, what --cpu-budget covers",
            |m| m.naming_cpu_ns.get(),
        ),
    ),
    in_unit(
        Unit::Nanos,
        counter(
            Sampling,
            "cgmon_upkeep_cpu_seconds",
            "of CPU upkeep",
            "CPU time the process spent besides sampling, naming and pushed work: ticks, the runtime, the start-up; charged to --cpu-budget up to a tenth of it",
            |m| m.budget.upkeep().total_ns,
        ),
    ),
    in_unit(
        Unit::Nanos,
        counter(
            Sampling,
            "cgmon_upkeep_uncharged_cpu_seconds",
            "of CPU upkeep over its cap",
            "The part of cgmon_upkeep_cpu_seconds_total over a tenth of --cpu-budget, not charged to it: the process took that much more than its budget",
            |m| m.budget.upkeep().uncharged_ns,
        ),
    ),
    in_unit(
        Unit::Nanos,
        counter(
            Sampling,
            "cgmon_pushed_cpu_seconds",
            "of CPU on pushed work",
            "CPU time spent on work the kernel and users push at the monitor, outside --cpu-budget: destroy events, analysing, writing and sending records, answering HTTP requests",
            |m| m.budget.upkeep().pushed_ns,
        ),
    ),
    counter(
        Sampling,
        "cgmon_naming_named",
        "new flows' programs named",
        "New flows whose process was found by a walk (or from its listener)",
        |m| m.naming_named.get(),
    ),
    counter(
        Sampling,
        "cgmon_naming_not_found",
        "new flows' programs not found",
        "New flows walked for whose process was not found: the socket closed first, or its process is another user's and the monitor lacks CAP_SYS_PTRACE",
        |m| m.naming_not_found.get(),
    ),
    counter(
        Sampling,
        "cgmon_naming_skipped",
        "new flows' programs skipped (over the CPU budget)",
        "New flows whose process was not looked for because --cpu-budget could not cover the walk: their records say Comm unknown",
        |m| m.naming_skipped.get(),
    ),
    gauge(
        Sampling,
        "cgmon_naming_waiting",
        "flows waiting to be named",
        "New flows whose process walk waits for the CPU budget (the first walk of a large host is spread so)",
        |m| m.budget.waiting(),
    ),
    histogram(
        Sampling,
        "cgmon_flow_discovery_delay_seconds",
        "late discoveries timed",
        "For flows discovered late, the most they may have been late by",
        |m| &m.discovery_delay,
    ),
    in_unit(
        Unit::Nanos,
        counter(
            Dumps,
            "cgmon_decode_seconds",
            "decoding",
            "Time spent decoding dumps and tracking their sockets (without the kernel's walk)",
            |m| m.decode_ns.get(),
        ),
    ),
    labelled(
        ("channel", "analyzer"),
        gauge(
            Records,
            "cgmon_channel_depth",
            "batches waiting for the analyzer",
            "Batches waiting in a stage's input channel",
            |m| m.ended_queue.get(),
        ),
    ),
    labelled(
        ("channel", "writer"),
        gauge(
            Records,
            "cgmon_channel_depth",
            "batches waiting for the writer",
            "Batches waiting in a stage's input channel",
            |m| m.writer_queue.get(),
        ),
    ),
    gauge(
        Records,
        "cgmon_writer_backlog_records",
        "in backlog",
        "Records held while the output cannot take them",
        |m| m.writer_backlog.get(),
    ),
    labelled(
        ("result", "sent"),
        counter(
            Sink,
            "cgmon_sink_records",
            "sent",
            "Records the ClickHouse sink delivered (the server acknowledged them) or dropped",
            |m| m.sink.sent.get(),
        ),
    ),
    labelled(
        ("result", "dropped"),
        counter(
            Sink,
            "cgmon_sink_records",
            "dropped",
            "Records the ClickHouse sink delivered (the server acknowledged them) or dropped",
            |m| m.sink.dropped.get(),
        ),
    ),
    gauge(
        Sink,
        "cgmon_sink_waiting_records",
        "records waiting",
        "Records waiting for ClickHouse, in memory or in the spool",
        |m| m.sink.waiting_records.get(),
    ),
    in_unit(
        Unit::Bytes,
        gauge(
            Sink,
            "cgmon_sink_waiting_bytes",
            "compressed waiting",
            "Compressed bytes waiting for ClickHouse (--spool-max bounds them)",
            |m| m.sink.waiting_bytes.get(),
        ),
    ),
    gauge(
        Sink,
        "cgmon_sink_spooled_batches",
        "batches spooled",
        "Batches waiting in --spool-dir",
        |m| m.sink.spooled_batches.get(),
    ),
    gauge(
        Sink,
        "cgmon_sink_failing",
        "failing (1 while it fails)",
        "1 while the last attempt to reach ClickHouse failed",
        |m| m.sink.failing.get(),
    ),
    counter(
        Sink,
        "cgmon_sink_failures",
        "failed attempts",
        "Failed attempts to insert into or ask ClickHouse",
        |m| m.sink.failures.get(),
    ),
    counter(
        Sink,
        "cgmon_sink_batches_found_stored",
        "batches found stored after a lost reply",
        "Batches found already stored after a lost reply, so not sent twice",
        |m| m.sink.found_stored.get(),
    ),
    counter(
        Sink,
        "cgmon_sink_part_pressure",
        "inserts refused for too many parts",
        "Inserts ClickHouse refused for too many parts (Code 252); each stretches the batch interval",
        |m| m.sink.part_pressure.get(),
    ),
    in_unit(
        Unit::Nanos,
        gauge(
            Sink,
            "cgmon_sink_batch_interval_seconds",
            "batch interval in force",
            "The batch interval in force: --clickhouse-batch-interval, stretched while ClickHouse has too many parts",
            |m| m.sink.batch_interval_ns.get(),
        ),
    ),
    histogram(
        Sink,
        "cgmon_sink_batch_duration_seconds",
        "batch deliveries timed",
        "Time to deliver one batch to ClickHouse (the successful request)",
        |m| &m.sink.batch_seconds,
    ),
    labelled(
        ("result", "sent"),
        counter(
            Ipfix,
            "cgmon_ipfix_records",
            "sent",
            "IPFIX data records a socket took, or dropped, counted once per collector",
            |m| m.ipfix.sent.get(),
        ),
    ),
    labelled(
        ("result", "dropped"),
        counter(
            Ipfix,
            "cgmon_ipfix_records",
            "dropped",
            "IPFIX data records a socket took, or dropped, counted once per collector",
            |m| m.ipfix.dropped.get(),
        ),
    ),
    counter(
        Ipfix,
        "cgmon_ipfix_messages",
        "messages sent",
        "IPFIX messages a socket took (templates included)",
        |m| m.ipfix.messages.get(),
    ),
    labelled(
        ("reason", "refused"),
        counter(
            Ipfix,
            "cgmon_ipfix_send_failures",
            "sends refused (nothing listening)",
            "IPFIX sends that failed, by why: the collector's host refused (ICMP port unreachable), its name did not resolve, the socket's buffer was full, another error, or the hand-off from the writer was full",
            |m| m.ipfix.refused.get(),
        ),
    ),
    labelled(
        ("reason", "unresolved"),
        counter(
            Ipfix,
            "cgmon_ipfix_send_failures",
            "sends with no address (name not resolved)",
            "IPFIX sends that failed, by why: the collector's host refused (ICMP port unreachable), its name did not resolve, the socket's buffer was full, another error, or the hand-off from the writer was full",
            |m| m.ipfix.unresolved.get(),
        ),
    ),
    labelled(
        ("reason", "buffer_full"),
        counter(
            Ipfix,
            "cgmon_ipfix_send_failures",
            "sends the socket could not take",
            "IPFIX sends that failed, by why: the collector's host refused (ICMP port unreachable), its name did not resolve, the socket's buffer was full, another error, or the hand-off from the writer was full",
            |m| m.ipfix.full.get(),
        ),
    ),
    labelled(
        ("reason", "other"),
        counter(
            Ipfix,
            "cgmon_ipfix_send_failures",
            "sends failed otherwise",
            "IPFIX sends that failed, by why: the collector's host refused (ICMP port unreachable), its name did not resolve, the socket's buffer was full, another error, or the hand-off from the writer was full",
            |m| m.ipfix.other.get(),
        ),
    ),
    labelled(
        ("reason", "handoff_full"),
        counter(
            Ipfix,
            "cgmon_ipfix_send_failures",
            "batches not handed to the exporter",
            "IPFIX sends that failed, by why: the collector's host refused (ICMP port unreachable), its name did not resolve, the socket's buffer was full, another error, or the hand-off from the writer was full",
            |m| m.ipfix.handoff_full.get(),
        ),
    ),
    counter(
        Ipfix,
        "cgmon_ipfix_oversize_messages",
        "messages over --ipfix-message-size",
        "IPFIX messages over --ipfix-message-size: one record too large to share a message",
        |m| m.ipfix.oversize.get(),
    ),
    gauge(
        Ipfix,
        "cgmon_ipfix_failing",
        "collectors failing",
        "IPFIX collectors whose last send failed",
        |m| m.ipfix.failing.get(),
    ),
];
