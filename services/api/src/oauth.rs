//! The OAuth 2.1 resource server: what `/mcp` and the REST API accept as a bearer
//! token, and what they answer when it is missing, invalid or too weak.
//!
//! It follows the MCP specification 2025-11-25, `basic/authorization`:
//!
//! - RFC 9728 protected resource metadata ([`ResourceServer::metadata`]) names the
//!   authorization server, the scopes and the canonical resource URI.
//! - Tokens are JWT access tokens (RFC 9068) verified locally: the keys come from
//!   the authorization server's JWKS, found through RFC 8414 (or OpenID Connect)
//!   discovery from the configured issuer, cached, and fetched again when a token
//!   names an unknown `kid` (at most once per [`REFETCH_MIN_INTERVAL`] by default, so a flood
//!   of made-up key ids cannot make us flood the authorization server). Nothing on
//!   the path of a token with a known key touches the network.
//! - Only asymmetric algorithms are accepted ([`ALLOWED_ALGORITHMS`]): never
//!   `none`, never an HMAC algorithm (which would let anyone holding the public key
//!   sign). `iss` must be the configured issuer, `exp` and `nbf` hold with
//!   [`LEEWAY`], and `aud` must contain this server's canonical URI (RFC 8707), so a
//!   token minted for another resource is refused here even when everything else
//!   about it is right.
//! - Scopes come from `scope` (space-separated, RFC 9068) or `scp` (a list).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use trawl_core::resource::ResourceUri;

/// Clock skew allowed on `exp` and `nbf`.
pub const LEEWAY: Duration = Duration::from_secs(30);

/// How soon after one JWKS fetch an unknown `kid` may cause another.
pub const REFETCH_MIN_INTERVAL: Duration = Duration::from_secs(10);

/// How long fetched keys are used before they are fetched again on the next
/// token (rotation that keeps old `kid`s is seen within this time).
pub const KEYS_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// The signature algorithms a token may use.
pub const ALLOWED_ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Read jobs, their items, rejections and traces.
pub const SCOPE_READ: &str = "research:read";
/// Submit and cancel jobs, decide approvals.
pub const SCOPE_WRITE: &str = "research:write";
/// Search and call tools through `/mcp`.
pub const SCOPE_TOOLS: &str = "tools:call";
/// See and cancel every caller's jobs (callers without it see only their own,
/// and their tenant's).
pub const SCOPE_ADMIN: &str = "research:admin";
/// Decide approvals (over REST; Slack has its own approvers).
pub const SCOPE_DECIDE: &str = "approvals:decide";
/// Every scope this server knows, as its metadata lists them.
pub const SCOPES: &[&str] = &[
    SCOPE_READ,
    SCOPE_WRITE,
    SCOPE_TOOLS,
    SCOPE_ADMIN,
    SCOPE_DECIDE,
];

/// How the resource server is configured (`TRAWL_RESOURCE_URI`,
/// `TRAWL_OAUTH_ISSUER`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OAuthConfig {
    /// This server's canonical URI: tokens must name it in `aud`.
    pub resource: ResourceUri,
    /// The authorization server's issuer identifier; discovery starts there.
    pub issuer: String,
    /// Timeout of a discovery or JWKS request.
    pub timeout: Duration,
    /// How soon after one JWKS fetch an unknown `kid` may cause another
    /// ([`REFETCH_MIN_INTERVAL`] unless set).
    pub refetch_min_interval: Duration,
    /// The claim naming a caller's tenant (`TRAWL_TENANT_CLAIM`, for example
    /// `org_id`); callers of one tenant share their jobs. `None`: no tenants.
    pub tenant_claim: Option<String>,
}

impl OAuthConfig {
    /// The configuration for `resource` and `issuer`. The issuer must be an
    /// `https` URL (or `http` on a loopback host), without query or fragment.
    pub fn new(resource: ResourceUri, issuer: &str) -> Result<OAuthConfig, String> {
        ResourceUri::parse(issuer).map_err(|e| format!("issuer: {e}"))?;
        // The issuer is compared as configured (RFC 8414 §3.3 asks for an exact
        // match with the metadata's `issuer`), except for a trailing slash.
        Ok(OAuthConfig {
            resource,
            issuer: issuer.trim().trim_end_matches('/').to_owned(),
            timeout: Duration::from_secs(10),
            refetch_min_interval: REFETCH_MIN_INTERVAL,
            tenant_claim: None,
        })
    }

