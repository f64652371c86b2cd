//! Debian's ClickHouse 18.16 as a test or a bench starts it: a plain process on free
//! loopback ports, its data in a temporary directory. Shared by the `it` tests and
//! `benches/sink.rs`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// Debian's ClickHouse 18.16, run as a plain process on free loopback ports with its data
/// in a temporary directory (docs/clickhouse.md); killed on drop.
pub struct ChServer {
    dir: tempfile::TempDir,
    /// HTTP port.
    pub http: u16,
    /// Native port (clickhouse-client's).
    #[allow(dead_code)] // the benches have no use for it
    pub tcp: u16,
    /// HTTPS port, when started with a certificate ([`ChServer::start_tls`]).
    #[allow(dead_code)] // the bench has no use for it
    pub https: Option<u16>,
    child: Option<std::process::Child>,
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl ChServer {
    /// Starts a server, or `None` (the test skips) when the package is not installed; under
    /// CI=true it must be. `cluster`: the native ports of a two-shard cluster `cgmon_fleet`.
    pub fn start(cluster: Option<(u16, u16)>, tcp: Option<u16>) -> Option<Self> {
        Self::start_with(cluster, tcp, None, None)
    }

    /// A server with a user `name` whose password is `password`, beside `default`.
    #[allow(dead_code)] // the benches have no use for it
    pub fn start_with_user(name: &str, password: &str) -> Option<Self> {
        Self::start_with(None, None, None, Some((name, password)))
    }

    /// A server that also answers HTTPS with `cert` and `key` (PEM files), on
    /// [`https`](Self::https).
    #[allow(dead_code)] // the bench has no use for it
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Option<Self> {
        Self::start_with(None, None, Some((cert, key)), None)
    }

    fn start_with(
        cluster: Option<(u16, u16)>,
        tcp: Option<u16>,
        tls: Option<(&std::path::Path, &std::path::Path)>,
        user: Option<(&str, &str)>,
    ) -> Option<Self> {
        if !std::path::Path::new("/usr/sbin/clickhouse-server").exists()
            && Command::new("clickhouse-server").arg("--version").output().is_err()
        {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true: clickhouse-server is required"
            );
            eprintln!(
                "skipped: clickhouse-server is not installed (apt-get install clickhouse-server)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let (http, tcp) = (free_port(), tcp.unwrap_or_else(free_port));
        let d = dir.path().display().to_string();
        let mut cfg = std::fs::read_to_string("/etc/clickhouse-server/config.xml").unwrap();
        cfg = cfg
            .replace("/var/lib/clickhouse/", &format!("{d}/data/"))
            .replace("/var/log/clickhouse-server/", &format!("{d}/log/"))
            .replace("<http_port>8123</http_port>", &format!("<http_port>{http}</http_port>"))
            .replace("<tcp_port>9000</tcp_port>", &format!("<tcp_port>{tcp}</tcp_port>"))
            .replace(
                "<interserver_http_port>9009</interserver_http_port>",
                &format!("<interserver_http_port>{}</interserver_http_port>", free_port()),
            )
            .replace(
                "<users_config>users.xml</users_config>",
                &format!("<users_config>{d}/users.xml</users_config>"),
            )
            .replace("<listen_host>::1</listen_host>", "");
        let drop_line = |cfg: &str, tag: &str| -> String {
            cfg.lines()
                .filter(|l| !l.trim_start().starts_with(&format!("<{tag}>")))
                .collect::<Vec<_>>()
                .join("\n")
        };
        cfg = drop_line(&cfg, "tcp_port_secure");
        cfg = drop_line(&cfg, "dhParamsFile");
        let https = tls.map(|(cert, key)| {
            let port = free_port();
            // The package's <https_port> sits in a comment: a port of our own goes beside
            // the HTTP one.
            cfg = cfg
                .replace(
                    &format!("<http_port>{http}</http_port>"),
                    &format!("<http_port>{http}</http_port><https_port>{port}</https_port>"),
                )
                .replace("/etc/clickhouse-server/server.crt", &cert.display().to_string())
                .replace("/etc/clickhouse-server/server.key", &key.display().to_string());
            port
        });
        cfg = drop_line(&cfg, "https_port");
        if let Some((a, b)) = cluster {
            let shard = |p: u16| {
                format!("<shard><replica><host>127.0.0.1</host><port>{p}</port></replica></shard>")
            };
            cfg = cfg.replace(
                "<remote_servers incl=\"clickhouse_remote_servers\" >",
                &format!("<remote_servers incl=\"clickhouse_remote_servers\" ><cgmon_fleet>{}{}</cgmon_fleet>", shard(a), shard(b)),
            );
        }
        std::fs::write(dir.path().join("config.xml"), cfg).unwrap();
        let mut users = std::fs::read_to_string("/etc/clickhouse-server/users.xml").unwrap();
        if let Some((name, password)) = user {
            let entry = format!(
                "<{name}><password>{password}</password><networks><ip>::/0</ip></networks>\
                 <profile>default</profile><quota>default</quota></{name}>"
            );
            users = users.replacen("<users>", &format!("<users>{entry}"), 1);
        }
        std::fs::write(dir.path().join("users.xml"), users).unwrap();
        let mut s = Self { dir, http, tcp, https, child: None };
        s.run();
        Some(s)
    }

    fn run(&mut self) {
        let child = Command::new("clickhouse-server")
            .arg(format!("--config-file={}/config.xml", self.dir.path().display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(30);
        while self.query("SELECT 1").as_deref() != Ok("1\n") {
            assert!(Instant::now() < end, "clickhouse-server did not answer within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL, then a start on the same directory.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again after [`kill`](Self::kill).
    #[allow(dead_code)] // the bench has no use for it
    pub fn restart(&mut self) {
        self.run();
    }

    /// The server's process id, while it runs (the bench reads its CPU time).
    #[allow(dead_code)] // the tests have no use for it
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// `http://127.0.0.1:PORT/`.
    #[allow(dead_code)] // the lookup bench has no use for it
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.http)
    }

    /// Runs `sql` over HTTP; the answer's text.
    pub fn query(&self, sql: &str) -> Result<String, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.http)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "POST / HTTP/1.0\r\nContent-Length: {}\r\n\r\n{sql}", sql.len())
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| e.to_string())?;
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") {
            Ok(body.to_string())
        } else {
            Err(body.to_string())
        }
    }
}

impl Drop for ChServer {
    fn drop(&mut self) {
        self.kill();
    }
}
