//! The egress proxy a local Chromium reaches the network through.
//!
//! Bound on `127.0.0.1:0`, one per session. It serves HTTP `CONNECT` (https and
//! wss tunnels) and absolute-form HTTP requests (plain http). For every request
//! it resolves the host **once** with its [`Resolve`], checks **every** address
//! with the [`EgressPolicy`], and connects with its [`Dial`] to the exact address
//! it checked: there is no second lookup, so a name that answers a public address
//! first and a private one next (DNS rebinding) cannot swap it.
//!
//! A plain HTTP request gets an upstream connection of its own, used for that one
//! request, so keep-alive between Chromium and the proxy never sends a request for
//! host B down a connection opened to host A.
//!
//! A refusal is answered `403` with the header [`REFUSED_HEADER`] (its reason
//! code) and recorded in the proxy's [`EgressLog`], which the worker reads after
//! each step. Failures that are not refusals (no such name, nothing listening)
//! are answered `502` and not logged.
//!
//! Every upstream connection is a [`Metered`] stream of the proxy's
//! [`Traffic`]: bytes both ways are counted as they are relayed, finished
//! responses or not, and none pass the session's allowance. When the traffic
//! stops (its byte limit, or a budget that pays for no more) every connection
//! through the proxy is cut at once and it takes no new ones.
//!
//! A per-geo upstream proxy chains behind this one as a [`Dial`]
//! ([`UpstreamProxy`]) that opens a tunnel through it to the checked address;
//! the policy stays here, in front.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use trawl_core::egress::{EgressPolicy, Refused};

use crate::traffic::{Metered, Traffic};

/// The header of a refusal's 403: the reason code (`loopback`, `metadata`, …).
pub const REFUSED_HEADER: &str = "x-trawl-egress-refused";
/// Refusals a log keeps; later ones are counted, not kept.
pub const MAX_LOGGED: usize = 512;
/// Connections from the browser served at the same time.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a name may take to resolve.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to one address may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Addresses of one name tried, in the resolver's order.
pub const MAX_ADDRESSES_TRIED: usize = 4;
/// How long a browser may take to send a request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an upstream may take to answer a plain request's head.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

/// A boxed, sendable future (the traits' methods).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
type Body = BoxBody<Bytes, hyper::Error>;

/// Turns a host name into addresses. The system's resolver in production; tests
/// give names the addresses they want.
pub trait Resolve: Send + Sync + 'static {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>>;
}

/// Opens a TCP connection to an address the policy allowed. Tests record the
/// address and connect to a loopback fixture instead; a chained upstream proxy
/// would be a dialer too.
pub trait Dial: Send + Sync + 'static {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// The operating system's resolver (`getaddrinfo`, through tokio).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// A direct TCP connection.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpDialer;

impl Dial for TcpDialer {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(TcpStream::connect(addr))
    }
}

/// An upstream HTTP proxy reached with `CONNECT` (RFC 9110, section 9.3.6) and
/// basic credentials (RFC 7617): a geo proxy such as Bright Data's residential
/// or datacenter proxy, whose user name names the country. The egress proxy
/// dials through it to the address its policy checked, so the policy holds
/// whatever the upstream resolves.
#[derive(Clone)]
pub struct UpstreamProxy {
    /// `host:port` of the proxy.
    pub addr: String,
    pub username: String,
    pub password: String,
}

impl fmt::Debug for UpstreamProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamProxy")
            .field("addr", &self.addr)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Bytes of a proxy's answer to `CONNECT` read at most.
const MAX_CONNECT_HEAD: usize = 8 * 1024;

