//! What every handler shares: the ports, the price table, the keys and the limits.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use trawl_core::cost::PriceTable;
use trawl_core::ports::{ContentCache, Events, JobOwner, JobRecord, SliceQueue, Store};

use crate::error::ApiError;
use crate::oauth::{ResourceServer, SCOPE_ADMIN, SCOPE_DECIDE, SCOPE_READ, SCOPE_WRITE};

/// Who may call the `/v1` routes.
pub enum Auth {
    /// Everyone, as one caller (`api`) who sees every job. For `trawl dev` on a
    /// loopback address only.
    Open,
    /// Callers that send one of these keys as `Authorization: Bearer <key>`. An
    /// empty list lets no one in.
    Keys(Vec<ApiKey>),
}

/// An API key: its secret, the name it is shown by, and whether it is an admin
/// key (sees every job, decides approvals).
#[derive(Clone)]
pub struct ApiKey {
    name: Option<String>,
    secret: SecretString,
    admin: bool,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

impl From<SecretString> for ApiKey {
    /// An unnamed, non-admin key.
    fn from(secret: SecretString) -> ApiKey {
        ApiKey {
            name: None,
            secret,
            admin: false,
        }
    }
}

impl ApiKey {
    /// A key as configured (`TRAWL_API_KEYS`, `TRAWL_ADMIN_KEYS`): `name:secret`,
    /// where the name is 1 to 64 of `A-Z a-z 0-9 . _ -` before the first `:`, or
    /// the bare secret (then it is shown as `key-` and 8 hex digits of its
    /// sha256). A secret that itself holds a `:` must be given a name. A name
    /// `group/name` puts the key in a group: the keys of one group are one
    /// tenant (they share their jobs and their quotas).
    pub fn parse(raw: &str) -> Result<ApiKey, String> {
        let raw = raw.trim();
        let (name, secret) = match raw.split_once(':') {
            Some((name, secret)) => {
                let part = |p: &str| {
                    (1..=64).contains(&p.len())
                        && p.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                };
                let ok = match name.split_once('/') {
                    Some((group, own)) => part(group) && part(own),
                    None => part(name),
                };
                if !ok {
                    return Err(format!(
                        "an API key's name (before the first ':') must be 1 to 64 of A-Z a-z 0-9 . _ -, or group/name of two such, not {name:?}"
                    ));
                }
                (Some(name.to_owned()), secret)
            }
            None => (None, raw),
        };
        if secret.is_empty() {
            return Err(format!(
                "the API key {} has no secret after the ':'",
                name.as_deref().unwrap_or_default()
            ));
        }
        Ok(ApiKey {
            name,
            secret: SecretString::from(secret.to_owned()),
            admin: false,
        })
    }

    /// The same key as an admin key.
    pub fn admin(mut self) -> ApiKey {
        self.admin = true;
        self
    }

    /// The name the key was given, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Whether no secret is given twice among `keys`.
    pub fn distinct(keys: &[ApiKey]) -> bool {
        let digests: std::collections::HashSet<[u8; 32]> = keys
            .iter()
            .map(|k| sha256(k.secret.expose_secret().as_bytes()))
            .collect();
        digests.len() == keys.len()
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Open => f.write_str("Open"),
            Auth::Keys(keys) => write!(f, "Keys([{} redacted])", keys.len()),
        }
    }
}

