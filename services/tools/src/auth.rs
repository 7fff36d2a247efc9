//! trawl's own credentials for protected upstream MCP servers (MCP 2025-11-25
//! `basic/authorization`), through rmcp's `auth` client.
//!
//! No caller's token ever goes upstream (MCP forbids token passthrough): each
//! upstream server has a credential of trawl's, asked for with `resource` = that
//! server's canonical URI (RFC 8707), so the token is good for that server alone.
//!
//! - [`UpstreamAuth::ClientCredentials`]: a service account. The token is fetched
//!   from the authorization server found through the upstream's protected
//!   resource metadata (RFC 9728, then RFC 8414), and fetched again before it
//!   expires ([`renew_within`]): rmcp refreshes only with a refresh token, which
//!   this grant has none of.
//! - [`UpstreamAuth::Login`]: a person's grant, obtained once with `trawl login
//!   SERVER` ([`login`]): the authorization code flow with PKCE S256 (an
//!   authorization server that does not advertise S256 is refused) and
//!   `resource` in the authorization and token requests; stored encrypted in the
//!   [`Vault`] and refreshed by rmcp before it expires.
//!
//! [`Vault`]: tokens at rest, sealed with ChaCha20-Poly1305 (ring) under a key
//! from `TRAWL_SECRET_KEY`, or one generated in the vault's folder (mode 0600)
//! when none is given; each file is bound to its server name.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use oauth2::TokenResponse as _;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadataSource, AuthorizationRequest,
    AuthorizationSession, ClientCredentialsConfig, CredentialStore, OAuthClientConfig,
    StoredCredentials,
};
use secrecy::{ExposeSecret, SecretString};

/// How trawl authenticates to one upstream server (`auth:` in the tools file).
#[derive(Clone, Default)]
pub enum UpstreamAuth {
    /// No OAuth (static `headers:` may still carry an API key).
    #[default]
    None,
    /// The client credentials grant, as trawl's own service account.
    ClientCredentials {
        client_id: String,
        client_secret: SecretString,
        scopes: Vec<String>,
        /// The upstream's canonical URI; its URL when not given.
        resource: Option<String>,
    },
    /// A grant obtained once with `trawl login SERVER`, kept in the vault.
    Login {
        /// A pre-registered client; without one, the client registers itself
        /// (RFC 7591) if the authorization server allows it.
        client_id: Option<String>,
        client_secret: Option<SecretString>,
        scopes: Vec<String>,
    },
}

impl fmt::Debug for UpstreamAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamAuth::None => f.write_str("None"),
            UpstreamAuth::ClientCredentials {
                client_id, scopes, ..
            } => f
                .debug_struct("ClientCredentials")
                .field("client_id", client_id)
                .field("scopes", scopes)
                .finish_non_exhaustive(),
            UpstreamAuth::Login {
                client_id, scopes, ..
            } => f
                .debug_struct("Login")
                .field("client_id", client_id)
                .field("scopes", scopes)
                .finish_non_exhaustive(),
        }
    }
}

/// Why an upstream credential could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Discovery failed, or the authorization server is not one trawl accepts.
    #[error("{0}")]
    Discovery(String),
    /// No stored grant: `trawl login` first.
    #[error("no stored login for {0}: run `trawl login {0}`")]
    NotLoggedIn(String),
    #[error("{0}")]
    Vault(String),
    #[error("{0}")]
    Oauth(String),
}

fn oauth(e: AuthError) -> CredentialError {
    CredentialError::Oauth(e.to_string())
}

/// Seconds since the Unix epoch.
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long before its expiry a token is replaced: a minute, or half its life
/// for short-lived tokens.
pub fn renew_within(lifetime: Duration) -> Duration {
    Duration::from_secs(60).min(lifetime / 2)
}

/// Whether a token received at `received` (epoch seconds) that lives `lifetime`
/// should be replaced at `now`. A token without a known lifetime is kept.
pub fn needs_renewal(received: u64, lifetime: Option<Duration>, now: u64) -> bool {
    let Some(lifetime) = lifetime else {
        return false;
    };
    let expires = received.saturating_add(lifetime.as_secs());
    now.saturating_add(renew_within(lifetime).as_secs()) >= expires
}

