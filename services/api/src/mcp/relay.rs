//! Requests an upstream sends during a call (sampling, elicitation, roots), relayed
//! to the calling client: on its session (2025-11-25), or parked under a sealed
//! handle the client answers by retrying its call (2026-07-28, SEP-2322); and the
//! handles of upstream tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::CallToolResponse;
// Logging: deprecated by 2026-07-28 (SEP-2577), part of 2025-11-25.
#[allow(deprecated)]
use rmcp::model::LoggingLevel;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

/// How long a client gets to answer a sampling or elicitation request that an
/// upstream sent during a call. The call's own upstream timeout usually ends
/// it first.
pub(super) const FORWARDED_TIMEOUT: Duration = Duration::from_secs(120);

/// Whether the request speaks 2026-07-28 or later (stateless, `_meta` per request).
pub(super) fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|v| v.to_string().as_str() >= "2026-07-28")
}

/// An upstream tool call of a `/mcp` client, running in a task of its own
/// (aborted when dropped: its upstream session is then closed), with what its
/// upstream sends meanwhile.
pub(super) struct Running {
    pub(super) task: tokio_util::task::AbortOnDropHandle<Result<CallToolResponse, ErrorData>>,
    pub(super) rx: tokio::sync::mpsc::Receiver<trawl_tools::forward::Forwarded>,
    pub(super) tool: String,
    pub(super) caller: String,
}

/// What a parked call waits for: the answer to its upstream's request.
#[allow(deprecated)] // Sampling: deprecated by 2026-07-28, part of 2025-11-25.
pub(super) enum Awaited {
    Sampling(
        rmcp::model::CreateMessageRequestParams,
        tokio::sync::oneshot::Sender<Result<rmcp::model::CreateMessageResult, ErrorData>>,
    ),
    Elicitation(
        rmcp::model::ElicitRequestParams,
        tokio::sync::oneshot::Sender<Result<rmcp::model::ElicitResult, ErrorData>>,
    ),
    Roots(tokio::sync::oneshot::Sender<Result<rmcp::model::ListRootsResult, ErrorData>>),
}

/// The key of the one input request of an `InputRequiredResult`.
pub(super) const INPUT_KEY: &str = "upstream";

/// Calls whose upstream asked for input that a 2026-07-28 client gives by
/// retrying its `tools/call` (SEP-2322: `InputRequiredResult`, then
/// `inputResponses` with the echoed `requestState`). The call keeps running
/// (its upstream session held, its timeout running) while it waits here; the
/// `requestState` is a random handle to it, honoured only for the caller that
/// started the call and the same tool. A call not resumed within
/// [`FORWARDED_TIMEOUT`] is dropped (its upstream gets no answer, its session
/// is closed). Kept in this process: a client behind a load balancer needs
/// affinity for its retry.
#[derive(Clone)]
pub(super) struct Parked {
    pub(super) calls: Arc<Mutex<HashMap<String, Waiting>>>,
    /// Seals the `requestState` of relayed calls (see [`Parked::relay_out`]).
    pub(super) sealer: Arc<rmcp::model::RequestStateCodec>,
}

impl Default for Parked {
    fn default() -> Parked {
        use ring::rand::SecureRandom as _;
        let mut key = [0u8; 32];
        if ring::rand::SystemRandom::new().fill(&mut key).is_err() {
            tracing::error!("no system randomness: requestState keys are weaker");
            for chunk in key.chunks_mut(8) {
                chunk.copy_from_slice(&fastrand::u64(..).to_le_bytes());
            }
        }
        let sealer = match rmcp::model::RequestStateCodec::try_new(key.to_vec()) {
            Ok(s) => s,
            Err(_) => unreachable!("the codec refuses only keys shorter than 32 bytes"),
        };
        Parked {
            calls: Arc::default(),
            sealer: Arc::new(sealer),
        }
    }
}

/// 128 bits from the system's random source, as hex: a parked call's handle.
pub(super) fn random_handle() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        tracing::error!("no system randomness: a parked call's handle is weaker");
        bytes[..8].copy_from_slice(&fastrand::u64(..).to_le_bytes());
        bytes[8..].copy_from_slice(&fastrand::u64(..).to_le_bytes());
    }
    hex::encode(bytes)
}

/// What a relayed call's sealed `requestState` is bound to: the caller and the
/// tool (lengths first, so that no two pairs read the same).
pub(super) fn binding(tool: &str, caller: &str) -> Vec<u8> {
    format!("{}:{}:{caller}{tool}", caller.len(), tool.len()).into_bytes()
}