/// The shared state of the API. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    pub(crate) store: Arc<dyn Store>,
    /// Where a job's rows (items, rejections, trace, artifacts) are read: a
    /// read replica when one is configured, else `store`. Jobs themselves (their
    /// owner, status and counts) are always read from `store`, so a job just
    /// submitted or cancelled is seen at once; its rows may lag a replica's delay.
    pub(crate) reads: Arc<dyn Store>,
    pub(crate) events: Arc<dyn Events>,
    pub(crate) queue: Arc<dyn SliceQueue>,
    pub(crate) cache: Arc<dyn ContentCache>,
    pub(crate) prices: PriceTable,
    pub(crate) keys: Arc<KeyRing>,
    /// OAuth access tokens, when a resource URI and issuer are configured.
    pub(crate) oauth: Option<Arc<ResourceServer>>,
    pub(crate) body_limit: usize,
    /// The tool layer `/mcp` serves, when there is one.
    pub(crate) tools: Option<Arc<trawl_tools::ToolLayer>>,
    /// Where `/mcp` may be reached from.
    pub(crate) mcp: Arc<crate::mcp::McpConfig>,
    /// Who opened each MCP session.
    pub(crate) sessions: Arc<crate::mcp::SessionOwners>,
    /// Ends MCP sessions and streams when the server stops.
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    /// Slack interactions (`TRAWL_SLACK_SIGNING_SECRET`), when configured.
    pub(crate) slack: Option<Arc<crate::slack::SlackConfig>>,
    /// Request rates per caller (job submissions, `/mcp`).
    pub(crate) limiters: Arc<crate::limits::Limiters>,
    /// Where browse jobs' browsers may go: browse URLs written as addresses or
    /// names it refuses are refused at submission (422).
    pub(crate) browse_egress: Arc<trawl_core::egress::EgressPolicy>,
    /// Jobs that can have more slices are refused at submission (422).
    pub(crate) max_slices: u64,
    /// The `Host`s this server answers as and the origins that may change
    /// state ([`crate::site`]).
    pub(crate) site: Arc<crate::site::SiteConfig>,
    /// The tenants' limits, and their turns at submitting.
    pub(crate) quotas: Arc<trawl_scheduler::Quotas>,
}