/// An authorization manager for `url` with its authorization server found
/// through the server's protected resource metadata (or RFC 8414 at its
/// origin); the legacy fallback to guessed endpoints is refused, and so is an
/// authorization server that does not advertise PKCE S256 when `pkce` is asked.
async fn discovered(url: &str, pkce: bool) -> Result<AuthorizationManager, CredentialError> {
    // The SDK builds its own reqwest client: TLS must be ready first.
    trawl_telemetry::http::ensure_tls();
    let mgr = AuthorizationManager::new(url)
        .await
        .map_err(|e| CredentialError::Discovery(format!("{url}: {e}")))?;
    let found = mgr
        .resolve_metadata()
        .await
        .map_err(|e| CredentialError::Discovery(format!("{url}: discovery failed: {e}")))?;
    if matches!(
        found.source,
        AuthorizationMetadataSource::LegacyEndpointFallback
    ) {
        return Err(CredentialError::Discovery(format!(
            "{url}: no protected resource or authorization server metadata found"
        )));
    }
    if pkce {
        let methods = found
            .metadata
            .code_challenge_methods_supported
            .clone()
            .unwrap_or_default();
        if !methods.iter().any(|m| m == "S256") {
            return Err(CredentialError::Discovery(format!(
                "{url}: the authorization server does not advertise PKCE S256 \
                 (code_challenge_methods_supported: {methods:?}); refused"
            )));
        }
    }
    let mut mgr = mgr;
    mgr.set_metadata(found.metadata);
    Ok(mgr)
}

/// The `resource` of an upstream: configured, else its URL in canonical form.
fn resource_of(url: &str, configured: Option<&str>) -> Result<String, CredentialError> {
    let raw = configured.unwrap_or(url);
    trawl_core::resource::ResourceUri::parse(raw)
        .map(|r| r.as_str().to_owned())
        .map_err(CredentialError::Discovery)
}

/// The authorization manager an upstream's HTTP client authenticates with, or
/// `None` for [`UpstreamAuth::None`].
pub async fn manager(
    server: &str,
    url: &str,
    auth: &UpstreamAuth,
    vault: Option<&Arc<Vault>>,
) -> Result<Option<AuthorizationManager>, CredentialError> {
    match auth {
        UpstreamAuth::None => Ok(None),
        UpstreamAuth::ClientCredentials {
            client_id,
            client_secret,
            scopes,
            resource,
        } => {
            let config = ClientCredentialsConfig::ClientSecret {
                client_id: client_id.clone(),
                client_secret: client_secret.expose_secret().to_owned(),
                scopes: scopes.clone(),
                resource: Some(resource_of(url, resource.as_deref())?),
            };
            let mut exchanger = discovered(url, false).await?;
            exchanger
                .configure_client_credentials(&config)
                .map_err(oauth)?;
            let store = ClientCredentialsStore {
                exchanger: Arc::new(exchanger),
                client_id: client_id.clone(),
                config,
                current: tokio::sync::Mutex::new(None),
            };
            // The first token now, so that a wrong secret shows at connect.
            store.load().await.map_err(oauth)?;
            let mut mgr = discovered(url, false).await?;
            mgr.set_credential_store(store);
            Ok(Some(mgr))
        }
        UpstreamAuth::Login {
            client_id,
            client_secret,
            ..
        } => {
            let vault = vault.ok_or_else(|| {
                CredentialError::Vault(format!("no credential vault to read {server}'s login from"))
            })?;
            let mut mgr = discovered(url, true).await?;
            mgr.set_credential_store(VaultStore {
                vault: vault.clone(),
                server: server.to_owned(),
            });
            if !mgr.initialize_from_store().await.map_err(oauth)? {
                return Err(CredentialError::NotLoggedIn(server.to_owned()));
            }
            // The stored grant keeps the client id, not its secret (never written).
            if let (Some(id), Some(secret)) = (client_id, client_secret) {
                mgr.configure_client(
                    OAuthClientConfig::new(id.clone(), "http://127.0.0.1/callback")
                        .with_client_secret(secret.expose_secret().to_owned()),
                )
                .map_err(oauth)?;
            }
            Ok(Some(mgr))
        }
    }
}

/// Client credentials tokens, fetched again before they expire.
struct ClientCredentialsStore {
    exchanger: Arc<AuthorizationManager>,
    client_id: String,
    config: ClientCredentialsConfig,
    current: tokio::sync::Mutex<Option<StoredCredentials>>,
}

#[async_trait]
impl CredentialStore for ClientCredentialsStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref()
            && let Some(t) = &c.token_response
            && !needs_renewal(c.token_received_at.unwrap_or(0), t.expires_in(), now_secs())
        {
            return Ok(Some(c.clone()));
        }
        let token = self
            .exchanger
            .exchange_client_credentials(&self.config)
            .await?;
        let scopes = token
            .scopes()
            .map(|s| s.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default();
        let fresh = StoredCredentials::new(
            self.client_id.clone(),
            Some(token),
            scopes,
            Some(now_secs()),
        );
        tracing::debug!(client_id = %self.client_id, "upstream token fetched (client credentials)");
        *current = Some(fresh.clone());
        Ok(Some(fresh))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        *self.current.lock().await = Some(credentials);
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        *self.current.lock().await = None;
        Ok(())
    }
}

/// A login's tokens in the vault.
struct VaultStore {
    vault: Arc<Vault>,
    server: String,
}

