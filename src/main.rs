//! `cgmon-rs`: the program. Everything lives in the library (`cgmon_rs::app`).

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
    cgmon_rs::app::main(args)
}
