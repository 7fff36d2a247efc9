//! Where requests may come from: the `Host` this server answers as, and the
//! browser origins that may change state. One check in front of every route, in
//! every mode (API keys, OAuth, or none), so that neither a page the operator
//! opens (a cross-site form, a `fetch` with `text/plain`) nor a name rebound to
//! the server's address (DNS rebinding) can act through the operator's browser.
//!
//! - **Host.** A request whose `Host` is not the server's own is refused (403,
//!   `foreign-host`) on every route. The server's own: the loopback names and
//!   addresses on any port, the address the connection was accepted on, and the
//!   configured names ([`SiteConfig::with_hosts`], `TRAWL_ALLOWED_HOSTS`, for a
//!   public name or a reverse proxy's `Host`). A request with no `Host` at all
//!   is not from a browser and passes.
//! - **Origin.** A request that may change state (any method but `GET`, `HEAD`,
//!   `OPTIONS`; on `/mcp`, any request) with an `Origin` is refused (403,
//!   `cross-site`) unless the origin
//!   is the server's own (its host and port are the request's `Host`) or one of
//!   the configured origins ([`SiteConfig::with_origins`],
//!   `TRAWL_ALLOWED_ORIGINS`; `/mcp` also takes loopback origins on any port, for
//!   local MCP hosts and inspectors). Without an `Origin`, `Sec-Fetch-Site` must
//!   be `same-origin` or `none`, and without that a `Referer` must be of an
//!   allowed origin; a request with none of the three is not from a browser
//!   and passes. Patterns are exact: `http://localhost:*` is `localhost` with
//!   any port and nothing after it.
//! - **Content type.** A state-changing request whose `Content-Type` is one a
//!   page may send without a CORS preflight (`text/plain`,
//!   `application/x-www-form-urlencoded`, `multipart/form-data`) is refused
//!   (415), except on Slack's interactions route, whose bodies are forms by
//!   Slack's design and carry Slack's signature.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::ApiState;

/// The route whose form bodies are Slack's (signed), exempt from the
/// content-type rule.
pub(crate) const SLACK_ROUTE: &str = "/v1/integrations/slack/interactions";

/// The address a connection was accepted on, put in each request's
/// extensions by [`crate::serve_with`]: a `Host` that names it is the server's own.
#[derive(Clone, Copy, Debug)]
pub struct LocalAddr(pub SocketAddr);

/// A `Host` the server answers as: a name or address, with a port or any port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HostPattern {
    host: String,
    port: Option<u16>,
}

/// An origin pattern: scheme, host and a port or any port (`:*`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct OriginPattern {
    scheme: String,
    host: String,
    port: Option<u16>,
}

/// The hosts and origins the server accepts (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct SiteConfig {
    hosts: Vec<HostPattern>,
    origins: Vec<OriginPattern>,
}

const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

impl SiteConfig {
    /// Loopback only, plus the connection's own address.
    pub fn new() -> SiteConfig {
        SiteConfig::default()
    }

    /// Accepts these `Host` values too: `name`, `name:port` or `[v6]:port`.
    pub fn with_hosts<S: AsRef<str>>(
        mut self,
        hosts: impl IntoIterator<Item = S>,
    ) -> Result<SiteConfig, String> {
        for h in hosts {
            let h = h.as_ref().trim();
            if h.is_empty() {
                continue;
            }
            let (host, port) = split_authority(h)
                .ok_or_else(|| format!("{h:?} is not a host name, or a host and a port"))?;
            self.hosts.push(HostPattern { host, port });
        }
        Ok(self)
    }

    /// Accepts these browser origins too: `https://app.example.com`,
    /// `https://app.example.com:8443`, `http://localhost:*`.
    pub fn with_origins<S: AsRef<str>>(
        mut self,
        origins: impl IntoIterator<Item = S>,
    ) -> Result<SiteConfig, String> {
        for o in origins {
            let o = o.as_ref().trim();
            if o.is_empty() {
                continue;
            }
            self.origins.push(parse_origin_pattern(o).ok_or_else(|| {
                format!(
                    "{o:?} is not an origin (scheme://host, scheme://host:port or scheme://host:*)"
                )
            })?);
        }
        Ok(self)
    }

