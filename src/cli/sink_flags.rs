//! `--clickhouse` and the flags that go with it, checked before anything is written: the
//! URL, the host name every row carries, the password file and the spool directory. A
//! value that can never work is a usage error here, not a sink that fails at every batch.

use super::flags::Cli;
use super::{EnvOrigins, UsageError, hostname};
use crate::units::clip;

/// `--clickhouse` and its flags as the sink's settings. The password comes from
/// `--clickhouse-password-file` or `CGMON_CLICKHOUSE_PASSWORD`, never from a flag.
pub(super) fn sink_config(
    cli: &Cli,
    env: &EnvOrigins,
) -> Result<Option<crate::sink::SinkConfig>, UsageError> {
    let Some(url) = &cli.clickhouse else { return Ok(None) };
    let from = env.suffix(&["clickhouse", "clickhouse_table"]);
    let mut target = crate::sink::client::Target::parse(url, &cli.clickhouse_table)
        .map_err(|e| UsageError(format!("--clickhouse: {e}{from}")))?;
    let mut warnings = Vec::new();
    target.roots = roots(cli, target.tls)
        .map_err(|e| UsageError(format!("{e}{}", env.suffix(&["clickhouse", "clickhouse_ca"]))))?;
    target.password = match &cli.clickhouse_password_file {
        Some(p) => {
            let (pw, warn) = super::secret::read_first_line(p, "--clickhouse-password-file")
                .map_err(|e| {
                    UsageError(format!(
                        "--clickhouse-password-file {:?}: {e}{}",
                        clip(&p.display().to_string()),
                        env.suffix(&["clickhouse_password_file"])
                    ))
                })?;
            warnings.extend(warn);
            Some(crate::units::Secret(pw))
        }
        None => std::env::var("CGMON_CLICKHOUSE_PASSWORD").ok().map(crate::units::Secret),
    };
    if cli.spool_max < 1 << 20 {
        return Err(UsageError(format!(
            "invalid value '{}' for '--spool-max': at least 1M bytes{}",
            cli.spool_max,
            env.suffix(&["spool_max"])
        )));
    }
    let host = match &cli.host_name {
        Some(h) => check_host_name(h).map_err(|e| {
            UsageError(format!(
                "invalid value {:?} for '--host-name': {e}{}",
                clip(h),
                env.suffix(&["host_name"])
            ))
        })?,
        None => hostname(),
    };
    if let Some(d) = &cli.spool_dir {
        crate::sink::spool::check_dir(d).map_err(|e| {
            UsageError(format!(
                "--spool-dir {:?}: {e}{}",
                clip(&d.display().to_string()),
                env.suffix(&["spool_dir"])
            ))
        })?;
    }
    Ok(Some(crate::sink::SinkConfig {
        target,
        host,
        limits: crate::sink::batch::Limits {
            age: cli.clickhouse_batch_interval,
            ..crate::sink::batch::Limits::default()
        },
        spool_dir: cli.spool_dir.clone(),
        spool_max: cli.spool_max,
        backoff: crate::sink::delivery::Backoff::default(),
        compress: cli.clickhouse_compress,
        timeout: cli.clickhouse_timeout,
        warnings,
    }))
}

/// `--ipfix` and its flags as the exporter's settings: every collector parsed now, so a
/// malformed one stops the program with one line; names are resolved later, and again.
pub(super) fn ipfix_config(
    cli: &Cli,
    env: &EnvOrigins,
) -> Result<Option<crate::ipfix::IpfixConfig>, UsageError> {
    let from = |k: &str| env.suffix(&[k]);
    if cli.ipfix.is_empty() {
        for (set, flag, key) in [
            (cli.ipfix_pen.is_some(), "--ipfix-pen", "ipfix_pen"),
            (cli.ipfix_domain.is_some(), "--ipfix-domain", "ipfix_domain"),
        ] {
            if set {
                return Err(UsageError(format!("{flag} needs --ipfix{}", from(key))));
            }
        }
        return Ok(None);
    }
    let mut collectors = Vec::new();
    for c in &cli.ipfix {
        let a = crate::ipfix::CollectorAddr::parse(c.trim()).map_err(|e| {
            UsageError(format!("invalid value {:?} for '--ipfix': {e}{}", clip(c), from("ipfix")))
        })?;
        collectors.push(a);
    }
    if cli.ipfix_pen == Some(crate::ipfix::template::NTOP_PEN) {
        return Err(UsageError(format!(
            "invalid value '{}' for '--ipfix-pen': that is ntop's enterprise number; give your \
             own (IANA assigns them free){}",
            crate::ipfix::template::NTOP_PEN,
            from("ipfix_pen")
        )));
    }
    Ok(Some(crate::ipfix::IpfixConfig {
        collectors,
        domain: cli.ipfix_domain.unwrap_or_else(|| crate::ipfix::default_domain(&hostname())),
        pen: cli.ipfix_pen,
        message_size: usize::from(cli.ipfix_message_size),
        realtime_offset_ns: 0,
    }))
}