/// The `_meta` of a relayed call upstream: the client's protocol version,
/// declared capabilities, name and log level, nothing else of its request (its
/// progress token is the gateway's to map). Each upstream then takes out what
/// it is not given (`Upstream::relayed_meta`).
pub(super) fn relayed_meta(context: &RequestContext<RoleServer>) -> rmcp::model::RequestMetaObject {
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.set_protocol_version(
        context
            .meta
            .protocol_version()
            .unwrap_or(rmcp::model::ProtocolVersion::V_2026_07_28),
    );
    meta.set_client_capabilities(context.client_capabilities().unwrap_or_default());
    if let Some(info) = context.meta.client_info() {
        meta.set_client_info(info);
    }
    if let Some(level) = context.meta.log_level() {
        meta.set_log_level(level);
    }
    meta
}

/// What a task handle is bound to besides its caller (a name no tool has).
pub(super) const TASK_BINDING: &str = "tasks/";

/// The longest a task handle is good for.
pub(super) const TASK_HANDLE_TTL: Duration = Duration::from_secs(24 * 3600);

/// A parked call: since when, the call, what it waits for.
pub(super) type Waiting = (Instant, Running, Awaited);

impl Parked {
    pub(super) fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A relayed call's upstream `InputRequiredResult` as its client gets it:
    /// the upstream's own `requestState` sealed (HMAC) with the caller and the
    /// tool, so that no other caller and no other tool can retry with it, and
    /// good for [`FORWARDED_TIMEOUT`]. Nothing is kept here between rounds.
    pub(super) fn relay_out(
        &self,
        mut r: rmcp::model::InputRequiredResult,
        tool: &str,
        caller: &str,
    ) -> rmcp::model::InputRequiredResult {
        let payload = match &r.request_state {
            Some(s) => format!("1{s}"),
            None => "0".to_owned(),
        };
        let bound = binding(tool, caller);
        let options = rmcp::model::SealOptions::new()
            .associated_data(&bound)
            .ttl(FORWARDED_TIMEOUT);
        r.request_state = Some(self.sealer.seal_with(payload.as_bytes(), &options));
        r
    }

    /// The upstream's `requestState` in a state [`Self::relay_out`] sealed for
    /// this caller and tool (`Some(None)`: the upstream gave none); `None`: not
    /// such a state (another's, expired, tampered with, or a parked call's).
    #[allow(clippy::option_option)]
    pub(super) fn relay_in(&self, state: &str, tool: &str, caller: &str) -> Option<Option<String>> {
        let opened = self.sealer.open_with(state, &binding(tool, caller)).ok()?;
        let text = String::from_utf8(opened).ok()?;
        match text.split_at_checked(1)? {
            ("1", upstream) => Some(Some(upstream.to_owned())),
            ("0", "") => Some(None),
            _ => None,
        }
    }

    /// An upstream task's id as its client gets it: the tool and the
    /// upstream's own id, sealed (HMAC; signed, not encrypted) with the
    /// caller, so that no other caller can get, answer or cancel the task,
    /// and good for the task's `ttlMs` (a day when the upstream sets none).
    /// Nothing is kept here: the upstream keeps the task.
    pub(super) fn task_out(&self, task: &mut rmcp::model::Task, tool: &str, caller: &str) {
        let ttl = task
            .ttl_ms
            .map_or(TASK_HANDLE_TTL, Duration::from_millis)
            .min(TASK_HANDLE_TTL);
        let bound = binding(TASK_BINDING, caller);
        let options = rmcp::model::SealOptions::new()
            .associated_data(&bound)
            .ttl(ttl);
        let payload = format!("{tool}\n{}", task.task_id);
        task.task_id = self.sealer.seal_with(payload.as_bytes(), &options);
    }

    /// The tool and the upstream's task id in a handle [`Self::task_out`]
    /// sealed for this caller; an error for any other (unknown, another
    /// caller's, expired, tampered with), as for an unknown task.
    pub(super) fn task_in(
        &self,
        handle: &str,
        caller: &str,
    ) -> Result<(String, String), ErrorData> {
        let unknown = || {
            ErrorData::invalid_params(
                format!("no task {handle} of this caller (unknown, expired or tampered with)"),
                None,
            )
        };
        let opened = self
            .sealer
            .open_with(handle, &binding(TASK_BINDING, caller))
            .map_err(|_| unknown())?;
        let text = String::from_utf8(opened).map_err(|_| unknown())?;
        let (tool, id) = text.split_once('\n').ok_or_else(unknown)?;
        Ok((tool.to_owned(), id.to_owned()))
    }

    /// Parks `running` until its client answers `awaited`: the client's
    /// `InputRequiredResult`.
    #[allow(deprecated)] // Sampling: deprecated by 2026-07-28, part of 2025-11-25.
    pub(super) fn park(&self, running: Running, awaited: Awaited) -> CallToolResponse {
        use rmcp::model::{CreateMessageRequest, ElicitRequest, InputRequest};
        let request = match &awaited {
            Awaited::Sampling(params, _) => {
                InputRequest::CreateMessage(CreateMessageRequest::new(params.clone()))
            }
            Awaited::Elicitation(params, _) => {
                InputRequest::Elicitation(ElicitRequest::new(params.clone()))
            }
            Awaited::Roots(_) => InputRequest::ListRoots(rmcp::model::ListRootsRequest::default()),
        };
        let handle = random_handle();
        let mut calls = self.calls();
        calls.retain(|_, (at, ..)| at.elapsed() < FORWARDED_TIMEOUT);
        calls.insert(handle.clone(), (Instant::now(), running, awaited));
        let requests = std::iter::once((INPUT_KEY.to_owned(), request)).collect();
        CallToolResponse::InputRequired(rmcp::model::InputRequiredResult::new(
            Some(requests),
            Some(handle),
        ))
    }

