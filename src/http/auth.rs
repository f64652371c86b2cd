//! `--http-token-file`: every request but `/healthz` must carry the token, as
//! `Authorization: Bearer TOKEN` (Prometheus's `authorization.credentials_file`, curl's
//! `-H`) or `Authorization: Basic` with the token as the password (a browser asks for it,
//! Prometheus's `basic_auth.password_file`). The pages and `/metrics` name every local
//! user's programs, peers and pids, which `ss -p` and `hidepid=` keep from other users;
//! `/healthz` says only whether sampling works, for probes that hold no secret.

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};

/// The answer to a request, or `None` to serve it: 401 without the token.
pub fn check(token: &str, req: &Request<Body>) -> Option<Response<Body>> {
    if req.uri().path() == "/healthz" {
        return None;
    }
    let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if given.is_some_and(|v| carries(token, v)) {
        return None;
    }
    let r = Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(header::WWW_AUTHENTICATE, "Basic realm=\"cgmon-rs\", charset=\"UTF-8\"")
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Body::from("this server needs its token (--http-token-file)\n"))
        .expect("a fixed response");
    Some(r)
}

/// True when the `Authorization` value `v` carries `token`.
fn carries(token: &str, v: &str) -> bool {
    use base64::Engine as _;
    let (scheme, rest) = v.split_once(' ').unwrap_or((v, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return same(rest.as_bytes(), token.as_bytes());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(rest) else {
            return false;
        };
        // Any user name: the token is the secret.
        let pw = raw.iter().position(|&b| b == b':').map_or(&raw[..0], |i| &raw[i + 1..]);
        return same(pw, token.as_bytes());
    }
    false
}

/// Compares in time that does not depend on where the two first differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str, auth: Option<&str>) -> Request<Body> {
        let mut b = Request::builder().uri(path);
        if let Some(a) = auth {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn only_the_token_opens_the_pages_and_healthz_needs_none() {
        use base64::Engine as _;
        let t = "0123456789abcdef";
        let basic =
            |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        assert!(check(t, &req("/healthz", None)).is_none());
        for ok in [
            format!("Bearer {t}"),
            format!("bearer  {t}"),
            basic(&format!("me:{t}")),
            basic(&format!(":{t}")),
        ] {
            assert!(check(t, &req("/", Some(&ok))).is_none(), "{ok}");
        }
        for bad in [
            None,
            Some("Bearer 0123456789abcdeX".to_string()),
            Some(basic(t)),
            Some("Basic !!".into()),
            Some(t.to_string()),
        ] {
            let r = check(t, &req("/metrics", bad.as_deref())).expect("refused");
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{bad:?}");
            assert!(r.headers().contains_key(header::WWW_AUTHENTICATE));
        }
    }
}