#[async_trait]
impl CredentialStore for VaultStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let Some(bytes) = self
            .vault
            .open(&self.server)
            .map_err(|e| AuthError::InternalError(e.to_string()))?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| AuthError::InternalError(format!("stored login unreadable: {e}")))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let bytes = serde_json::to_vec(&credentials)
            .map_err(|e| AuthError::InternalError(e.to_string()))?;
        self.vault
            .seal(&self.server, &bytes)
            .map_err(|e| AuthError::InternalError(e.to_string()))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.vault
            .remove(&self.server)
            .map_err(|e| AuthError::InternalError(e.to_string()))
    }
}

/// Secrets at rest: one sealed file per server in a folder.
pub struct Vault {
    dir: PathBuf,
    key: LessSafeKey,
    rng: SystemRandom,
    /// One writer at a time in this process.
    writing: Mutex<()>,
}

impl fmt::Debug for Vault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vault")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

const KEY_FILE: &str = "vault.key";
const NONCE_LEN: usize = 12;

impl Vault {
    /// The vault in `dir`, sealed with `key` (32 bytes as 64 hex digits or
    /// base64), or with the key in `dir/vault.key`, made on first use.
    pub fn open_dir(dir: &Path, key: Option<&SecretString>) -> Result<Vault, CredentialError> {
        let err = |what: &str, e: std::io::Error| {
            CredentialError::Vault(format!("{what} {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| err("creating", e))?;
        let rng = SystemRandom::new();
        let raw = match key {
            Some(k) => decode_key(k.expose_secret())?,
            None => {
                let path = dir.join(KEY_FILE);
                match std::fs::read(&path) {
                    Ok(bytes) => decode_key(String::from_utf8_lossy(&bytes).trim())?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        let mut k = [0u8; 32];
                        rng.fill(&mut k)
                            .map_err(|_| CredentialError::Vault("no randomness".into()))?;
                        write_private(&path, hex::encode(k).as_bytes())
                            .map_err(|e| err("writing the key in", e))?;
                        tracing::info!(path = %path.display(), "credential vault key created (set TRAWL_SECRET_KEY to keep it elsewhere)");
                        k.to_vec()
                    }
                    Err(e) => return Err(err("reading the key in", e)),
                }
            }
        };
        let key = UnboundKey::new(&aead::CHACHA20_POLY1305, &raw)
            .map_err(|_| CredentialError::Vault("the vault key must be 32 bytes".into()))?;
        Ok(Vault {
            dir: dir.to_owned(),
            key: LessSafeKey::new(key),
            rng,
            writing: Mutex::new(()),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.sealed"))
    }

    /// Seals `plain` as `name`'s secret (nonce, then ciphertext and tag; the name
    /// is the associated data, so a file moved to another name does not open).
    pub fn seal(&self, name: &str, plain: &[u8]) -> Result<(), CredentialError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| CredentialError::Vault("no randomness".into()))?;
        let mut buf = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut buf,
            )
            .map_err(|_| CredentialError::Vault("sealing failed".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        let _one = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let path = self.path(name);
        let tmp = path.with_extension("tmp");
        write_private(&tmp, &out)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| CredentialError::Vault(format!("writing {}: {e}", path.display())))
    }

    /// `name`'s secret, or `None` if there is none. A file that does not open
    /// (another key, tampered with, another name's) is an error, not `None`.
    pub fn open(&self, name: &str) -> Result<Option<Vec<u8>>, CredentialError> {
        let path = self.path(name);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(CredentialError::Vault(format!(
                    "reading {}: {e}",
                    path.display()
                )));
            }
        };
        if bytes.len() < NONCE_LEN {
            return Err(CredentialError::Vault(format!(
                "{} is truncated",
                path.display()
            )));
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce)
            .map_err(|_| CredentialError::Vault("bad nonce".into()))?;
        let mut buf = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(name.as_bytes()), &mut buf)
            .map_err(|_| {
                CredentialError::Vault(format!(
                    "{} does not open with this key (another TRAWL_SECRET_KEY, or altered)",
                    path.display()
                ))
            })?;
        Ok(Some(plain.to_vec()))
    }

    pub fn remove(&self, name: &str) -> Result<(), CredentialError> {
        match std::fs::remove_file(self.path(name)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CredentialError::Vault(e.to_string())),
        }
    }
}

fn decode_key(s: &str) -> Result<Vec<u8>, CredentialError> {
    use base64::Engine as _;
    let s = s.trim();
    let bytes = if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(s).ok()
    } else {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s))
            .ok()
    };
    match bytes {
        Some(b) if b.len() == 32 => Ok(b),
        _ => Err(CredentialError::Vault(
            "TRAWL_SECRET_KEY must be 32 bytes, as 64 hex digits or base64".into(),
        )),
    }
}