impl fmt::Debug for ApiState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiState")
            .field("prices", &self.prices)
            .field("keys", &self.keys.len())
            .field("oauth", &self.oauth)
            .field("body_limit", &self.body_limit)
            .field("slack", &self.slack.is_some())
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// Request bodies larger than this are refused with 413 unless
    /// [`ApiState::with_body_limit`] says otherwise: 1 MiB.
    pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

    /// The API over these ports, with the default body limit. `prices` are the
    /// ones estimates are made with: the scheduler's. `auth` has no default on
    /// purpose: an open API is a choice, not an accident.
    pub fn new(
        store: Arc<dyn Store>,
        events: Arc<dyn Events>,
        queue: Arc<dyn SliceQueue>,
        cache: Arc<dyn ContentCache>,
        prices: PriceTable,
        auth: Auth,
    ) -> ApiState {
        ApiState {
            reads: store.clone(),
            store,
            events,
            queue,
            cache,
            prices,
            keys: Arc::new(KeyRing::new(auth)),
            oauth: None,
            body_limit: Self::DEFAULT_BODY_LIMIT,
            tools: None,
            mcp: Arc::new(crate::mcp::McpConfig::default()),
            sessions: Arc::default(),
            shutdown: tokio_util::sync::CancellationToken::new(),
            slack: None,
            limiters: Arc::default(),
            browse_egress: Arc::default(),
            max_slices: trawl_core::spec::DEFAULT_MAX_SLICES,
            site: Arc::default(),
            quotas: Arc::default(),
        }
    }

    /// What submissions are checked and priced with.
    pub(crate) fn submit_config(&self) -> trawl_scheduler::SubmitConfig {
        trawl_scheduler::SubmitConfig {
            prices: self.prices,
            max_slices: self.max_slices,
            egress: Some(self.browse_egress.clone()),
            quotas: self.quotas.clone(),
        }
    }

    /// The tenants' limits submissions are checked against
    /// ([`trawl_core::tenant`]); the default asks approval above $10.
    pub fn with_tenant_limits(mut self, limits: trawl_core::tenant::TenantLimits) -> ApiState {
        self.quotas = Arc::new(trawl_scheduler::Quotas::new(limits));
        self
    }

    /// Reads a job's rows from `reads` (`TRAWL_DATABASE_READ_URL`: a streaming
    /// replica of the store) instead of the store; see [`ApiState`]'s field.
    pub fn with_reads(mut self, reads: Arc<dyn Store>) -> ApiState {
        self.reads = reads;
        self
    }

    /// The `Host`s (besides loopback and the connection's own address) and
    /// browser origins (besides the server's own) accepted; see [`crate::site`].
    pub fn with_site(mut self, site: crate::site::SiteConfig) -> ApiState {
        self.site = Arc::new(site);
        self
    }

    /// Whether no credential is asked for (no API key, no OAuth): said at
    /// start-up and in `/readyz`.
    pub fn is_open(&self) -> bool {
        self.keys.keys.is_none() && self.oauth.is_none()
    }

    /// Jobs that can have more slices are refused (`TRAWL_MAX_SLICES`).
    pub fn with_max_slices(mut self, n: u64) -> ApiState {
        self.max_slices = n;
        self
    }

    /// The workers' browse egress policy (`TRAWL_BROWSE_ALLOW`), for early
    /// feedback on browse URLs; default: closed (public destinations only).
    pub fn with_browse_egress(mut self, policy: trawl_core::egress::EgressPolicy) -> ApiState {
        self.browse_egress = Arc::new(policy);
        self
    }

    /// Takes clicks on approval buttons from Slack at
    /// `/v1/integrations/slack/interactions`, checked with its signing secret.
    pub fn with_slack(mut self, config: crate::slack::SlackConfig) -> ApiState {
        self.slack = Some(Arc::new(config));
        self
    }

    /// Where `/mcp` may be reached from (hosts and browser origins), and its
    /// session limits. Call it before [`crate::router`]: the sessions start over.
    pub fn with_mcp(mut self, config: crate::mcp::McpConfig) -> ApiState {
        self.sessions = Arc::new(crate::mcp::SessionOwners::new(config.session_limits));
        self.mcp = Arc::new(config);
        self
    }

    /// The request rates allowed to each caller ([`crate::RateLimits::default`]
    /// unless this says otherwise).
    pub fn with_rate_limits(mut self, limits: crate::limits::RateLimits) -> ApiState {
        self.limiters = Arc::new(crate::limits::Limiters::new(limits));
        self
    }

    /// Ends `/mcp`'s sessions and streams when `token` is cancelled (give it the
    /// token `serve` stops on).
    pub fn with_shutdown(mut self, token: tokio_util::sync::CancellationToken) -> ApiState {
        self.shutdown = token;
        self
    }

    /// Accepts OAuth access tokens verified by `rs` too (API keys stay accepted).
    /// With a resource server the API is never open: `Auth::Open` then lets in
    /// tokens only.
    pub fn with_oauth(mut self, rs: Arc<ResourceServer>) -> ApiState {
        if self.keys.keys.is_none() {
            self.keys = Arc::new(KeyRing::new(Auth::Keys(Vec::new())));
        }
        self.oauth = Some(rs);
        self
    }

    /// Serves the tools of `layer` (tool search, upstream tools) on `/mcp`.
    pub fn with_tools(mut self, layer: Arc<trawl_tools::ToolLayer>) -> ApiState {
        self.tools = Some(layer);
        self
    }

    /// The resource server, if OAuth is configured.
    pub fn oauth(&self) -> Option<&Arc<ResourceServer>> {
        self.oauth.as_ref()
    }

    /// Who sent `headers`: an API key's holder, a token's subject, or anyone when
    /// the API is open.
    pub(crate) async fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let Some(rs) = &self.oauth else {
            return self.keys.authenticate(headers);
        };
        let token = bearer(headers)?;
        // A JWT has three parts; an API key has none of the dots.
        if token.bytes().filter(|b| *b == b'.').count() != 2 {
            return self.keys.authenticate(headers);
        }
        match rs.verify(token).await {
            Ok(p) => Ok(Caller {
                label: format!("sub:{}", p.subject),
                client: p.client_id,
                tenant: p.tenant,
                admin: p.scopes.contains(SCOPE_ADMIN),
                scopes: Some(p.scopes),
            }),
            Err(crate::oauth::TokenError::KeysUnavailable(why)) => {
                tracing::warn!(%why, "a token could not be verified");
                Err(ApiError::Unavailable(
                    trawl_core::ports::PortError::Unavailable(
                        "the authorization server's keys are unavailable".to_owned(),
                    ),
                ))
            }
            Err(e) => Err(ApiError::Unauthorized {
                presented: true,
                why: Some(e.to_string()),
            }),
        }
    }
    /// The largest request body accepted, in bytes.
    pub fn with_body_limit(mut self, bytes: usize) -> ApiState {
        self.body_limit = bytes;
        self
    }
}