    /// The same, with callers' tenants read from the claim `name` (a string, or
    /// a number; a token without it has no tenant). The registered claims that
    /// say who a caller is or for what the token is (`sub`, `aud`, `iss`, …)
    /// cannot be one: every caller of a client or issuer would share its jobs.
    pub fn with_tenant_claim(mut self, name: &str) -> Result<OAuthConfig, String> {
        const REGISTERED: &[&str] = &[
            "sub",
            "aud",
            "iss",
            "exp",
            "nbf",
            "iat",
            "jti",
            "scope",
            "scp",
            "client_id",
            "azp",
        ];
        let name = name.trim();
        if name.is_empty() || REGISTERED.contains(&name) {
            return Err(format!(
                "{name:?} cannot name a tenant: give a claim of your own, such as org_id"
            ));
        }
        self.tenant_claim = Some(name.to_owned());
        Ok(self)
    }

    /// The same, with unknown `kid`s refetching the keys at most once per `every`.
    pub fn with_refetch_min_interval(mut self, every: Duration) -> OAuthConfig {
        self.refetch_min_interval = every;
        self
    }
}

/// Who a valid token speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// `sub`, or the `client_id` for a client-credentials token without one.
    pub subject: String,
    pub client_id: Option<String>,
    pub scopes: BTreeSet<String>,
    /// The tenant claim's value, when one is configured and the token has it.
    pub tenant: Option<String>,
}

/// Why a token was refused. The text goes into `error_description`: it names the
/// check that failed and nothing of the token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("the token's algorithm {0} is not accepted")]
    Algorithm(String),
    #[error("the token is signed with a key the authorization server does not publish")]
    UnknownKey,
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token was issued by another issuer")]
    Issuer,
    #[error("the token was issued for another resource")]
    Audience,
    #[error("the token lacks a required claim: {0}")]
    MissingClaim(&'static str),
    /// The authorization server's keys could not be fetched: not the caller's
    /// fault, but nothing can be verified either.
    #[error("the authorization server's keys are unavailable")]
    KeysUnavailable(String),
}

/// The keys of the authorization server, by `kid`.
struct Keys {
    by_kid: HashMap<String, (DecodingKey, Option<Algorithm>)>,
    /// A key without a `kid`, usable only when it is the only key.
    lone: Option<(DecodingKey, Option<Algorithm>)>,
    fetched: Option<Instant>,
}

/// The resource server: verifies tokens and describes itself.
pub struct ResourceServer {
    config: OAuthConfig,
    http: reqwest::Client,
    /// The authorization server's `jwks_uri`, found by discovery.
    jwks_uri: tokio::sync::OnceCell<String>,
    keys: RwLock<Arc<Keys>>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    /// Tokens verified already, by the sha256 of the token, with their `exp`: a
    /// host sends the same token with every request, and an RSA signature check
    /// costs far more than the request it guards. Emptied when the keys are
    /// fetched again, and when it holds [`VERIFIED_MAX`] tokens.
    verified: Mutex<HashMap<[u8; 32], (Principal, u64)>>,
}

/// The most verified tokens remembered.
const VERIFIED_MAX: usize = 10_000;

impl fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceServer")
            .field("resource", &self.config.resource.as_str())
            .field("issuer", &self.config.issuer)
            .finish_non_exhaustive()
    }
}

/// The claims read after verification (`iss`, `aud`, `exp`, `nbf` are checked by
/// the verification itself).
#[derive(Deserialize)]
struct Claims {
    /// Seconds since the epoch; some issuers write a fraction.
    exp: f64,
    sub: Option<String>,
    client_id: Option<String>,
    scope: Option<String>,
    scp: Option<Vec<String>>,
    /// The rest, where a configured tenant claim is found.
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

impl ResourceServer {
    /// A resource server for `config`. Discovery happens on the first token, and
    /// again until it succeeds, so the API can start before the authorization
    /// server answers.
    pub fn new(config: OAuthConfig) -> Result<ResourceServer, reqwest::Error> {
        let http = trawl_telemetry::http::client()
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(ResourceServer {
            config,
            http,
            jwks_uri: tokio::sync::OnceCell::new(),
            keys: RwLock::new(Arc::new(Keys {
                by_kid: HashMap::new(),
                lone: None,
                fetched: None,
            })),
            fetching: tokio::sync::Mutex::new(()),
            verified: Mutex::new(HashMap::new()),
        })
    }