/// Writes `bytes` to `path`, readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// `trawl login SERVER`: the authorization code flow with PKCE S256 against the
/// authorization server of the upstream at `url`, its result sealed in `vault`.
///
/// A one-shot listener on a loopback port takes the redirect; `show` is given
/// the URL to open in a browser. Returns the scopes granted.
pub async fn login(
    server: &str,
    url: &str,
    auth: &UpstreamAuth,
    vault: Arc<Vault>,
    show: impl FnOnce(&str),
) -> Result<Vec<String>, CredentialError> {
    let UpstreamAuth::Login {
        client_id,
        client_secret,
        scopes,
    } = auth
    else {
        return Err(CredentialError::Oauth(format!(
            "{server} is not configured with `auth: login`"
        )));
    };
    let mut mgr = discovered(url, true).await?;
    mgr.set_credential_store(VaultStore {
        vault,
        server: server.to_owned(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CredentialError::Oauth(format!("binding a loopback port: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| CredentialError::Oauth(e.to_string()))?
        .port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let mut request = AuthorizationRequest::new(redirect.clone())
        .with_client_name("trawl")
        .with_scopes(scopes.iter().cloned());
    if let Some(id) = client_id {
        request = request.with_preregistered_client(id.clone());
        if let Some(secret) = client_secret {
            request = request.with_client_secret(secret.expose_secret().to_owned());
        }
    }
    let session = AuthorizationSession::new(mgr, request)
        .await
        .map_err(|(_, e)| oauth(e))?;
    show(session.get_authorization_url());
    let callback = accept_callback(&listener, port).await?;
    session
        .handle_callback_url(&callback)
        .await
        .map_err(oauth)?;
    let (_, token) = session.get_credentials().await.map_err(oauth)?;
    Ok(token
        .and_then(|t| {
            t.scopes()
                .map(|s| s.iter().map(|s| s.to_string()).collect())
        })
        .unwrap_or_default())
}

/// Waits for the browser's redirect and answers it; returns the full callback
/// URL. Requests for other paths (a favicon) are answered 404 and waited past.
async fn accept_callback(
    listener: &tokio::net::TcpListener,
    port: u16,
) -> Result<String, CredentialError> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let (mut sock, _) = listener
            .accept()
            .await
            .map_err(|e| CredentialError::Oauth(format!("waiting for the redirect: {e}")))?;
        let mut buf = vec![0u8; 8192];
        let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut buf))
            .await
            .map_err(|_| CredentialError::Oauth("the redirect request did not arrive".into()))?
            .map_err(|e| CredentialError::Oauth(e.to_string()))?;
        let head = String::from_utf8_lossy(&buf[..n]);
        let target = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or("");
        if !target.starts_with("/callback") {
            let _ = sock
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let body = "trawl: login complete. You can close this tab.\n";
        let _ = sock
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        return Ok(format!("http://127.0.0.1:{port}{target}"));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_renewed_a_minute_or_half_a_life_early() {
        let hour = Some(Duration::from_secs(3600));
        assert!(!needs_renewal(1_000, hour, 1_000 + 3_000));
        assert!(needs_renewal(1_000, hour, 1_000 + 3_541));
        assert!(needs_renewal(1_000, hour, 1_000 + 4_000));
        // A 10 s token is replaced after 5 s.
        let short = Some(Duration::from_secs(10));
        assert!(!needs_renewal(0, short, 4));
        assert!(needs_renewal(0, short, 5));
        // Without a lifetime, kept.
        assert!(!needs_renewal(0, None, u64::MAX / 2));
    }

    #[test]
    fn the_vault_seals_and_opens_only_with_its_key_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vault::open_dir(dir.path(), None).unwrap();
        v.seal("docs", b"{\"access_token\":\"secret-token\"}")
            .unwrap();
        let raw = std::fs::read(dir.path().join("docs.sealed")).unwrap();
        assert!(!raw.windows(12).any(|w| w == b"secret-token"));
        assert_eq!(
            v.open("docs").unwrap().unwrap(),
            b"{\"access_token\":\"secret-token\"}"
        );
        assert_eq!(v.open("other").unwrap(), None);
        // The same folder opens again with the key it made.
        let again = Vault::open_dir(dir.path(), None).unwrap();
        assert!(again.open("docs").unwrap().is_some());
        // Another key does not open it; nor does the file under another name.
        let other_key = SecretString::from("11".repeat(32));
        let other = Vault::open_dir(dir.path(), Some(&other_key)).unwrap();
        assert!(other.open("docs").is_err());
        std::fs::copy(
            dir.path().join("docs.sealed"),
            dir.path().join("stolen.sealed"),
        )
        .unwrap();
        assert!(v.open("stolen").is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join("docs.sealed"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
        assert!(Vault::open_dir(dir.path(), Some(&SecretString::from("short"))).is_err());
    }
}