/// Who made a request, as far as the API can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Caller {
    /// `api` under [`Auth::Open`]; `key:` and the name of a named key; `key-` and
    /// the first 8 hex digits of the sha256 of an unnamed key: stable when keys
    /// are added or reordered, and telling nothing useful about the key itself;
    /// `sub:` and the subject for an OAuth token. A job's owner, recorded as who
    /// decided an approval, and the scope of idempotency keys.
    pub label: String,
    /// The OAuth client of a token, when it names one.
    pub client: Option<String>,
    /// The caller's tenant (the configured tenant claim of its token): callers of
    /// one tenant share their jobs.
    pub tenant: Option<String>,
    /// The scopes of an OAuth token; `None` for an API key or an open API: every
    /// scope but [`SCOPE_ADMIN`] and [`SCOPE_DECIDE`], which go with `admin`.
    pub scopes: Option<BTreeSet<String>>,
    /// Sees every job and decides approvals: an admin key, a token with
    /// [`SCOPE_ADMIN`], or anyone on an open API.
    pub admin: bool,
}

impl Caller {
    /// The caller of an open API: one operator on loopback, who sees everything.
    pub(crate) fn open() -> Caller {
        Caller {
            label: "api".to_owned(),
            client: None,
            tenant: None,
            scopes: None,
            admin: true,
        }
    }

    /// Whether the caller holds `scope`.
    pub fn allows(&self, scope: &str) -> bool {
        if self.admin {
            return match &self.scopes {
                // An admin token still needs the route's own scope.
                Some(s) => scope == SCOPE_ADMIN || scope == SCOPE_DECIDE || s.contains(scope),
                None => true,
            };
        }
        match &self.scopes {
            Some(s) => s.contains(scope),
            None => scope != SCOPE_ADMIN && scope != SCOPE_DECIDE,
        }
    }

    /// Whether the caller may decide approvals: [`SCOPE_DECIDE`] or an admin.
    pub fn decides(&self) -> bool {
        self.allows(SCOPE_DECIDE)
    }

    /// The owner a job this caller submits records.
    pub fn owner(&self) -> JobOwner {
        JobOwner {
            caller: self.label.clone(),
            client: self.client.clone(),
            tenant: self.tenant.clone(),
        }
    }

    /// Whether the caller may read and cancel `job`: its owner, a caller of the
    /// owner's tenant, or an admin. A job without an owner (`trawl run`'s, or
    /// stored before owners were kept) is an admin's only.
    pub fn sees(&self, job: &JobRecord) -> bool {
        if self.admin {
            return true;
        }
        job.owner.as_ref().is_some_and(|o| {
            o.caller == self.label
                || o.tenant
                    .as_ref()
                    .is_some_and(|t| self.tenant.as_ref() == Some(t))
        })
    }
}

/// The bearer token of `headers`.
fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(ApiError::Unauthorized {
            presented: false,
            why: None,
        })?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::Unauthorized {
            presented: true,
            why: Some("the Authorization header is not `Bearer <token>`".to_owned()),
        })
}