/// Where the system keeps its CA bundle, by distribution (`SSL_CERT_FILE` first).
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];

/// The CA certificates (DER) an https:// server must chain to: `--clickhouse-ca FILE`'s,
/// else the system bundle's. None for http:// (where `--clickhouse-ca` is refused).
fn roots(cli: &Cli, tls: bool) -> Result<Vec<Vec<u8>>, String> {
    let (path, given) = match (&cli.clickhouse_ca, tls) {
        (Some(_), false) => return Err("--clickhouse-ca needs an https:// --clickhouse".into()),
        (None, false) => return Ok(Vec::new()),
        (Some(p), true) => (p.clone(), true),
        (None, true) => {
            let env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
            let found =
                env.into_iter().chain(SYSTEM_BUNDLES.iter().map(Into::into)).find(|p| p.is_file());
            match found {
                Some(p) => (p, false),
                None => {
                    return Err("https:// with no system CA bundle found (install \
                                ca-certificates, or give --clickhouse-ca FILE)"
                        .into());
                }
            }
        }
    };
    let name = if given { "--clickhouse-ca" } else { "the system CA bundle" };
    let shown = clip(&path.display().to_string()).into_owned();
    let meta = std::fs::metadata(&path).map_err(|e| format!("{name} {shown:?}: {e}"))?;
    if !meta.is_file() || meta.len() > 16 << 20 {
        return Err(format!("{name} {shown:?}: not a regular file of at most 16 MiB"));
    }
    let pem = std::fs::read(&path).map_err(|e| format!("{name} {shown:?}: {e}"))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c.der().to_vec()),
            Ok(_) => {}
            Err(e) => return Err(format!("{name} {shown:?}: {e}")),
        }
    }
    if certs.is_empty() {
        return Err(format!("{name} {shown:?}: no PEM certificate in it"));
    }
    Ok(certs)
}

/// `--http-token-file`: the token every HTTP request but `/healthz` must carry, and the
/// warnings its file earned.
pub(super) fn http_token(
    cli: &Cli,
    env: &EnvOrigins,
) -> Result<(Option<crate::units::Secret>, Vec<String>), UsageError> {
    let Some(p) = &cli.http_token_file else { return Ok((None, Vec::new())) };
    let bad = |e: String| {
        UsageError(format!(
            "--http-token-file {:?}: {e}{}",
            clip(&p.display().to_string()),
            env.suffix(&["http_token_file"])
        ))
    };
    if cli.http_server.is_none() {
        return Err(bad("needs --run-http-server (there is no server to guard)".into()));
    }
    let (token, warnings) = super::secret::read_first_line(p, "--http-token-file").map_err(bad)?;
    if token.len() < 16 {
        return Err(bad("the token is shorter than 16 characters".into()));
    }
    Ok((Some(crate::units::Secret(token)), warnings))
}

/// The name every row's `Host` carries and every `BatchId` begins with: not empty, at most
/// 255 bytes, no control character (a newline would split a spooled batch's head).
pub fn check_host_name(h: &str) -> Result<String, String> {
    if h.is_empty() {
        return Err("empty".into());
    }
    if h.len() > 255 {
        return Err(format!("{} bytes, over 255", h.len()));
    }
    if h.chars().any(char::is_control) {
        return Err("a control character (a newline, say)".into());
    }
    Ok(h.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_that_would_break_a_batch_id_are_refused() {
        assert_eq!(check_host_name("web-1.eu"), Ok("web-1.eu".into()));
        assert!(check_host_name("").unwrap_err().contains("empty"));
        assert!(check_host_name("web-1\n").unwrap_err().contains("control"));
        assert!(check_host_name(&"h".repeat(256)).unwrap_err().contains("over 255"));
    }
}
