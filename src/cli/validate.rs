//! What the parsed flags must agree on beyond their types, checked once: the filter
//! compiled, the sink's target, the output's name, and the start-up summary.

use super::flags::{Cli, CumulantKind};
use super::{Config, EnvOrigins, UsageError, hostname, resolve};
use crate::analysis::AnalyzerConfig;
use crate::filter::{self, Expr};
use crate::logging::LogSettings;
use crate::stats::correlation::Adjust;
use crate::stats::summary::QuantileKind;
use crate::units::format_duration;

pub(super) fn validate(cli: Cli, env: EnvOrigins) -> Result<Config, UsageError> {
    let analyzer = AnalyzerConfig {
        quantile: match cli.cumulant_kind {
            CumulantKind::Lininterp => QuantileKind::LinInterp,
            CumulantKind::Empirical => QuantileKind::Empirical,
        },
        unweighted_quantiles: cli.unweighted_quantiles,
        unweighted_correlations: cli.unweighted_correlations,
        adjust: adjust(&cli, &env)?,
        realtime_offset_ns: 0,
    };
    let (filter, bytecode) = filter(&cli, &env)?;
    bounds(&cli, &env)?;
    let file_name = file_name(&cli, &env)?;
    let sink = super::sink_flags::sink_config(&cli, &env)?;
    let ipfix = super::sink_flags::ipfix_config(&cli, &env)?;
    let (http_token, warnings) = super::sink_flags::http_token(&cli, &env)?;
    // A map that does not parse is a usage error now, not a surprise at the first SIGHUP.
    if let Some(p) = &cli.dest_map {
        crate::who::dests::Dests::load(p.clone())
            .map_err(|e| UsageError(format!("--dest-map: {e}{}", env.suffix(&["dest_map"]))))?;
    }
    let summary = summary(&cli, filter.as_ref(), &file_name);
    let log = LogSettings {
        directives: crate::logging::directives(&cli.log_level, &cli.log_stages()),
        format: cli.log_format,
        syslog: cli.log_syslog,
    };
    let parts = resolve::Parts {
        filter,
        bytecode,
        analyzer,
        file_name,
        summary,
        sink,
        ipfix,
        http_token,
        warnings,
    };
    let settings = resolve::resolve(&cli, parts);
    Ok(Config { settings, log, serial: cli.serial, env })
}

/// The correlations' adjustment: at most one of cgmon's two flags.
fn adjust(cli: &Cli, env: &EnvOrigins) -> Result<Adjust, UsageError> {
    Ok(match (cli.adjusted_correlation_1, cli.adjusted_correlation_2) {
        (true, true) => {
            return Err(UsageError(format!(
                "-analyzer-adjusted-correlation-1 and -analyzer-adjusted-correlation-2 exclude \
                 each other{}",
                env.suffix(&["adjusted_correlation_1", "adjusted_correlation_2"])
            )));
        }
        (true, false) => Adjust::OlkinPratt,
        (false, true) => Adjust::Adjusted,
        (false, false) => Adjust::None,
    })
}

/// The filter (ports and expression, all of them) and its bytecode. Compiled here, once: a
/// filter too large for the kernel is a usage error, and the sampler takes the bytecode as
/// it is.
fn filter(cli: &Cli, env: &EnvOrigins) -> Result<(Option<Expr>, Option<Vec<u8>>), UsageError> {
    let ports = Expr::from_port_lists(&cli.sport, &cli.dport).map_err(|e| {
        let from = env.suffix(&["sport", "dport"]);
        UsageError(format!("-netlink-sport/-netlink-dport: {e}{from}"))
    })?;
    let text = match (&cli.filter, cli.filter_words.is_empty()) {
        (Some(_), false) => {
            return Err(UsageError(format!(
                "give the filter either as --filter or as trailing words, not both (words: {:?}){}",
                cli.filter_words.join(" "),
                env.suffix(&["filter"])
            )));
        }
        (Some(f), true) => Some(f.clone()),
        (None, false) => Some(cli.filter_words.join(" ")),
        (None, true) => None,
    };
    let expr = match text {
        Some(t) => Some(filter::parse(&t).map_err(|e| {
            let (t, e) = (crate::units::clip(&t), crate::units::clip(&e.to_string()).into_owned());
            UsageError(format!("filter {t:?}: {e}{}", env.suffix(&["filter"])))
        })?),
        None => None,
    };
    let filter = Expr::all_of(ports.into_iter().chain(expr));
    let bytecode = match &filter {
        Some(f) => Some(filter::compile(&f.clone().or_listeners()).map_err(|e| {
            UsageError(format!("filter: {e}{}", env.suffix(&["filter", "sport", "dport"])))
        })?),
        None => None,
    };
    Ok((filter, bytecode))
}

/// Numbers clap's types let through that the monitor cannot use.
fn bounds(cli: &Cli, env: &EnvOrigins) -> Result<(), UsageError> {
    if cli.window_samples.is_some_and(|n| n < 2) {
        return Err(UsageError(format!(
            "invalid value '{}' for '--tracker-window-samples': must be at least 2{}",
            cli.window_samples.unwrap_or(0),
            env.suffix(&["window_samples"])
        )));
    }
    if cli.read_bufsize < 4096 || cli.read_bufsize > 1 << 30 {
        return Err(UsageError(format!(
            "invalid value '{}' for '--netlink-read-bufsize': must be 4096 to 1G bytes{}",
            cli.read_bufsize,
            env.suffix(&["read_bufsize"])
        )));
    }
    if cli.dir.is_none() && cli.rotate_size.is_some() {
        tracing::debug!("-writer-rotate-size has no effect on stdout");
    }
    Ok(())
}

/// The output file's name: `--writer-file`, or cgmon's `cgmon-HOST.json.gz`.
fn file_name(cli: &Cli, env: &EnvOrigins) -> Result<String, UsageError> {
    match &cli.file {
        Some(f) if f.is_empty() || f.contains('/') => Err(UsageError(format!(
            "invalid value {:?} for '--writer-file': a file name without '/'{}",
            crate::units::clip(f),
            env.suffix(&["file"])
        ))),
        Some(f) => Ok(f.clone()),
        None => Ok(format!("cgmon-{}.json.gz", hostname())),
    }
}

/// One line per setting that matters, for the start-up log.
fn summary(c: &Cli, filter: Option<&Expr>, file_name: &str) -> String {
    format!(
        "interval={} filter={} states={} output={} partial={} max_flows={} min_samples={}",
        format_duration(c.interval),
        filter.map_or("none".into(), |f| format!("{f:?}")),
        c.states.unwrap_or_default(),
        c.dir.as_ref().map_or("stdout".into(), |d| d.join(file_name).display().to_string()),
        c.partial,
        c.max_flows,
        c.min_samples,
    )
}
