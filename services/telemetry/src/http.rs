//! The one way trawl builds an outgoing HTTP client.
//!
//! reqwest is built with rustls and no crypto provider of its own (it panics
//! when it finds none, even for plain http), so the process-wide provider (ring)
//! is installed here, once, before any client is built. Every client of trawl
//! (Bright Data, model providers, Slack and webhooks, OAuth discovery, upstream
//! MCP servers, `trawl submit`) starts from [`client`] and adds its own
//! timeouts, redirect policy and pool settings.

use std::sync::Once;

/// Installs rustls's ring provider as the process default, once; later calls
/// (and a provider installed by someone else) leave it as it is.
pub fn ensure_tls() {
    static TLS: Once = Once::new();
    TLS.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client builder with TLS ready.
pub fn client() -> reqwest::ClientBuilder {
    ensure_tls();
    reqwest::Client::builder()
}