impl Dial for UpstreamProxy {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(async move {
            use base64::Engine as _;
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut stream = TcpStream::connect(&self.addr).await?;
            let credentials = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", self.username, self.password));
            let head = format!(
                "CONNECT {addr} HTTP/1.1\r\nHost: {addr}\r\nProxy-Authorization: Basic {credentials}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            // The tunnel's first bytes are the browser's (TLS or a request), so
            // the proxy sends nothing after its head: read up to its end only.
            let mut answer = Vec::with_capacity(256);
            let mut byte = [0u8; 1];
            while !answer.ends_with(b"\r\n\r\n") {
                if answer.len() >= MAX_CONNECT_HEAD {
                    return Err(io::Error::other("the upstream proxy's answer has no end"));
                }
                if stream.read(&mut byte).await? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upstream proxy closed the connection",
                    ));
                }
                answer.push(byte[0]);
            }
            let status_line = String::from_utf8_lossy(&answer);
            let status_line = status_line.lines().next().unwrap_or_default();
            let code = status_line.split_whitespace().nth(1).unwrap_or_default();
            if code.len() == 3 && code.starts_with('2') {
                Ok(stream)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("the upstream proxy {} answered {status_line}", self.addr),
                ))
            }
        })
    }
}

/// What a session's egress proxy enforces and how it reaches the network.
#[derive(Clone)]
pub struct Egress {
    pub policy: Arc<EgressPolicy>,
    resolver: Arc<dyn Resolve>,
    dialer: Arc<dyn Dial>,
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Egress")
            .field("allow", &self.policy.describe())
            .finish_non_exhaustive()
    }
}

impl Default for Egress {
    /// The closed policy, the system's resolver, direct connections.
    fn default() -> Egress {
        Egress::new(EgressPolicy::closed())
    }
}

impl Egress {
    pub fn new(policy: EgressPolicy) -> Egress {
        Egress {
            policy: Arc::new(policy),
            resolver: Arc::new(SystemResolver),
            dialer: Arc::new(TcpDialer),
        }
    }

    pub fn with_policy(mut self, policy: EgressPolicy) -> Egress {
        self.policy = Arc::new(policy);
        self
    }

    pub fn with_resolver(mut self, resolver: Arc<dyn Resolve>) -> Egress {
        self.resolver = resolver;
        self
    }

    pub fn with_dialer(mut self, dialer: Arc<dyn Dial>) -> Egress {
        self.dialer = dialer;
        self
    }
}

/// One refused request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressRefusal {
    /// `CONNECT` (a tunnel: https, wss) or the plain request's method.
    pub method: String,
    /// The URL of a plain request; `host:port` of a tunnel.
    pub target: String,
    /// The host as the proxy parsed it (an address in its canonical form).
    pub host: String,
    pub port: u16,
    /// The reason code (`loopback`, `private`, `metadata`, …).
    pub reason: &'static str,
    /// The destination and why, for people.
    pub message: String,
}

/// The refusals of one proxy, in order, bounded by [`MAX_LOGGED`].
#[derive(Debug, Default)]
pub struct EgressLog {
    inner: Mutex<(Vec<EgressRefusal>, u64)>,
}

impl EgressLog {
    fn push(&self, r: EgressRefusal) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.len() < MAX_LOGGED {
            g.0.push(r);
        } else {
            g.1 += 1;
        }
    }

    /// The refusals kept from the `from`-th on.
    pub fn since(&self, from: usize) -> Vec<EgressRefusal> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }

    /// Refusals kept so far.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refusals beyond [`MAX_LOGGED`], counted only.
    pub fn dropped(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}

/// A running egress proxy. Dropping it stops it and every tunnel through it.
pub struct EgressProxy {
    addr: SocketAddr,
    log: Arc<EgressLog>,
    traffic: Arc<Traffic>,
    accept: JoinHandle<()>,
    _stop: watch::Sender<()>,
}

impl fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressProxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

struct Shared {
    egress: Egress,
    log: Arc<EgressLog>,
    traffic: Arc<Traffic>,
    stop: watch::Receiver<()>,
}

impl EgressProxy {
    /// Binds `127.0.0.1:0` and serves until dropped, counting its traffic
    /// without a limit.
    pub async fn start(egress: Egress) -> io::Result<EgressProxy> {
        EgressProxy::start_metered(egress, Traffic::unlimited()).await
    }

