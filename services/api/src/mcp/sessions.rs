//! MCP sessions and their owners: a session id is not a credential; the session
//! limits, and the JSON-RPC ids in flight in each session.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};

use crate::state::ApiState;

use super::*;

/// Sessions and the caller that opened each: a session id is not a credential,
/// and a request that names another caller's session is answered as if the
/// session did not exist. Also the one place that enforces [`SessionLimits`]
/// (with rmcp's session manager, which it holds, so a session it closes is
/// closed there too) and knows the JSON-RPC ids in flight in each session.
pub(crate) struct SessionOwners {
    /// rmcp's sessions: the transport and handler of each.
    pub(crate) manager: Arc<LocalSessionManager>,
    pub(super) limits: SessionLimits,
    pub(super) inner: Mutex<Sessions>,
}

#[derive(Default)]
pub(super) struct Sessions {
    pub(super) by_id: HashMap<String, Session>,
    /// Sessions of each caller, counting those being opened.
    pub(super) per_caller: HashMap<String, usize>,
    /// Sessions being opened (an `initialize` admitted, not answered yet).
    pub(super) opening: usize,
    /// When the whole table was last checked against rmcp's.
    pub(super) swept: Option<Instant>,
}

pub(super) struct Session {
    pub(super) owner: String,
    pub(super) seen: Instant,
    /// The JSON-RPC ids (as JSON text) of the requests in flight.
    pub(super) in_flight: HashSet<String>,
}

/// Why an `initialize` is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `total` sessions are open: come back when one may have expired.
    Full { retry_after: u64 },
    /// The caller holds `per_caller` sessions and every one has a request in
    /// flight.
    CallerBusy { retry_after: u64 },
}

/// Why a request may not start in a session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotStarted {
    /// A request with this id is in flight in the session.
    Duplicate(String),
    /// [`MAX_IN_FLIGHT`] requests are.
    TooMany,
}

/// The whole table is checked against rmcp's at most this often.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl Default for SessionOwners {
    fn default() -> SessionOwners {
        SessionOwners::new(SessionLimits::default())
    }
}