    /// Whether `authority` (a `Host` header's value) is the server's own, for a
    /// connection accepted on `local`.
    fn host_allowed(&self, authority: &str, local: Option<SocketAddr>) -> bool {
        let Some((host, port)) = split_authority(authority) else {
            return false;
        };
        if LOOPBACK_NAMES.contains(&host.as_str()) {
            return true;
        }
        if let (Some(local), Ok(ip)) = (local, host.parse::<IpAddr>())
            && ip == local.ip()
            && port.is_none_or(|p| p == local.port())
        {
            return true;
        }
        self.hosts
            .iter()
            .any(|p| p.host == host && p.port.is_none_or(|want| port == Some(want)))
    }

    /// Whether a browser `origin` may change state here, for a request to
    /// `authority` (its `Host`); `loopback_any_port`: `/mcp`'s extra rule.
    fn origin_allowed(
        &self,
        origin: &str,
        authority: Option<&str>,
        loopback_any_port: bool,
    ) -> bool {
        let Some((scheme, host, port)) = parse_origin(origin) else {
            return false;
        };
        let port = port.or_else(|| default_port(&scheme));
        // The server's own origin: what the browser shows as the page's host
        // and port is what it sends as `Host`.
        if let Some((h, p)) = authority.and_then(split_authority)
            && h == host
            && p.or_else(|| default_port(&scheme)) == port
        {
            return true;
        }
        if loopback_any_port && LOOPBACK_NAMES.contains(&host.as_str()) && scheme == "http" {
            return true;
        }
        self.origins.iter().any(|p| {
            p.scheme == scheme && p.host == host && p.port.is_none_or(|want| port == Some(want))
        })
    }
}

/// `host` (lowercase, IPv6 without brackets) and the port of an authority
/// `host`, `host:port`, `[v6]` or `[v6]:port`; `None` when anything else
/// follows the host (a port that is not a number, user info, a path).
fn split_authority(s: &str) -> Option<(String, Option<u16>)> {
    let s = s.trim();
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        v6.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (v6.to_owned(), port)
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (s.to_owned(), None),
        }
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    let ok_name = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    ok_name.then(|| (host.to_ascii_lowercase(), port))
}

/// Scheme, host and port of a serialized origin (`scheme://host[:port]`,
/// nothing after it); `None` for `null` and for anything else.
fn parse_origin(s: &str) -> Option<(String, String, Option<u16>)> {
    let (scheme, rest) = s.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let (host, port) = split_authority(rest)?;
    Some((scheme, host, port))
}

fn parse_origin_pattern(s: &str) -> Option<OriginPattern> {
    match s.strip_suffix(":*") {
        Some(base) => {
            let (scheme, host, None) = parse_origin(base)? else {
                return None;
            };
            Some(OriginPattern {
                scheme,
                host,
                port: None,
            })
        }
        None => {
            let (scheme, host, port) = parse_origin(s)?;
            let port = port.or_else(|| default_port(&scheme));
            Some(OriginPattern { scheme, host, port })
        }
    }
}