    /// Binds `127.0.0.1:0` and serves until dropped or `traffic` stops; every
    /// upstream byte both ways is counted into `traffic`.
    pub async fn start_metered(egress: Egress, traffic: Arc<Traffic>) -> io::Result<EgressProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let log = Arc::new(EgressLog::default());
        let (stop_tx, stop) = watch::channel(());
        let shared = Arc::new(Shared {
            egress,
            log: log.clone(),
            traffic: traffic.clone(),
            stop,
        });
        let accept = tokio::spawn(accept_loop(listener, shared));
        Ok(EgressProxy {
            addr,
            log,
            traffic,
            accept,
            _stop: stop_tx,
        })
    }

    /// Where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The value of Chromium's `--proxy-server`.
    pub fn proxy_server(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> &Arc<EgressLog> {
        &self.log
    }

    /// What it relayed (and may still relay).
    pub fn traffic(&self) -> &Arc<Traffic> {
        &self.traffic
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        // Stopped traffic: no new connections (the listener closes with the loop).
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shared.traffic.stopped() => return,
        };
        let (stream, _) = match accepted {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "egress proxy accept");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        let mut stop = shared.stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = {
                let shared = shared.clone();
                service_fn(move |req| handle(shared.clone(), req))
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(error = %e, "egress proxy connection");
                },
                _ = stop.changed() => {}
                _ = shared.traffic.stopped() => {}
            }
        });
    }
}

