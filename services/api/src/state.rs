//! What every handler shares: the ports, the price table, the keys and the limits.

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
use trawl_core::ports::{ContentCache, Events, SliceQueue, Store};

use crate::error::ApiError;

/// Who may call the `/v1` routes.
pub enum Auth {
    /// Everyone. For `trawl dev` on a loopback address only.
    Open,
    /// Callers that send one of these keys as `Authorization: Bearer <key>`. An
    /// empty list lets no one in.
    Keys(Vec<SecretString>),
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
    pub(crate) events: Arc<dyn Events>,
    pub(crate) queue: Arc<dyn SliceQueue>,
    pub(crate) cache: Arc<dyn ContentCache>,
    pub(crate) prices: PriceTable,
    pub(crate) keys: Arc<KeyRing>,
    pub(crate) body_limit: usize,
}

impl fmt::Debug for ApiState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiState")
            .field("prices", &self.prices)
            .field("keys", &self.keys.len())
            .field("body_limit", &self.body_limit)
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
            store,
            events,
            queue,
            cache,
            prices,
            keys: Arc::new(KeyRing::new(auth)),
            body_limit: Self::DEFAULT_BODY_LIMIT,
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
    /// `api` under [`Auth::Open`]; `key-` and the first 8 hex digits of the sha256
    /// of the key otherwise: stable when keys are added or reordered, and telling
    /// nothing useful about the key itself. Recorded as who decided an approval,
    /// and scopes idempotency keys, so two callers never see each other's jobs.
    pub label: String,
}

/// The accepted keys, kept as sha256 digests: compared in constant time, and of one
/// length whatever the key's, so a comparison tells nothing about a key's length.
pub(crate) struct KeyRing {
    /// `None` for [`Auth::Open`].
    keys: Option<Vec<([u8; 32], String)>>,
}

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
                        let d = sha256(k.expose_secret().as_bytes());
                        let label = format!("key-{}", &hex::encode(d)[..8]);
                        (d, label)
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
            return Ok(Caller {
                label: "api".to_owned(),
            });
        };
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized { presented: false })?;
        let presented = sha256(token.as_bytes());
        // Every key is compared, matched or not, so the time taken does not tell
        // which one (or whether any) matched.
        let mut found = None;
        for (digest, label) in keys {
            if bool::from(digest.ct_eq(&presented)) {
                found = Some(label);
            }
        }
        found
            .map(|label| Caller {
                label: label.clone(),
            })
            .ok_or(ApiError::Unauthorized { presented: true })
    }
}

/// Middleware of the `/v1` routes: refuses callers without a valid key and hands
/// the others on with their [`Caller`] in the request's extensions.
pub(crate) async fn require_key(
    State(state): State<ApiState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let caller = state.keys.authenticate(req.headers())?;
    req.extensions_mut().insert(caller);
    Ok(next.run(req).await)
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
            SecretString::from("alpha-key"),
            SecretString::from("beta-key"),
        ]));
        let a = ring.authenticate(&headers("Bearer alpha-key")).unwrap();
        let b = ring.authenticate(&headers("bearer beta-key")).unwrap();
        assert!(a.label.starts_with("key-") && a.label.len() == 12);
        assert_ne!(a, b);
        assert!(matches!(
            ring.authenticate(&headers("Bearer alpha")),
            Err(ApiError::Unauthorized { presented: true })
        ));
        assert!(matches!(
            ring.authenticate(&headers("Basic YWxwaGEta2V5")),
            Err(ApiError::Unauthorized { presented: false })
        ));
        assert!(matches!(
            ring.authenticate(&HeaderMap::new()),
            Err(ApiError::Unauthorized { presented: false })
        ));
    }

    #[test]
    fn no_keys_lets_no_one_in_and_open_lets_everyone() {
        let none = KeyRing::new(Auth::Keys(Vec::new()));
        assert!(none.authenticate(&headers("Bearer x")).is_err());
        let open = KeyRing::new(Auth::Open);
        assert_eq!(open.authenticate(&HeaderMap::new()).unwrap().label, "api");
    }

    #[test]
    fn debug_never_shows_a_key() {
        let auth = Auth::Keys(vec![SecretString::from("hunter2")]);
        assert!(!format!("{auth:?}").contains("hunter2"));
    }
}