/// The port a scheme implies when an origin omits it (RFC 6454 §4).
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// The origin of a `Referer` URL (`scheme://host[:port]`), if it has one.
fn referer_origin(referer: &str) -> Option<String> {
    let url = url::Url::parse(referer).ok()?;
    let host = url.host_str()?;
    Some(match url.port() {
        Some(p) => format!("{}://{host}:{p}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    })
}

/// Media types a page may send cross-site without a preflight (Fetch's
/// CORS-safelisted request-header `Content-Type`).
fn cors_simple(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    matches!(
        essence.as_str(),
        "text/plain" | "application/x-www-form-urlencoded" | "multipart/form-data"
    )
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"))
}

/// The check of one request (see the module documentation); `Err` says why it
/// is refused.
pub(crate) fn check(
    config: &SiteConfig,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    uri_authority: Option<&str>,
    local: Option<SocketAddr>,
) -> Result<(), ApiError> {
    let authority = header_str(headers, header::HOST).or(uri_authority);
    if let Some(a) = authority
        && !config.host_allowed(a, local)
    {
        return Err(ApiError::ForeignHost(a.chars().take(100).collect()));
    }
    let mcp = path == "/mcp";
    let allowed = |origin: &str| config.origin_allowed(origin, authority, mcp);
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        // MCP's transport has every request's `Origin` checked, a stream's
        // `GET` too.
        return match header_str(headers, header::ORIGIN) {
            Some(origin) if mcp && !allowed(origin) => Err(ApiError::CrossSite(format!(
                "a request from the origin {} may not use /mcp",
                origin.chars().take(100).collect::<String>()
            ))),
            _ => Ok(()),
        };
    }
    if let Some(origin) = header_str(headers, header::ORIGIN) {
        if !allowed(origin) {
            return Err(ApiError::CrossSite(format!(
                "a request from the origin {} may not change anything here",
                origin.chars().take(100).collect::<String>()
            )));
        }
    } else if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or_default();
        if !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none") {
            return Err(ApiError::CrossSite(format!(
                "a request a browser marks Sec-Fetch-Site: {} may not change anything here",
                site.chars().take(20).collect::<String>()
            )));
        }
    } else if let Some(referer) = header_str(headers, header::REFERER)
        && !referer_origin(referer).is_some_and(|o| allowed(&o))
    {
        return Err(ApiError::CrossSite(
            "a request referred by another site may not change anything here".to_owned(),
        ));
    }
    if path != SLACK_ROUTE
        && let Some(ct) = header_str(headers, header::CONTENT_TYPE)
        && cors_simple(ct)
    {
        return Err(ApiError::FormContentType(
            ct.chars().take(100).collect::<String>(),
        ));
    }
    Ok(())
}