fn text(status: StatusCode, msg: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(msg.into()).map_err(|n| match n {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Why the proxy did not connect.
enum Failure {
    Refused(Refused),
    Unreachable(String),
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    if req.method() == Method::CONNECT {
        return Ok(tunnel(shared, req).await);
    }
    Ok(forward(shared, req).await)
}

/// The host and port of `authority` (`host:port`, `[v6]:port`) as a browser
/// parses them: odd IPv4 forms become addresses.
fn parse_authority(authority: &str, default_port: u16) -> Option<(url::Host<String>, u16)> {
    let u = url::Url::parse(&format!("http://{authority}/")).ok()?;
    let host = u.host()?.to_owned();
    Some((host, u.port().unwrap_or(default_port)))
}

fn host_string(host: &url::Host<String>) -> String {
    match host {
        url::Host::Domain(d) => d.clone(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => ip.to_string(),
    }
}

impl Shared {
    /// Resolves once, checks every address, dials a checked one.
    async fn connect(&self, host: &url::Host<String>, port: u16) -> Result<TcpStream, Failure> {
        let policy = &self.egress.policy;
        let (name, addrs) = match host {
            url::Host::Ipv4(ip) => (None, vec![SocketAddr::new(IpAddr::V4(*ip), port)]),
            url::Host::Ipv6(ip) => (None, vec![SocketAddr::new(IpAddr::V6(*ip), port)]),
            url::Host::Domain(d) => {
                policy.check_name(d).map_err(Failure::Refused)?;
                let resolved =
                    tokio::time::timeout(RESOLVE_TIMEOUT, self.egress.resolver.resolve(d, port))
                        .await
                        .map_err(|_| {
                            Failure::Unreachable(format!(
                                "resolving {d} took over {RESOLVE_TIMEOUT:?}"
                            ))
                        })?
                        .map_err(|e| Failure::Unreachable(format!("resolving {d}: {e}")))?;
                (Some(d.as_str()), resolved)
            }
        };
        if addrs.is_empty() {
            return Err(Failure::Unreachable(format!(
                "{} has no address",
                host_string(host)
            )));
        }
        // Every address first: one refused address refuses the name.
        for a in &addrs {
            policy.check_addr(name, a.ip()).map_err(Failure::Refused)?;
        }
        let mut last = String::new();
        for a in addrs.iter().take(MAX_ADDRESSES_TRIED) {
            match tokio::time::timeout(DIAL_TIMEOUT, self.egress.dialer.dial(*a)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = format!("connecting to {a}: {e}"),
                Err(_) => last = format!("connecting to {a} took over {DIAL_TIMEOUT:?}"),
            }
        }
        Err(Failure::Unreachable(last))
    }

    fn refuse(
        &self,
        method: &Method,
        target: String,
        host: &url::Host<String>,
        port: u16,
        r: Refused,
    ) -> Response<Body> {
        let message = r.to_string();
        tracing::info!(%target, reason = r.reason.code(), "browser egress refused");
        self.log.push(EgressRefusal {
            method: method.to_string(),
            target,
            host: host_string(host),
            port,
            reason: r.reason.code(),
            message: message.clone(),
        });
        let mut resp = text(
            StatusCode::FORBIDDEN,
            format!("trawl egress proxy: refused: {message}\n"),
        );
        resp.headers_mut()
            .insert(REFUSED_HEADER, HeaderValue::from_static(r.reason.code()));
        resp
    }
}

async fn tunnel(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let Some(authority) = req.uri().authority().map(|a| a.as_str().to_owned()) else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port\n");
    };
    let Some((host, port)) = parse_authority(&authority, 443) else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port\n");
    };
    let mut upstream = match shared.connect(&host, port).await {
        Ok(s) => Metered::new(s, shared.traffic.clone()),
        Err(Failure::Refused(r)) => return shared.refuse(req.method(), authority, &host, port, r),
        Err(Failure::Unreachable(m)) => return text(StatusCode::BAD_GATEWAY, format!("{m}\n")),
    };
    let mut stop = shared.stop.clone();
    tokio::spawn(async move {
        let piped = async {
            let upgraded = hyper::upgrade::on(req).await?;
            let mut client = TokioIo::new(upgraded);
            tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        };
        tokio::select! {
            r = piped => if let Err(e) = r {
                tracing::debug!(error = %e, "egress tunnel");
            },
            _ = stop.changed() => {}
            _ = shared.traffic.stopped() => {}
        }
    });
    Response::new(http_body_util::Empty::new().map_err(|n| match n {}).boxed())
}

/// Headers that belong to one hop (RFC 9110 §7.6.1) and the proxy's own.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

async fn forward(shared: Arc<Shared>, mut req: Request<Incoming>) -> Response<Body> {
    let target = req.uri().to_string();
    let url = match url::Url::parse(&target) {
        Ok(u) if u.scheme() == "http" => u,
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                "only absolute http:// requests and CONNECT are proxied\n",
            );
        }
    };
    let Some(host) = url.host().map(|h| h.to_owned()) else {
        return text(StatusCode::BAD_REQUEST, "the URL has no host\n");
    };
    let port = url.port_or_known_default().unwrap_or(80);
    let stream = match shared.connect(&host, port).await {
        Ok(s) => s,
        Err(Failure::Refused(r)) => return shared.refuse(req.method(), target, &host, port, r),
        Err(Failure::Unreachable(m)) => return text(StatusCode::BAD_GATEWAY, format!("{m}\n")),
    };
    // Origin form, hop headers gone, and this connection for this request only.
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    match path.parse() {
        Ok(p) => *req.uri_mut() = p,
        Err(_) => return text(StatusCode::BAD_REQUEST, "bad request target\n"),
    }
    if let Some(c) = req.headers().get(header::CONNECTION).cloned()
        && let Ok(c) = c.to_str()
    {
        for name in c.split(',') {
            req.headers_mut().remove(name.trim());
        }
    }
    for h in HOP_HEADERS {
        req.headers_mut().remove(*h);
    }
    req.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    let stream = Metered::new(stream, shared.traffic.clone());
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(c) => c,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("{e}\n")),
    };
    let mut stop = shared.stop.clone();
    let traffic = shared.traffic.clone();
    tokio::spawn(async move {
        tokio::select! {
            r = conn => if let Err(e) = r {
                tracing::debug!(error = %e, "egress upstream connection");
            },
            _ = stop.changed() => {}
            _ = traffic.stopped() => {}
        }
    });
    match tokio::time::timeout(RESPONSE_TIMEOUT, sender.send_request(req)).await {
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            for h in HOP_HEADERS {
                parts.headers.remove(*h);
            }
            Response::from_parts(parts, body.boxed())
        }
        Ok(Err(e)) => text(StatusCode::BAD_GATEWAY, format!("{e}\n")),
        Err(_) => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("no answer within {RESPONSE_TIMEOUT:?}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    use super::*;
    use crate::traffic::Traffic;

    /// A loopback proxy that answers every `CONNECT` with `status` and then
    /// echoes the tunnel; it keeps the heads it was sent.
    async fn upstream(status: &'static str) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut r = BufReader::new(s);
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).await.unwrap() == 0 || line == "\r\n" {
                            break;
                        }
                        head.push_str(&line);
                    }
                    seen.lock().unwrap().push(head);
                    let mut s = r.into_inner();
                    s.write_all(format!("HTTP/1.1 {status}\r\n\r\n").as_bytes())
                        .await
                        .unwrap();
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, heads)
    }

    #[tokio::test]
    async fn an_upstream_proxy_tunnels_to_the_checked_address_with_its_credentials() {
        let (addr, heads) = upstream("200 Connection established").await;
        let proxy = UpstreamProxy {
            addr: addr.to_string(),
            username: "brd-customer-c1-zone-res-country-de".into(),
            password: "pw".into(),
        };
        let target: SocketAddr = "203.0.113.7:443".parse().unwrap();
        let mut tunnel = proxy.dial(target).await.unwrap();
        tunnel.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        tunnel.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");
        let head = heads.lock().unwrap()[0].clone();
        assert!(
            head.starts_with("CONNECT 203.0.113.7:443 HTTP/1.1\r\n"),
            "{head}"
        );
        // base64("brd-customer-c1-zone-res-country-de:pw")
        assert!(
            head.contains("Proxy-Authorization: Basic YnJkLWN1c3RvbWVyLWMxLXpvbmUtcmVzLWNvdW50cnktZGU6cHc=\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn an_upstream_proxys_refusal_is_an_error_naming_its_answer() {
        let (addr, _) = upstream("407 Proxy Authentication Required").await;
        let proxy = UpstreamProxy {
            addr: addr.to_string(),
            username: "u".into(),
            password: "wrong".into(),
        };
        let e = proxy
            .dial("203.0.113.7:443".parse().unwrap())
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("407 Proxy Authentication Required"),
            "{e}"
        );
    }

    /// Names to addresses; a name with two answers gives the first on the first
    /// lookup and the second on every later one (a rebinding name).
    #[derive(Default)]
    struct TestResolver {
        names: HashMap<String, Vec<IpAddr>>,
        lookups: AtomicUsize,
    }

    impl TestResolver {
        fn with(mut self, name: &str, ips: &[&str]) -> Self {
            self.names.insert(
                name.to_owned(),
                ips.iter().map(|i| i.parse().unwrap()).collect(),
            );
            self
        }
    }

    impl Resolve for TestResolver {
        fn resolve<'a>(
            &'a self,
            host: &'a str,
            port: u16,
        ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
            let n = self.lookups.fetch_add(1, Ordering::SeqCst);
            let ips = self.names.get(host).cloned().unwrap_or_default();
            Box::pin(async move {
                let ip = match ips.len() {
                    0 => return Err(io::Error::other("no such name")),
                    1 => ips[0],
                    _ => ips[n.min(ips.len() - 1)],
                };
                Ok(vec![SocketAddr::new(ip, port)])
            })
        }
    }

    /// Records every address asked for and connects to a loopback fixture
    /// instead, so nothing leaves loopback.
    struct TestDialer {
        fixture: SocketAddr,
        asked: Mutex<Vec<SocketAddr>>,
    }

    impl Dial for TestDialer {
        fn dial(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
            self.asked.lock().unwrap().push(addr);
            Box::pin(TcpStream::connect(self.fixture))
        }
    }

    /// An HTTP/1.1 server that answers every request with its name, the Host
    /// header and the path it got, keeping connections alive.
    async fn fixture(name: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| async move {
                        let host = req
                            .headers()
                            .get(header::HOST)
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let body = format!("{name} host={host} path={}", req.uri());
                        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(body))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        addr
    }

    /// Reads one response (head and a content-length body).
    async fn read_response(r: &mut BufReader<TcpStream>) -> (u16, HashMap<String, String>, String) {
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).await.unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.insert(k.to_ascii_lowercase(), v.trim().to_owned());
        }
        let len: usize = headers
            .get("content-length")
            .map_or(0, |l| l.parse().unwrap());
        let mut body = vec![0; len];
        r.read_exact(&mut body).await.unwrap();
        (status, headers, String::from_utf8(body).unwrap())
    }

    async fn client(proxy: &EgressProxy) -> BufReader<TcpStream> {
        BufReader::new(TcpStream::connect(proxy.addr()).await.unwrap())
    }

    async fn send(c: &mut BufReader<TcpStream>, head: &str) {
        c.get_mut().write_all(head.as_bytes()).await.unwrap();
    }

    #[tokio::test]
    async fn connect_to_refused_addresses_gets_403_and_is_logged() {
        let dialer = Arc::new(TestDialer {
            fixture: fixture("never").await,
            asked: Mutex::new(Vec::new()),
        });
        let resolver = Arc::new(TestResolver::default().with("inside.test", &["10.1.2.3"]));
        let proxy = EgressProxy::start(
            Egress::default()
                .with_resolver(resolver)
                .with_dialer(dialer.clone()),
        )
        .await
        .unwrap();
        let cases = [
            ("127.0.0.1:443", "loopback"),
            ("169.254.169.254:443", "metadata"),
            ("10.0.0.1:443", "private"),
            ("[::1]:4222", "loopback"),
            ("0x7f000001:443", "loopback"),
            ("2130706433:443", "loopback"),
            ("127.1:443", "loopback"),
            ("0177.0.0.1:443", "loopback"),
            ("metadata.google.internal:443", "metadata"),
            ("inside.test:443", "private"),
            ("[::ffff:127.0.0.1]:443", "loopback"),
        ];
        for (target, reason) in cases {
            let mut c = client(&proxy).await;
            send(
                &mut c,
                &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
            )
            .await;
            let (status, headers, body) = read_response(&mut c).await;
            assert_eq!(status, 403, "{target}: {body}");
            assert_eq!(
                headers.get(REFUSED_HEADER).map(String::as_str),
                Some(reason),
                "{target}"
            );
        }
        let log = proxy.log().since(0);
        assert_eq!(log.len(), cases.len());
        assert_eq!(log[0].method, "CONNECT");
        assert_eq!(log[0].target, "127.0.0.1:443");
        assert_eq!(log[4].host, "127.0.0.1", "0x7f000001 is 127.0.0.1");
        assert!(
            log[9].message.contains("inside.test (10.1.2.3)"),
            "{}",
            log[9].message
        );
        // The same forms as plain absolute-form requests, on one keep-alive
        // connection.
        let mut c = client(&proxy).await;
        for (target, reason) in cases {
            let host = target.trim_end_matches(":443").trim_end_matches(":4222");
            send(
                &mut c,
                &format!("GET http://{target}/latest/meta-data/ HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            )
            .await;
            let (status, headers, body) = read_response(&mut c).await;
            assert_eq!(status, 403, "{target}: {body}");
            assert_eq!(
                headers.get(REFUSED_HEADER).map(String::as_str),
                Some(reason),
                "{target}"
            );
        }
        assert_eq!(proxy.log().len(), 2 * cases.len());
        assert!(
            dialer.asked.lock().unwrap().is_empty(),
            "nothing refused was dialed"
        );
    }

    #[tokio::test]
    async fn plain_requests_to_allowed_hosts_are_forwarded_and_refused_ones_are_not() {
        let site = fixture("site").await;
        let policy = EgressPolicy::parse("shop.test").unwrap();
        let resolver = Arc::new(
            TestResolver::default()
                .with("shop.test", &[&site.ip().to_string()])
                .with("evil.test", &["127.0.0.1"]),
        );
        let proxy = EgressProxy::start(Egress::new(policy).with_resolver(resolver))
            .await
            .unwrap();
        let mut c = client(&proxy).await;
        let port = site.port();
        send(
            &mut c,
            &format!("GET http://shop.test:{port}/a?b=1 HTTP/1.1\r\nHost: shop.test:{port}\r\nProxy-Connection: keep-alive\r\n\r\n"),
        )
        .await;
        let (status, _, body) = read_response(&mut c).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, format!("site host=shop.test:{port} path=/a?b=1"));
        // The same browser connection, a refused host: 403, not forwarded.
        send(
            &mut c,
            &format!(
                "GET http://evil.test:{port}/secret HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"
            ),
        )
        .await;
        let (status, headers, body) = read_response(&mut c).await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(
            headers.get(REFUSED_HEADER).map(String::as_str),
            Some("loopback")
        );
        assert!(!body.contains("site"), "{body}");
        let log = proxy.log().since(0);
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].target, format!("http://evil.test:{port}/secret"));
        assert_eq!(log[0].method, "GET");
    }

    #[tokio::test]
    async fn keep_alive_to_two_hosts_does_not_mix_them() {
        let a = fixture("a").await;
        let b = fixture("b").await;
        let resolver = Arc::new(
            TestResolver::default()
                .with("a.test", &[&a.ip().to_string()])
                .with("b.test", &[&b.ip().to_string()]),
        );
        let proxy = EgressProxy::start(
            Egress::new(EgressPolicy::parse("a.test,b.test").unwrap()).with_resolver(resolver),
        )
        .await
        .unwrap();
        let mut c = client(&proxy).await;
        for (host, port, want) in [
            ("a.test", a.port(), "a"),
            ("b.test", b.port(), "b"),
            ("a.test", a.port(), "a"),
        ] {
            send(
                &mut c,
                &format!("GET http://{host}:{port}/x HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"),
            )
            .await;
            let (status, _, body) = read_response(&mut c).await;
            assert_eq!(status, 200);
            assert!(body.starts_with(&format!("{want} host={host}")), "{body}");
        }
    }

    #[tokio::test]
    async fn a_rebinding_name_is_connected_to_the_address_that_was_checked() {
        let site = fixture("public").await;
        // Public first, loopback on every later lookup.
        let resolver =
            Arc::new(TestResolver::default().with("rebind.test", &["93.184.215.14", "127.0.0.1"]));
        let dialer = Arc::new(TestDialer {
            fixture: site,
            asked: Mutex::new(Vec::new()),
        });
        let proxy = EgressProxy::start(
            Egress::default()
                .with_resolver(resolver.clone())
                .with_dialer(dialer.clone()),
        )
        .await
        .unwrap();
        let mut c = client(&proxy).await;
        send(
            &mut c,
            "GET http://rebind.test/ HTTP/1.1\r\nHost: rebind.test\r\n\r\n",
        )
        .await;
        let (status, _, body) = read_response(&mut c).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(resolver.lookups.load(Ordering::SeqCst), 1, "resolved once");
        assert_eq!(
            *dialer.asked.lock().unwrap(),
            vec!["93.184.215.14:80".parse::<SocketAddr>().unwrap()]
        );
        // The next request resolves again, gets loopback, and is refused.
        send(
            &mut c,
            "GET http://rebind.test/ HTTP/1.1\r\nHost: rebind.test\r\n\r\n",
        )
        .await;
        let (status, _, _) = read_response(&mut c).await;
        assert_eq!(status, 403);
        assert_eq!(
            dialer.asked.lock().unwrap().len(),
            1,
            "loopback never dialed"
        );
    }

    #[tokio::test]
    async fn a_tunnel_to_an_allowed_address_carries_bytes_both_ways() {
        let site = fixture("tunneled").await;
        let proxy = EgressProxy::start(Egress::new(EgressPolicy::parse("loopback").unwrap()))
            .await
            .unwrap();
        let mut c = client(&proxy).await;
        send(
            &mut c,
            &format!("CONNECT {site} HTTP/1.1\r\nHost: {site}\r\n\r\n"),
        )
        .await;
        let (status, _, _) = read_response(&mut c).await;
        assert_eq!(status, 200);
        send(&mut c, &format!("GET /t HTTP/1.1\r\nHost: {site}\r\n\r\n")).await;
        let (status, _, body) = read_response(&mut c).await;
        assert_eq!(status, 200);
        assert_eq!(body, format!("tunneled host={site} path=/t"));
        assert!(proxy.log().is_empty());
    }

    /// A raw HTTP server whose every response streams forever (chunked, never
    /// ending); it keeps how many bytes of requests it read on each connection.
    async fn endless() -> (SocketAddr, Arc<Mutex<Vec<usize>>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut b = [0u8; 1024];
                    while !head.ends_with(b"\r\n\r\n") {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&b[..n]),
                        }
                    }
                    seen.lock().unwrap().push(head.len());
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                        .await;
                    let chunk = format!("1000\r\n{}\r\n", "x".repeat(4096));
                    while s.write_all(chunk.as_bytes()).await.is_ok() {}
                });
            }
        });
        (addr, heads)
    }

    /// Reads until the connection ends (the proxy cut it); bytes read.
    async fn read_to_cut(c: &mut BufReader<TcpStream>) -> usize {
        let mut got = 0;
        let mut buf = vec![0u8; 16 * 1024];
        let read = async {
            loop {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("the proxy cut the connection");
        got
    }

    #[tokio::test]
    async fn a_response_that_never_ends_is_counted_as_it_streams_and_cut_at_the_limit() {
        let (site, heads) = endless().await;
        let traffic = Traffic::new(300_000, 300_000);
        let proxy = EgressProxy::start_metered(
            Egress::new(EgressPolicy::parse("loopback").unwrap()),
            traffic.clone(),
        )
        .await
        .unwrap();
        let mut c = client(&proxy).await;
        send(
            &mut c,
            &format!("GET http://{site}/big HTTP/1.1\r\nHost: {site}\r\n\r\n"),
        )
        .await;
        let got = read_to_cut(&mut c).await;
        assert_eq!(
            traffic.stop(),
            Some(crate::traffic::Stop::Bytes {
                limit: 300_000,
                seen: 300_000
            })
        );
        // Both ways: the request as the upstream read it, and the response up
        // to the limit.
        let read_by_site: usize = heads.lock().unwrap().iter().sum();
        assert!(read_by_site > 0);
        assert_eq!(traffic.sent(), read_by_site as u64);
        assert_eq!(traffic.received(), 300_000 - read_by_site as u64);
        // What the browser got is what was received, re-framed by the proxy.
        assert!(got > 200_000 && got < 300_000 + 4096, "{got}");
        // Stopped: no new connection is served.
        let refused = async {
            let mut c = TcpStream::connect(proxy.addr()).await?;
            c.write_all(format!("GET http://{site}/ HTTP/1.1\r\nHost: {site}\r\n\r\n").as_bytes())
                .await?;
            let mut b = [0u8; 64];
            c.read(&mut b).await
        };
        assert!(matches!(refused.await, Ok(0) | Err(_)));
    }

    #[tokio::test]
    async fn a_tunnel_is_counted_both_ways_and_cut_when_the_budget_says_no() {
        let (site, heads) = endless().await;
        let traffic = Traffic::new(u64::MAX, 100_000);
        let proxy = EgressProxy::start_metered(
            Egress::new(EgressPolicy::parse("loopback").unwrap()),
            traffic.clone(),
        )
        .await
        .unwrap();
        let granting = {
            let t = traffic.clone();
            tokio::spawn(async move {
                t.wants_more().await;
                t.allow(150_000);
                t.wants_more().await;
                t.deny();
            })
        };
        let mut c = client(&proxy).await;
        send(
            &mut c,
            &format!("CONNECT {site} HTTP/1.1\r\nHost: {site}\r\n\r\n"),
        )
        .await;
        let (status, _, _) = read_response(&mut c).await;
        assert_eq!(status, 200);
        let request = format!("GET /t HTTP/1.1\r\nHost: {site}\r\n\r\n");
        send(&mut c, &request).await;
        let got = read_to_cut(&mut c).await;
        granting.await.unwrap();
        assert_eq!(
            traffic.stop(),
            Some(crate::traffic::Stop::Budget { seen: 250_000 })
        );
        assert_eq!(traffic.sent(), request.len() as u64);
        assert_eq!(heads.lock().unwrap().as_slice(), &[request.len()]);
        // A tunnel relays bytes as they are: the browser got every byte received.
        assert_eq!(got as u64, traffic.received());
    }

    #[tokio::test]
    async fn the_log_is_bounded() {
        let log = EgressLog::default();
        for i in 0..MAX_LOGGED + 3 {
            log.push(EgressRefusal {
                method: "GET".into(),
                target: i.to_string(),
                host: "h".into(),
                port: 80,
                reason: "loopback",
                message: String::new(),
            });
        }
        assert_eq!(log.len(), MAX_LOGGED);
        assert_eq!(log.dropped(), 3);
        assert_eq!(log.since(MAX_LOGGED - 1).len(), 1);
        assert!(log.since(MAX_LOGGED + 10).is_empty());
    }
}