    pub fn resource(&self) -> &ResourceUri {
        &self.config.resource
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    /// Where this server's metadata is published (RFC 9728 §3.1): the value of
    /// `resource_metadata` in every `WWW-Authenticate` challenge.
    pub fn metadata_url(&self) -> String {
        self.config.resource.metadata_url()
    }

    /// The protected resource metadata document (RFC 9728 §2).
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.config.resource.as_str(),
            "authorization_servers": [self.config.issuer],
            "scopes_supported": SCOPES,
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": ALLOWED_ALGORITHMS
                .iter()
                .map(|a| format!("{a:?}"))
                .collect::<Vec<_>>(),
            "resource_name": "trawl",
        })
    }

    /// Fetches the discovery document and the keys now, so that a broken
    /// configuration shows at start. Failures are returned, not kept: the next
    /// token tries again.
    pub async fn warm_up(&self) -> Result<(), TokenError> {
        self.refetch(true).await
    }

    /// Verifies `token` and returns who it speaks for. A token verified before
    /// is answered from memory until its `exp`.
    pub async fn verify(&self, token: &str) -> Result<Principal, TokenError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = jsonwebtoken::get_current_timestamp();
        if let Some((p, exp)) = self
            .verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&digest)
            && now < *exp
        {
            return Ok(p.clone());
        }
        let (principal, exp) = self.verify_signed(token).await?;
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if verified.len() >= VERIFIED_MAX {
            verified.clear();
        }
        verified.insert(digest, (principal.clone(), exp));
        Ok(principal)
    }

    /// The whole check: header, key, signature, claims. Returns the principal
    /// and the token's `exp`.
    async fn verify_signed(&self, token: &str) -> Result<(Principal, u64), TokenError> {
        let header = header_of(token)?;
        let kid = header.kid.as_deref();
        let key = match self.key(kid) {
            Some(k) => k,
            None => {
                self.refetch(false).await?;
                self.key(kid).ok_or(TokenError::UnknownKey)?
            }
        };
        let (key, key_alg) = key;
        if key_alg.is_some_and(|a| a != header.alg) {
            return Err(TokenError::Algorithm(format!(
                "{:?} (the key is for {:?})",
                header.alg,
                key_alg.unwrap_or(header.alg)
            )));
        }
        let mut v = Validation::new(header.alg);
        v.leeway = LEEWAY.as_secs();
        v.validate_nbf = true;
        v.validate_aud = true;
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.set_issuer(&[self.config.issuer.as_str()]);
        v.set_audience(&[self.config.resource.as_str()]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &v).map_err(token_error)?;
        let c = data.claims;
        let scopes: BTreeSet<String> = match (c.scope, c.scp) {
            (Some(s), _) => s.split_ascii_whitespace().map(str::to_owned).collect(),
            (None, Some(list)) => list.into_iter().collect(),
            (None, None) => BTreeSet::new(),
        };
        let subject = c
            .sub
            .clone()
            .or_else(|| c.client_id.clone())
            .ok_or(TokenError::MissingClaim("sub"))?;
        let tenant = self
            .config
            .tenant_claim
            .as_ref()
            .and_then(|claim| match c.rest.get(claim) {
                Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            });
        Ok((
            Principal {
                subject,
                client_id: c.client_id,
                scopes,
                tenant,
            },
            // Saturating: a negative or huge `exp` was refused by the check above
            // or stands for "far off".
            c.exp as u64,
        ))
    }

    /// The key for `kid`, if the cached set has it and is not too old.
    fn key(&self, kid: Option<&str>) -> Option<(DecodingKey, Option<Algorithm>)> {
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner()).clone();
        if keys.fetched.is_none_or(|t| t.elapsed() > KEYS_MAX_AGE) {
            return None;
        }
        match kid {
            Some(kid) => keys.by_kid.get(kid).cloned(),
            None if keys.by_kid.is_empty() => keys.lone.clone(),
            None => None,
        }
    }

    /// Fetches the keys again, unless another fetch happened within
    /// [`OAuthConfig::refetch_min_interval`] (then the cached set stands) or `force`.
    async fn refetch(&self, force: bool) -> Result<(), TokenError> {
        let _one = self.fetching.lock().await;
        let last = self.keys.read().unwrap_or_else(|p| p.into_inner()).fetched;
        if !force
            && last.is_some_and(|t| t.elapsed() < self.config.refetch_min_interval)
            && last.is_some_and(|t| t.elapsed() <= KEYS_MAX_AGE)
        {
            return Ok(());
        }
        let jwks_uri = self
            .jwks_uri
            .get_or_try_init(|| self.discover())
            .await?
            .clone();
        let set: JwkSet = self
            .get_json(&jwks_uri)
            .await
            .map_err(|e| TokenError::KeysUnavailable(format!("JWKS {jwks_uri}: {e}")))?;
        let keys = keys_of(&set);
        tracing::debug!(keys = keys.by_kid.len(), %jwks_uri, "authorization server keys fetched");
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
        // A key the authorization server no longer publishes verifies nothing,
        // remembered or not.
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        Ok(())
    }

    /// The `jwks_uri` of the issuer, by RFC 8414 metadata, else OpenID Connect
    /// discovery. The document's `issuer` must be the configured one (RFC 8414
    /// §3.3), or its keys would speak for someone else.
    async fn discover(&self) -> Result<String, TokenError> {
        let issuer = &self.config.issuer;
        let mut tried = Vec::new();
        for url in discovery_urls(issuer) {
            match self.get_json::<Value>(&url).await {
                Ok(doc) => {
                    let named = doc.get("issuer").and_then(Value::as_str).unwrap_or("");
                    if named.trim_end_matches('/') != issuer {
                        return Err(TokenError::KeysUnavailable(format!(
                            "{url} names issuer {named:?}, not {issuer:?}"
                        )));
                    }
                    return doc
                        .get("jwks_uri")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            TokenError::KeysUnavailable(format!("{url} has no jwks_uri"))
                        });
                }
                Err(e) => tried.push(format!("{url}: {e}")),
            }
        }
        Err(TokenError::KeysUnavailable(format!(
            "no discovery document for {issuer}: {}",
            tried.join("; ")
        )))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let res = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if !res.status().is_success() {
            return Err(format!("HTTP {}", res.status().as_u16()));
        }
        res.json::<T>()
            .await
            .map_err(|e| e.without_url().to_string())
    }
}

