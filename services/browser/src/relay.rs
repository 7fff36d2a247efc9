//! A loopback WebSocket relay for CDP endpoints that want HTTP basic credentials.
//!
//! Bright Data's Scraping Browser takes its zone and password as the userinfo of
//! its `wss://` URL, which browser libraries send as an `Authorization: Basic`
//! header. The WebSocket client under chromiumoxide does not, so a session to such
//! a URL connects to a relay on 127.0.0.1 instead, which opens the upstream
//! connection with the header and copies messages both ways. A URL without
//! credentials is used as it is.

use async_tungstenite::tungstenite::client::IntoClientRequest;
use async_tungstenite::tungstenite::http::HeaderValue;
use base64::Engine as _;
use futures_util::StreamExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A running relay; it stops when dropped.
pub struct Relay {
    task: JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    /// The URL to connect to for `url`, and the relay serving it when `url` has
    /// credentials.
    pub async fn for_url(url: &str) -> Result<(String, Option<Relay>), String> {
        let mut parsed = url::Url::parse(url).map_err(|e| format!("browser URL: {e}"))?;
        if !matches!(parsed.scheme(), "ws" | "wss") {
            return Err(format!(
                "browser URL must be ws:// or wss://, not {}://",
                parsed.scheme()
            ));
        }
        if parsed.username().is_empty() {
            return Ok((url.to_owned(), None));
        }
        let user = percent_decode(parsed.username());
        let password = percent_decode(parsed.password().unwrap_or_default());
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        let upstream = parsed.to_string();
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("relay: {e}"))?;
        let local = listener.local_addr().map_err(|e| format!("relay: {e}"))?;
        let path = match parsed.query() {
            Some(q) => format!("{}?{q}", parsed.path()),
            None => parsed.path().to_owned(),
        };
        let task = tokio::spawn(async move {
            // One session, one connection: the relay serves the first one.
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            if let Err(e) = relay(tcp, &upstream, &auth).await {
                tracing::warn!(error = %e, "browser relay ended");
            }
        });
        Ok((format!("ws://{local}{path}"), Some(Relay { task })))
    }
}

async fn relay(tcp: tokio::net::TcpStream, upstream: &str, auth: &str) -> Result<(), String> {
    let mut request = upstream
        .into_client_request()
        .map_err(|e| format!("upstream request: {e}"))?;
    request.headers_mut().insert(
        "authorization",
        HeaderValue::from_str(auth).map_err(|e| e.to_string())?,
    );
    let (up, _) = async_tungstenite::tokio::connect_async(request)
        .await
        .map_err(|e| format!("connecting to {}: {e}", redact(upstream)))?;
    let down = async_tungstenite::tokio::accept_async(tcp)
        .await
        .map_err(|e| format!("accepting: {e}"))?;
    let (mut up_tx, mut up_rx) = up.split();
    let (mut down_tx, mut down_rx) = down.split();
    let to_up = async {
        while let Some(Ok(m)) = down_rx.next().await {
            if up_tx.send(m).await.is_err() {
                break;
            }
        }
        let _ = up_tx.close(None).await;
    };
    let to_down = async {
        while let Some(Ok(m)) = up_rx.next().await {
            if down_tx.send(m).await.is_err() {
                break;
            }
        }
        let _ = down_tx.close(None).await;
    };
    tokio::select! {
        () = to_up => {}
        () = to_down => {}
    }
    Ok(())
}

/// Decodes %XX escapes (a `+` stays a `+`, as in a URL's userinfo).
fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// The host of a URL, without credentials, for messages.
fn redact(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default()
}
