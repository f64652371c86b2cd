//! `cgmon-rs clickhouse-ddl`: prints the fleet's table as the monitor would create it, for
//! the people who create it by hand ([`crate::sink::ddl::script`]).

use std::process::ExitCode;

/// `cgmon-rs clickhouse-ddl [--server-version V] [--cluster NAME] [--table [DB.]TABLE]`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "cgmon-rs clickhouse-ddl",
    about = "Print the ClickHouse table the monitor writes to, as it would create it: for \
             clickhouse-client --multiquery",
    disable_version_flag = true
)]
pub struct DdlCli {
    /// The server's version (SELECT version()): 18.16 takes plainer types than 20.1 and later
    #[arg(long = "server-version", value_name = "V", default_value = "26.9",
          value_parser = |s: &str| crate::sink::ddl::Version::parse(s).map_err(|e| e.0))]
    pub server_version: crate::sink::ddl::Version,
    /// A sharded fleet: each server's TABLE_local and a Distributed table over the cluster
    /// NAME (as <remote_servers> names it)
    #[arg(long, value_name = "NAME", value_parser = cluster_name)]
    pub cluster: Option<String>,
    /// [DB.]TABLE, as --clickhouse-table takes it; the database defaults to cgmon
    #[arg(long, value_name = "TABLE", default_value = "cgmon.flows")]
    pub table: String,
}

fn cluster_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 200
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok { Ok(s.to_string()) } else { Err("letters, digits and _".into()) }
}

/// Runs `cgmon-rs clickhouse-ddl ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    let cli: DdlCli = match super::parse_subcommand("clickhouse-ddl", args) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // The table's name is checked as the monitor checks --clickhouse-table.
    let t = match crate::sink::target::Target::parse("http://localhost/", &cli.table) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cgmon-rs clickhouse-ddl: --table: {}", e.0);
            return ExitCode::from(super::EXIT_USAGE);
        }
    };
    print!(
        "{}",
        crate::sink::ddl::script(cli.server_version, &t.db, &t.table, cli.cluster.as_deref())
    );
    ExitCode::SUCCESS
}