/// The header of `token`, read without verifying anything, and refused unless
/// its algorithm is one of [`ALLOWED_ALGORITHMS`]. The first step of every
/// verification; public for the fuzz target.
pub fn header_of(token: &str) -> Result<jsonwebtoken::Header, TokenError> {
    // A header the library cannot read may still name an algorithm it does not
    // know (`none`): say so rather than "malformed".
    let header = jsonwebtoken::decode_header(token)
        .map_err(|_| algorithm_named(token).map_or(TokenError::Malformed, TokenError::Algorithm))?;
    if !ALLOWED_ALGORITHMS.contains(&header.alg) {
        return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
    }
    Ok(header)
}

/// The well-known URLs of `issuer`'s metadata, in the order MCP clients try
/// them: RFC 8414 path-inserted, OpenID Connect path-inserted, OpenID Connect
/// appended.
fn discovery_urls(issuer: &str) -> Vec<String> {
    let after_scheme = issuer.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match issuer[after_scheme..].find('/') {
        Some(i) => issuer.split_at(after_scheme + i),
        None => (issuer, ""),
    };
    let mut urls = vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
    ];
    if !path.is_empty() {
        urls.push(format!("{issuer}/.well-known/openid-configuration"));
    }
    urls
}

/// The usable keys of a JWKS: signing keys (`use` absent or `sig`) of an
/// asymmetric type. Symmetric (`oct`) keys are dropped, so no HMAC key can ever
/// verify a token.
fn keys_of(set: &JwkSet) -> Keys {
    let mut by_kid = HashMap::new();
    let mut lone = None;
    let mut count = 0;
    for jwk in &set.keys {
        if !usable(jwk) {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        let alg = jwk
            .common
            .key_algorithm
            .and_then(|a| a.to_string().parse::<Algorithm>().ok());
        count += 1;
        match &jwk.common.key_id {
            Some(kid) => {
                by_kid.insert(kid.clone(), (key, alg));
            }
            None => lone = Some((key, alg)),
        }
    }
    Keys {
        by_kid,
        lone: if count == 1 { lone } else { None },
        fetched: Some(Instant::now()),
    }
}

fn usable(jwk: &Jwk) -> bool {
    use jsonwebtoken::jwk::{AlgorithmParameters, PublicKeyUse};
    let signing = matches!(
        jwk.common.public_key_use,
        None | Some(PublicKeyUse::Signature)
    );
    let asymmetric = matches!(
        jwk.algorithm,
        AlgorithmParameters::RSA(_)
            | AlgorithmParameters::EllipticCurve(_)
            | AlgorithmParameters::OctetKeyPair(_)
    );
    signing && asymmetric
}

/// The `alg` a header names when it is not one the library knows (`none`).
fn algorithm_named(token: &str) -> Option<String> {
    use base64::Engine as _;
    token
        .split('.')
        .next()
        .and_then(|h| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(h.trim_end_matches('='))
                .ok()
        })
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| {
            v.get("alg")
                .and_then(Value::as_str)
                .map(|a| format!("{a:?}"))
        })
}