/// Refuses a request that carries an access token in its query (`access_token`,
/// RFC 6750 §2.3, which OAuth 2.1 and MCP forbid).
pub(crate) fn refuse_query_token(uri: &axum::http::Uri) -> Result<(), ApiError> {
    let Some(q) = uri.query() else {
        return Ok(());
    };
    let named = q.split('&').any(|pair| {
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        name.eq_ignore_ascii_case("access_token") || name.eq_ignore_ascii_case("access%5Ftoken")
    });
    if named {
        Err(ApiError::TokenInQuery)
    } else {
        Ok(())
    }
}

/// The accepted keys, kept as sha256 digests: compared in constant time, and of one
/// length whatever the key's, so a comparison tells nothing about a key's length.
pub(crate) struct KeyRing {
    /// `None` for [`Auth::Open`]. Each key's digest, label, whether it is an
    /// admin key, and its group (its tenant).
    keys: Option<Vec<RingKey>>,
}

/// One key of a [`KeyRing`]: its digest, label, whether it is an admin key, and
/// its group (its tenant).
type RingKey = ([u8; 32], String, bool, Option<String>);

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl KeyRing {
    fn new(auth: Auth) -> KeyRing {
        let keys = match auth {
            Auth::Open => None,
            Auth::Keys(keys) => Some(
                keys.iter()
                    .map(|k| {
                        let d = sha256(k.secret.expose_secret().as_bytes());
                        let label = match &k.name {
                            Some(name) => format!("key:{name}"),
                            None => format!("key-{}", &hex::encode(d)[..8]),
                        };
                        let group = k
                            .name
                            .as_deref()
                            .and_then(|n| n.split_once('/'))
                            .map(|(g, _)| g.to_owned());
                        (d, label, k.admin, group)
                    })
                    .collect(),
            ),
        };
        KeyRing { keys }
    }

    fn len(&self) -> Option<usize> {
        self.keys.as_ref().map(Vec::len)
    }

    /// The caller a request's `Authorization` header names.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let Some(keys) = &self.keys else {
            return Ok(Caller::open());
        };
        let token = bearer(headers)?;
        let presented = sha256(token.as_bytes());
        // Every key is compared, matched or not, so the time taken does not tell
        // which one (or whether any) matched.
        let mut found = None;
        for (digest, label, admin, group) in keys {
            if bool::from(digest.ct_eq(&presented)) {
                found = Some((label, *admin, group));
            }
        }
        found
            .map(|(label, admin, group)| Caller {
                label: label.clone(),
                client: None,
                tenant: group.clone(),
                scopes: None,
                admin,
            })
            .ok_or(ApiError::Unauthorized {
                presented: true,
                why: None,
            })
    }
}

/// Middleware of the `/v1` routes: refuses callers without a valid credential or
/// without the route's scope (reads need `research:read`, everything else
/// `research:write`) and hands the others on with their [`Caller`] in the
/// request's extensions.
pub(crate) async fn require_key(
    State(state): State<ApiState>,
    mut req: Request,
    next: Next,
) -> Response {
    // The body is not `Sync`: what the check needs is copied out first.
    let (headers, safe) = (req.headers().clone(), req.method().is_safe());
    // Approvals are the approvers' (`approvals:decide`) as well as their
    // jobs' owners': an approver need neither read nor submit jobs. Who may
    // decide is the handler's check, which audits a refusal.
    let approvals = req.uri().path().starts_with("/v1/approvals");
    let query_refused = refuse_query_token(req.uri());
    let checked = async {
        query_refused?;
        let caller = state.authenticate(&headers).await?;
        let need = if safe { SCOPE_READ } else { SCOPE_WRITE };
        let need = if approvals && caller.allows(SCOPE_DECIDE) {
            SCOPE_DECIDE
        } else {
            need
        };
        if !caller.allows(need) {
            return Err(ApiError::InsufficientScope(need));
        }
        Ok(caller)
    }
    .await;
    match checked {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => state.challenge(e),
    }
}