impl SessionOwners {
    pub(crate) fn new(limits: SessionLimits) -> SessionOwners {
        let mut config = SessionConfig::default();
        config.keep_alive = Some(limits.idle);
        let mut manager = LocalSessionManager::default();
        manager.session_config = config;
        SessionOwners {
            manager: Arc::new(manager),
            limits,
            inner: Mutex::new(Sessions::default()),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn owner_matches(&self, session: &str, label: &str) -> bool {
        let mut g = self.lock();
        match g.by_id.get_mut(session) {
            Some(s) if s.owner == label => {
                s.seen = Instant::now();
                true
            }
            Some(_) => false,
            // Unknown here: rmcp answers 404 for it.
            None => true,
        }
    }

    /// Room for one more session of `label`: given at once when there is
    /// some; otherwise after forgetting the sessions rmcp no longer has, and
    /// closing the caller's least recently used idle one (see [`SessionLimits`]).
    pub(crate) async fn admit(self: &Arc<Self>, label: &str) -> Result<Opening, Refusal> {
        if let Some(o) = self.try_reserve(label) {
            return Ok(o);
        }
        let sweep_all = {
            let mut g = self.lock();
            let due = g.swept.is_none_or(|t| t.elapsed() >= SWEEP_EVERY);
            if due && g.by_id.len() + g.opening >= self.limits.total {
                g.swept = Some(Instant::now());
                true
            } else {
                false
            }
        };
        self.forget_closed(if sweep_all { None } else { Some(label) })
            .await;
        if let Some(o) = self.try_reserve(label) {
            return Ok(o);
        }
        let victim = {
            let mut g = self.lock();
            if g.by_id.len() + g.opening >= self.limits.total {
                let oldest = g.by_id.values().map(|s| s.seen).min();
                let wait = oldest.map_or(self.limits.idle, |t| {
                    self.limits.idle.saturating_sub(t.elapsed())
                });
                return Err(Refusal::Full {
                    retry_after: crate::limits::retry_after(wait.min(Duration::from_secs(60))),
                });
            }
            let victim = g
                .by_id
                .iter()
                .filter(|(_, s)| s.owner == label && s.in_flight.is_empty())
                .min_by_key(|(_, s)| s.seen)
                .map(|(id, _)| id.clone());
            let Some(victim) = victim else {
                return Err(Refusal::CallerBusy { retry_after: 1 });
            };
            g.by_id.remove(&victim);
            // The caller's count stays: the victim's place goes to the new one.
            g.opening += 1;
            victim
        };
        tracing::info!(caller = label, session = %victim, "MCP session limit of the caller reached; its least recently used session is closed");
        if let Err(e) = self.manager.close_session(&victim.clone().into()).await {
            tracing::warn!(error = %e, session = %victim, "closing an evicted MCP session");
        }
        Ok(Opening {
            owners: self.clone(),
            label: label.to_owned(),
            done: false,
        })
    }

    pub(super) fn try_reserve(self: &Arc<Self>, label: &str) -> Option<Opening> {
        let mut g = self.lock();
        let mine = g.per_caller.get(label).copied().unwrap_or(0);
        if mine >= self.limits.per_caller || g.by_id.len() + g.opening >= self.limits.total {
            return None;
        }
        *g.per_caller.entry(label.to_owned()).or_insert(0) += 1;
        g.opening += 1;
        Some(Opening {
            owners: self.clone(),
            label: label.to_owned(),
            done: false,
        })
    }

    /// Forgets the sessions (of `label`, or all) that rmcp has closed (idle,
    /// deleted, failed), and closes in rmcp those idle past the limit here.
    pub(super) async fn forget_closed(&self, label: Option<&str>) {
        let mine: Vec<String> = {
            let g = self.lock();
            g.by_id
                .iter()
                .filter(|(_, s)| label.is_none_or(|l| s.owner == l))
                .map(|(id, _)| id.clone())
                .collect()
        };
        let (closed, expired): (Vec<String>, Vec<String>) = {
            let live = self.manager.sessions.read().await;
            let g = self.lock();
            let closed = mine
                .iter()
                .filter(|id| !live.contains_key(id.as_str()))
                .cloned()
                .collect();
            let expired = mine
                .iter()
                .filter(|id| {
                    g.by_id.get(id.as_str()).is_some_and(|s| {
                        s.in_flight.is_empty() && s.seen.elapsed() >= self.limits.idle
                    })
                })
                .cloned()
                .collect();
            (closed, expired)
        };
        for id in closed.iter().chain(&expired) {
            self.forget(id);
        }
        for id in expired {
            let _ = self.manager.close_session(&id.into()).await;
        }
    }

    /// Whether rmcp has `session` open: a session it never issued, or one
    /// already deleted, closed or expired, is not.
    pub(crate) async fn is_open(&self, session: &str) -> bool {
        self.manager.sessions.read().await.contains_key(session)
    }

    /// Forgets `session` (deleted, closed, expired).
    pub(crate) fn forget(&self, session: &str) {
        let mut g = self.lock();
        if let Some(s) = g.by_id.remove(session) {
            release(&mut g.per_caller, &s.owner);
        }
    }

    /// Marks the request `id` in flight in `session` until the returned guard
    /// is dropped. `None` for a session not known here (rmcp answers 404).
    pub(crate) fn start(
        self: &Arc<Self>,
        session: &str,
        id: &str,
    ) -> Result<Option<InFlight>, NotStarted> {
        let mut g = self.lock();
        let Some(s) = g.by_id.get_mut(session) else {
            return Ok(None);
        };
        if s.in_flight.contains(id) {
            return Err(NotStarted::Duplicate(id.to_owned()));
        }
        if s.in_flight.len() >= MAX_IN_FLIGHT {
            return Err(NotStarted::TooMany);
        }
        s.in_flight.insert(id.to_owned());
        Ok(Some(InFlight {
            owners: self.clone(),
            session: session.to_owned(),
            id: id.to_owned(),
        }))
    }

    /// Sessions known here (open, and being opened).
    pub(crate) fn owned(&self) -> usize {
        let g = self.lock();
        g.by_id.len() + g.opening
    }
}

pub(super) fn release(per_caller: &mut HashMap<String, usize>, label: &str) {
    if let Some(n) = per_caller.get_mut(label) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            per_caller.remove(label);
        }
    }
}

/// A session being opened: counted against the limits until it is recorded
/// with [`Opening::opened`] or dropped (the `initialize` failed).
pub(crate) struct Opening {
    pub(super) owners: Arc<SessionOwners>,
    pub(super) label: String,
    pub(super) done: bool,
}

impl Opening {
    /// rmcp answered the `initialize` with `session`.
    pub(crate) fn opened(mut self, session: &str) {
        let mut g = self.owners.lock();
        g.opening = g.opening.saturating_sub(1);
        let old = g.by_id.insert(
            session.to_owned(),
            Session {
                owner: self.label.clone(),
                seen: Instant::now(),
                in_flight: HashSet::new(),
            },
        );
        if let Some(old) = old {
            // A session id rmcp gave twice: never, but the count stays right.
            release(&mut g.per_caller, &old.owner);
        }
        self.done = true;
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if !self.done {
            let mut g = self.owners.lock();
            g.opening = g.opening.saturating_sub(1);
            release(&mut g.per_caller, &self.label);
        }
    }
}

/// A request in flight in a session; dropped when its answer has been sent
/// (or given up).
pub(crate) struct InFlight {
    pub(super) owners: Arc<SessionOwners>,
    pub(super) session: String,
    pub(super) id: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut g = self.owners.lock();
        if let Some(s) = g.by_id.get_mut(&self.session) {
            s.in_flight.remove(&self.id);
            s.seen = Instant::now();
        }
    }
}

/// How many MCP sessions there are, for operators and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpSessions {
    /// Sessions rmcp holds (each with its handler and buffers).
    pub live: usize,
    /// Sessions the guard knows an owner of, and those being opened.
    pub owned: usize,
}

impl ApiState {
    /// How many MCP sessions there are now.
    pub async fn mcp_sessions(&self) -> McpSessions {
        McpSessions {
            live: self.sessions.manager.sessions.read().await.len(),
            owned: self.sessions.owned(),
        }
    }
}