fn token_error(e: jsonwebtoken::errors::Error) -> TokenError {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => TokenError::Expired,
        K::ImmatureSignature => TokenError::NotYetValid,
        K::InvalidIssuer => TokenError::Issuer,
        K::InvalidAudience => TokenError::Audience,
        K::MissingRequiredClaim(c) => TokenError::MissingClaim(match c.as_str() {
            "exp" => "exp",
            "iss" => "iss",
            "aud" => "aud",
            _ => "a registered claim",
        }),
        K::InvalidSignature => TokenError::Signature,
        K::InvalidAlgorithm | K::InvalidAlgorithmName | K::InvalidKeyFormat => {
            TokenError::Algorithm("(not usable with this key)".to_owned())
        }
        _ => TokenError::Malformed,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn discovery_urls_follow_rfc_8414_then_openid() {
        assert_eq!(
            discovery_urls("https://as.example.com"),
            vec![
                "https://as.example.com/.well-known/oauth-authorization-server",
                "https://as.example.com/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            discovery_urls("https://as.example.com/tenant1"),
            vec![
                "https://as.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://as.example.com/.well-known/openid-configuration/tenant1",
                "https://as.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn symmetric_keys_never_verify() {
        let set: JwkSet = serde_json::from_value(json!({"keys": [
            {"kty": "oct", "kid": "h", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ"},
            {"kty": "RSA", "kid": "r", "use": "enc", "n": "sXch", "e": "AQAB"},
        ]}))
        .unwrap();
        let keys = keys_of(&set);
        assert!(keys.by_kid.is_empty() && keys.lone.is_none());
    }

    #[tokio::test]
    async fn none_and_hmac_tokens_are_refused_before_any_key_is_looked_up() {
        use base64::Engine as _;
        let b64 = |v: Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        let rs = ResourceServer::new(
            OAuthConfig::new(
                ResourceUri::parse("http://127.0.0.1:1/mcp").unwrap(),
                // Nothing listens there: reaching it would fail differently.
                "http://127.0.0.1:1",
            )
            .unwrap(),
        )
        .unwrap();
        let claims = b64(
            json!({"iss": "http://127.0.0.1:1", "aud": "http://127.0.0.1:1/mcp",
            "exp": 4_000_000_000u64, "sub": "mallory"}),
        );
        let none = format!("{}.{claims}.", b64(json!({"alg": "none"})));
        assert_eq!(
            rs.verify(&none).await,
            Err(TokenError::Algorithm("\"none\"".into()))
        );
        let hs = format!("{}.{claims}.c2ln", b64(json!({"alg": "HS256", "kid": "k"})));
        assert_eq!(
            rs.verify(&hs).await,
            Err(TokenError::Algorithm("HS256".into()))
        );
        assert_eq!(rs.verify("garbage").await, Err(TokenError::Malformed));
        assert_eq!(rs.verify("a.b.c").await, Err(TokenError::Malformed));
    }

    #[test]
    fn metadata_lists_what_rfc_9728_asks() {
        let rs = ResourceServer::new(
            OAuthConfig::new(
                ResourceUri::parse("https://trawl.example.com/mcp").unwrap(),
                "https://as.example.com/",
            )
            .unwrap(),
        )
        .unwrap();
        let m = rs.metadata();
        assert_eq!(m["resource"], "https://trawl.example.com/mcp");
        assert_eq!(
            m["authorization_servers"],
            json!(["https://as.example.com"])
        );
        assert_eq!(
            m["scopes_supported"],
            json!([
                "research:read",
                "research:write",
                "tools:call",
                "research:admin",
                "approvals:decide"
            ])
        );
        assert_eq!(
            rs.metadata_url(),
            "https://trawl.example.com/.well-known/oauth-protected-resource/mcp"
        );
    }
}