/// The middleware in front of every route: [`check`] with the state's
/// [`SiteConfig`].
pub(crate) async fn guard(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let local = req.extensions().get::<LocalAddr>().map(|l| l.0);
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    match check(
        &state.site,
        req.method(),
        req.uri().path(),
        req.headers(),
        authority.as_deref(),
        local,
    ) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::info!(error = %e, path = %req.uri().path(), "request refused by the site check");
            e.into_response()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn post(
        config: &SiteConfig,
        path: &str,
        pairs: &[(&'static str, &str)],
    ) -> Result<(), ApiError> {
        check(config, &Method::POST, path, &headers(pairs), None, None)
    }

    #[test]
    fn hosts_are_the_servers_own_or_refused() {
        let c = SiteConfig::new()
            .with_hosts(["trawl.example.com", "proxy:8443"])
            .unwrap();
        let local: SocketAddr = "10.0.0.5:8080".parse().unwrap();
        for ok in [
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:9",
            "LOCALHOST",
            "trawl.example.com",
            "trawl.example.com:443",
            "proxy:8443",
            "10.0.0.5:8080",
            "10.0.0.5",
        ] {
            assert!(c.host_allowed(ok, Some(local)), "{ok}");
        }
        for bad in [
            "evil.example",
            "localhost.evil.example:8080",
            "localhost:8080.evil.example",
            "proxy:8444",
            "proxy",
            "10.0.0.6:8080",
            "10.0.0.5:8081",
            "user@localhost",
            "",
            "[::1",
        ] {
            assert!(!c.host_allowed(bad, Some(local)), "{bad}");
        }
    }

    #[test]
    fn origin_patterns_are_exact() {
        let c = SiteConfig::new()
            .with_origins(["https://app.example.com", "http://dev.example:*"])
            .unwrap();
        assert!(c.origin_allowed("https://app.example.com", None, false));
        assert!(c.origin_allowed("https://app.example.com:443", None, false));
        assert!(!c.origin_allowed("https://app.example.com:8443", None, false));
        assert!(!c.origin_allowed("http://app.example.com", None, false));
        assert!(c.origin_allowed("http://dev.example:3000", None, false));
        assert!(!c.origin_allowed("http://dev.example.evil:3000", None, false));
        // `/mcp` takes loopback on any port, and nothing after the port.
        assert!(c.origin_allowed("http://localhost:6274", None, true));
        assert!(!c.origin_allowed("http://localhost:6274", None, false));
        assert!(!c.origin_allowed("http://localhost:1234.evil.example", None, true));
        assert!(!c.origin_allowed("http://localhost.evil.example", None, true));
        assert!(!c.origin_allowed("null", None, true));
        assert!(!c.origin_allowed("http://localhost:80/path", None, true));
        // The server's own origin, whatever the configuration.
        assert!(SiteConfig::new().origin_allowed(
            "http://127.0.0.1:8080",
            Some("127.0.0.1:8080"),
            false
        ));
        assert!(!SiteConfig::new().origin_allowed(
            "http://127.0.0.1:8081",
            Some("127.0.0.1:8080"),
            false
        ));
        assert!(SiteConfig::new().origin_allowed(
            "https://t.example",
            Some("t.example:443"),
            false
        ));
        assert!(SiteConfig::new().with_origins(["ftp://x"]).is_err());
        assert!(SiteConfig::new().with_origins(["https://x/path"]).is_err());
        assert!(SiteConfig::new().with_hosts(["a b"]).is_err());
    }

    #[test]
    fn state_changes_from_other_sites_are_refused() {
        let c = SiteConfig::new();
        let host = ("host", "127.0.0.1:8080");
        // A cross-site form post, a text/plain fetch, a rebinding host.
        assert!(matches!(
            post(
                &c,
                "/v1/approvals/1/approve",
                &[
                    host,
                    ("origin", "https://evil.example"),
                    ("content-type", "application/x-www-form-urlencoded")
                ]
            ),
            Err(ApiError::CrossSite(_))
        ));
        assert!(matches!(
            post(
                &c,
                "/v1/jobs/x/cancel",
                &[host, ("content-type", "text/plain")]
            ),
            Err(ApiError::FormContentType(_))
        ));
        assert!(matches!(
            post(&c, "/v1/jobs", &[("host", "rebound.evil.example:8080")]),
            Err(ApiError::ForeignHost(_))
        ));
        assert!(matches!(
            check(
                &c,
                &Method::GET,
                "/v1/jobs/x",
                &headers(&[("host", "rebound.evil.example:8080")]),
                None,
                None
            ),
            Err(ApiError::ForeignHost(_))
        ));
        assert!(matches!(
            post(&c, "/v1/jobs", &[host, ("sec-fetch-site", "cross-site")]),
            Err(ApiError::CrossSite(_))
        ));
        assert!(matches!(
            post(&c, "/v1/jobs", &[host, ("sec-fetch-site", "same-site")]),
            Err(ApiError::CrossSite(_))
        ));
        assert!(matches!(
            post(
                &c,
                "/v1/jobs",
                &[host, ("referer", "https://evil.example/page")]
            ),
            Err(ApiError::CrossSite(_))
        ));
        // Same origin, a non-browser client, Slack's signed forms: accepted.
        post(
            &c,
            "/v1/jobs",
            &[
                host,
                ("origin", "http://127.0.0.1:8080"),
                ("content-type", "application/json"),
            ],
        )
        .unwrap();
        post(&c, "/v1/jobs", &[host, ("sec-fetch-site", "same-origin")]).unwrap();
        post(
            &c,
            "/v1/jobs",
            &[host, ("referer", "http://127.0.0.1:8080/console")],
        )
        .unwrap();
        post(
            &c,
            "/v1/jobs",
            &[host, ("content-type", "application/yaml")],
        )
        .unwrap();
        post(&c, "/v1/jobs", &[]).unwrap();
        post(
            &c,
            SLACK_ROUTE,
            &[host, ("content-type", "application/x-www-form-urlencoded")],
        )
        .unwrap();
        // Reads from another site are not refused by the origin rule (the
        // browser keeps their answers from the page without CORS headers).
        check(
            &c,
            &Method::GET,
            "/v1/jobs/x",
            &headers(&[host, ("origin", "https://evil.example")]),
            None,
            None,
        )
        .unwrap();
    }
}
