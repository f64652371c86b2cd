//! `cgmon-rs`: for now, a streaming machine-readable `ss -tni` (see `cgmon_rs::dumpcmd`).

use std::process::ExitCode;

use cgmon_rs::dumpcmd;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", dumpcmd::USAGE);
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("cgmon-rs {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let parsed = match dumpcmd::parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cgmon-rs: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cgmon-rs: starting runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = std::io::BufWriter::new(std::io::stdout().lock());
    ExitCode::from(rt.block_on(dumpcmd::run(parsed, out)))
}
