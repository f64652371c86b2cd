//! `cgmon-rs`: the program. Everything lives in the library: the monitor is
//! `cgmon_rs::app`, `cgmon-rs diagnose` is `cgmon_rs::diagnose`, `cgmon-rs plot` and
//! `cgmon-rs report` are `cgmon_rs::report`, `cgmon-rs clickhouse-ddl` is
//! `cgmon_rs::cli::ddl_cmd`.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Arguments are read as the OS gives them: `std::env::args` panics on one that is not
    // UTF-8. Such an argument is a usage error, named (lossily) on one line.
    let mut args = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.into_string() {
            Ok(s) => args.push(s),
            Err(bad) => {
                eprintln!(
                    "cgmon-rs: invalid argument {:?}: not valid UTF-8",
                    bad.to_string_lossy()
                );
                return ExitCode::from(2);
            }
        }
    }
    match args.first().map(String::as_str) {
        Some("diagnose") => cgmon_rs::diagnose::main(args[1..].to_vec()),
        Some("plot") => cgmon_rs::report::plot_main(args[1..].to_vec()),
        Some("report") => cgmon_rs::report::report_main(args[1..].to_vec()),
        Some("clickhouse-ddl") => cgmon_rs::cli::ddl_cmd::main(args[1..].to_vec()),
        _ => cgmon_rs::app::main(args),
    }
}