/// Middleware of the operations routes on the API's port (`/metrics`): only
/// an admin (an admin key, a token with `research:admin`, an open API's one
/// operator).
pub(crate) async fn require_admin(
    State(state): State<ApiState>,
    req: Request,
    next: Next,
) -> Response {
    // The body is not `Sync`: the headers are looked at from a copy.
    let (headers, query) = (req.headers().clone(), refuse_query_token(req.uri()));
    let checked = async {
        query?;
        let caller = state.authenticate(&headers).await?;
        if !caller.admin || !caller.allows(SCOPE_ADMIN) {
            return Err(ApiError::InsufficientScope(SCOPE_ADMIN));
        }
        Ok(())
    }
    .await;
    match checked {
        Ok(()) => next.run(req).await,
        Err(e) => state.challenge(e),
    }
}

impl ApiState {
    /// The answer to a refused request: the error's problem+json, and, when OAuth
    /// is configured, `resource_metadata` in its `WWW-Authenticate` challenge so a
    /// client can find the authorization server (RFC 9728 §5.1).
    pub(crate) fn challenge(&self, e: ApiError) -> Response {
        use axum::response::IntoResponse;
        let mut res = e.into_response();
        if let Some(rs) = &self.oauth
            && let Some(v) = res.headers().get(header::WWW_AUTHENTICATE)
            && let Ok(v) = v.to_str()
            && let Ok(v) = axum::http::HeaderValue::from_str(&format!(
                r#"{v}, resource_metadata="{}""#,
                rs.metadata_url()
            ))
        {
            res.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    #[test]
    fn keys_are_checked_and_labelled() {
        let ring = KeyRing::new(Auth::Keys(vec![
            SecretString::from("alpha-key".to_owned()).into(),
            SecretString::from("beta-key".to_owned()).into(),
        ]));
        let a = ring.authenticate(&headers("Bearer alpha-key")).unwrap();
        let b = ring.authenticate(&headers("bearer beta-key")).unwrap();
        assert!(a.label.starts_with("key-") && a.label.len() == 12);
        assert_ne!(a, b);
        assert!(matches!(
            ring.authenticate(&headers("Bearer alpha")),
            Err(ApiError::Unauthorized {
                presented: true,
                ..
            })
        ));
        assert!(matches!(
            ring.authenticate(&headers("Basic YWxwaGEta2V5")),
            Err(ApiError::Unauthorized {
                presented: true,
                why: Some(_)
            })
        ));
        assert!(matches!(
            ring.authenticate(&HeaderMap::new()),
            Err(ApiError::Unauthorized {
                presented: false,
                ..
            })
        ));
    }

    #[test]
    fn no_keys_lets_no_one_in_and_open_lets_everyone() {
        let none = KeyRing::new(Auth::Keys(Vec::new()));
        assert!(none.authenticate(&headers("Bearer x")).is_err());
        let open = KeyRing::new(Auth::Open);
        assert_eq!(open.authenticate(&HeaderMap::new()).unwrap().label, "api");
    }

    fn job_of(owner: Option<(&str, Option<&str>)>) -> JobRecord {
        JobRecord {
            id: trawl_core::model::JobId::generate(1_700_000_000_000, 1),
            name: "j".into(),
            spec: serde_json::Value::Null,
            status: trawl_core::model::JobStatus::Pending,
            reason: None,
            estimate: trawl_core::cost::Micros(0),
            created_ms: 0,
            idempotency: None,
            traceparent: None,
            owner: owner.map(|(caller, tenant)| JobOwner {
                caller: caller.into(),
                client: None,
                tenant: tenant.map(str::to_owned),
            }),
            retention_ms: None,
            slices_max: 0,
            approve_above: None,
        }
    }

    fn token_caller(sub: &str, tenant: Option<&str>, scopes: &[&str]) -> Caller {
        let scopes: BTreeSet<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        Caller {
            label: format!("sub:{sub}"),
            client: Some("app".into()),
            tenant: tenant.map(str::to_owned),
            admin: scopes.contains(SCOPE_ADMIN),
            scopes: Some(scopes),
        }
    }

    #[test]
    fn a_job_is_seen_by_its_owner_its_tenant_and_admins_only() {
        let ann = token_caller("ann", Some("acme"), &[SCOPE_READ]);
        let abe = token_caller("abe", Some("acme"), &[SCOPE_READ]);
        let zed = token_caller("zed", Some("zeta"), &[SCOPE_READ]);
        let lone = token_caller("lone", None, &[SCOPE_READ]);
        let root = token_caller("root", None, &[SCOPE_READ, SCOPE_ADMIN]);
        let anns = job_of(Some(("sub:ann", Some("acme"))));
        assert!(ann.sees(&anns) && abe.sees(&anns) && root.sees(&anns));
        assert!(!zed.sees(&anns) && !lone.sees(&anns));
        // Without a tenant, only the owner; two callers without one share nothing.
        let lones = job_of(Some(("sub:lone", None)));
        assert!(lone.sees(&lones) && root.sees(&lones));
        assert!(!ann.sees(&lones) && !token_caller("other", None, &[]).sees(&lones));
        // No owner: admins only; the open API's caller is one.
        let orphan = job_of(None);
        assert!(!ann.sees(&orphan) && root.sees(&orphan) && Caller::open().sees(&orphan));
        // A key's label is its owner.
        let ring = KeyRing::new(Auth::Keys(vec![
            ApiKey::parse("alice:alice-secret").unwrap(),
            ApiKey::parse("ops:ops-secret-1").unwrap().admin(),
        ]));
        let alice = ring.authenticate(&headers("Bearer alice-secret")).unwrap();
        let ops = ring.authenticate(&headers("Bearer ops-secret-1")).unwrap();
        assert_eq!(alice.label, "key:alice");
        let alices = job_of(Some(("key:alice", None)));
        assert!(alice.sees(&alices) && ops.sees(&alices) && !alice.sees(&anns));
    }

    #[test]
    fn admin_and_decide_go_with_admin_keys_and_their_scopes_only() {
        let ring = KeyRing::new(Auth::Keys(vec![
            ApiKey::parse("alice:alice-secret").unwrap(),
            ApiKey::parse("ops:ops-secret-1").unwrap().admin(),
        ]));
        let alice = ring.authenticate(&headers("Bearer alice-secret")).unwrap();
        let ops = ring.authenticate(&headers("Bearer ops-secret-1")).unwrap();
        for s in [SCOPE_READ, SCOPE_WRITE, crate::oauth::SCOPE_TOOLS] {
            assert!(alice.allows(s) && ops.allows(s), "{s}");
        }
        assert!(!alice.allows(SCOPE_ADMIN) && !alice.decides());
        assert!(ops.allows(SCOPE_ADMIN) && ops.decides() && ops.admin);
        // Tokens: what they carry, and an admin token still needs the route's scope.
        let approver = token_caller("amy", None, &[SCOPE_READ, SCOPE_DECIDE]);
        assert!(approver.decides() && !approver.admin && !approver.allows(SCOPE_WRITE));
        let root = token_caller("root", None, &[SCOPE_READ, SCOPE_ADMIN]);
        assert!(root.decides() && root.allows(SCOPE_READ) && !root.allows(SCOPE_WRITE));
    }

    #[test]
    fn debug_never_shows_a_key() {
        let auth = Auth::Keys(vec![
            SecretString::from("hunter2".to_owned()).into(),
            ApiKey::parse("ops:hunter3-long").unwrap().admin(),
        ]);
        assert!(!format!("{auth:?}").contains("hunter"));
        assert!(!format!("{:?}", ApiKey::parse("ops:hunter3-long").unwrap()).contains("hunter"));
    }
}