    /// The parked call `handle` names, with the client's answer delivered to
    /// its upstream (`Ok(Ok)`), or, when the retry carries no answer, the call
    /// and what it still waits for, to be asked again (`Ok(Err)`, SEP-2322:
    /// re-request what is missing); an error (and the call left parked) for a
    /// handle that is unknown, expired or another caller's or tool's, or for an
    /// answer of the wrong shape.
    pub(super) fn resume(
        &self,
        handle: &str,
        tool: &str,
        caller: &str,
        responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<Result<Running, (Running, Awaited)>, ErrorData> {
        let mut calls = self.calls();
        calls.retain(|_, (at, ..)| at.elapsed() < FORWARDED_TIMEOUT);
        let unknown = || {
            ErrorData::invalid_params(
                "requestState names no call waiting for input (unknown, expired, or not this \
                 caller's or this tool's)",
                None,
            )
        };
        let Some((at, running, awaited)) = calls.remove(handle) else {
            return Err(unknown());
        };
        if running.caller != caller || running.tool != tool {
            calls.insert(handle.to_owned(), (at, running, awaited));
            return Err(unknown());
        }
        let answer = responses.and_then(|r| r.get(INPUT_KEY)).cloned();
        let bad = |what: &str, e: String| {
            ErrorData::invalid_params(
                format!("inputResponses.{INPUT_KEY} is not {what}: {e}"),
                None,
            )
        };
        let delivered = match (answer, awaited) {
            (None, awaited) => return Ok(Err((running, awaited))),
            (Some(v), Awaited::Sampling(params, reply)) => match serde_json::from_value(v) {
                Ok(result) => {
                    let _ = reply.send(Ok(result));
                    Ok(())
                }
                Err(e) => Err((
                    bad("a sampling result", e.to_string()),
                    Awaited::Sampling(params, reply),
                )),
            },
            (Some(v), Awaited::Elicitation(params, reply)) => match serde_json::from_value(v) {
                Ok(result) => {
                    let _ = reply.send(Ok(result));
                    Ok(())
                }
                Err(e) => Err((
                    bad("an elicitation result", e.to_string()),
                    Awaited::Elicitation(params, reply),
                )),
            },
            (Some(v), Awaited::Roots(reply)) => match serde_json::from_value(v) {
                Ok(result) => {
                    let _ = reply.send(Ok(result));
                    Ok(())
                }
                Err(e) => Err((bad("a roots result", e.to_string()), Awaited::Roots(reply))),
            },
        };
        match delivered {
            Ok(()) => Ok(Ok(running)),
            Err((error, awaited)) => {
                calls.insert(handle.to_owned(), (at, running, awaited));
                Err(error)
            }
        }
    }
}

/// Calls `tell` for every change to the listed tools from now on, until `stop`
/// ends, the layer goes, or `tell` fails (the client is gone).
pub(super) async fn tell_listing_changes<F: Future<Output = bool>>(
    mut changes: tokio::sync::watch::Receiver<Vec<(String, String)>>,
    stop: impl Future<Output = ()>,
    mut tell: impl FnMut() -> F,
) {
    changes.mark_unchanged();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            changed = changes.changed() => {
                if changed.is_err() || !tell().await {
                    return;
                }
            }
        }
    }
}

/// Passes a forwarded progress (with the client's own token, when it gave one)
/// or log notification (when its level is at least `logs`; none when `None`)
/// on to the client of the call. A request cannot be pending once the call has
/// answered; one that is gets dropped, which its upstream sees as no answer.
#[allow(deprecated)] // Logging: deprecated by 2026-07-28, part of 2025-11-25.
pub(super) async fn notify(
    context: &RequestContext<RoleServer>,
    token: Option<&rmcp::model::ProgressToken>,
    logs: Option<LoggingLevel>,
    msg: trawl_tools::forward::Forwarded,
) {
    use trawl_tools::forward::Forwarded;
    match msg {
        Forwarded::Progress(mut p) => {
            if let Some(t) = token {
                p.progress_token = t.clone();
                let _ = context.peer.notify_progress(p).await;
            }
        }
        Forwarded::Log(p) => {
            if logs.is_some_and(|least| p.level as u8 >= least as u8) {
                let _ = context.peer.notify_logging_message(p).await;
            }
        }
        Forwarded::Sampling { .. } | Forwarded::Elicitation { .. } | Forwarded::Roots { .. } => {}
    }
}
