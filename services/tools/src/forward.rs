//! What an upstream server sends back during one of its tool calls (sampling and
//! elicitation requests, progress and log notifications), carried to the client
//! that made the call.
//!
//! The caller (the `/mcp` gateway) runs [`ToolLayer::call`](crate::ToolLayer::call)
//! inside [`FORWARD`]`.scope(forwarder, …)` and answers what arrives on the
//! receiver from its own task, so that rmcp sends the requests on that call's
//! own stream.
//!
//! # Routing by construction
//!
//! A call that forwards runs on an upstream session of its own: one leased from
//! the server's pool for the length of the call ([`crate::mcp::Upstream`]), never
//! shared with another call while it is held. Whatever that session sends while
//! the call holds it (a request, a log message, progress) is the call's, by
//! construction: there is no id to match and nothing to guess. A stdio server's
//! messages carry no tag naming the call they belong to, and a Streamable HTTP
//! server may send them on its standalone stream; routing by request id or by
//! "the only call in flight" breaks as soon as two clients call one server. A
//! session that has no holder (the server's main session, which lists tools and
//! runs calls that forward nothing, or a pooled one between calls) refuses every
//! request and drops its notifications, as trawl has no user of its own to ask.
//!
//! Sessions are leased per call, not per client session: a client that is
//! connected but idle holds no process, the pool's bound caps concurrent
//! forwarding calls rather than connected clients, and a client's concurrent
//! calls are told apart too. A session goes back to the pool only after its call
//! got its answer; one whose call timed out or was dropped is closed, so that a
//! late message from it cannot reach the next holder.
//!
//! Progress and log notifications are handed over by [`Routed`], the session's
//! transport, as they are read: rmcp runs notification handlers on tasks of
//! their own, which may run after the call's answer has come back and the call
//! has stopped listening. Routed as they are read, they are in the call's
//! channel before its answer is, and the caller passes them on first.

// Sampling and logging are deprecated by MCP 2026-07-28 (SEP-2577) but are part
// of 2025-11-25, which upstreams and clients still speak.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, Implementation, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
    SamplingCapability,
};
use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{ClientHandler, ErrorData, RoleClient};
use tokio::sync::{mpsc, oneshot};

/// One thing an upstream sent during a call.
#[derive(Debug)]
pub enum Forwarded {
    /// `sampling/createMessage`: answer on `reply`.
    Sampling {
        params: CreateMessageRequestParams,
        reply: oneshot::Sender<Result<CreateMessageResult, ErrorData>>,
    },
    /// `elicitation/create`: answer on `reply`.
    Elicitation {
        params: ElicitRequestParams,
        reply: oneshot::Sender<Result<ElicitResult, ErrorData>>,
    },
    /// `roots/list`: answer on `reply`.
    Roots {
        reply: oneshot::Sender<Result<rmcp::model::ListRootsResult, ErrorData>>,
    },
    /// `notifications/progress` (the caller puts its own client's token in).
    Progress(ProgressNotificationParam),
    /// `notifications/message`.
    Log(LoggingMessageNotificationParam),
}

/// Where a call's forwarded messages go, and what its client wants of them.
#[derive(Clone, Debug)]
pub struct Forwarder {
    pub to: mpsc::Sender<Forwarded>,
    /// The least severe log message the client wants (`None`: none). Sent to
    /// the upstream as `logging/setLevel` on the call's session, so that the
    /// server does not produce what nobody reads.
    pub logs: Option<LoggingLevel>,
    /// A 2026-07-28 client's call, passed upstream as one (see [`Relay`]).
    pub relay: Option<Relay>,
}

/// A 2026-07-28 client's call passed upstream as a 2026-07-28 request: the
/// client's protocol version and declared capabilities in its `_meta`, and the
/// input (`inputResponses`, the upstream's own `requestState`) it answers an
/// earlier `InputRequiredResult` with. An upstream that speaks 2026-07-28 then
/// asks for input by answering `InputRequiredResult` itself, which the gateway
/// hands back to the client (SEP-2322, request-scoped: nothing of the call
/// stays behind in trawl or upstream between rounds). An upstream that refuses
/// the version (-32022) is sent plain calls from then on; one that ignores it
/// asks mid-call as before.
#[derive(Clone, Debug, Default)]
pub struct Relay {
    pub meta: rmcp::model::RequestMetaObject,
    pub input_responses: Option<rmcp::model::InputResponses>,
    pub request_state: Option<String>,
}

impl Relay {
    /// Whether the client declared the tasks extension (SEP-2663): its call
    /// may be answered with a task.
    pub fn takes_tasks(&self) -> bool {
        self.meta
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
    }
}

tokio::task_local! {
    /// Set by a caller that can answer what an upstream asks during its calls.
    pub static FORWARD: Forwarder;
}

/// The forwarder of the current task, if its caller set one.
pub(crate) fn current() -> Option<Forwarder> {
    FORWARD.try_with(Clone::clone).ok()
}

/// The call holding an upstream session, if one does: where everything the
/// session sends goes.
#[derive(Clone, Default)]
pub(crate) struct Holder {
    inner: Arc<Mutex<Option<mpsc::Sender<Forwarded>>>>,
}

/// A call's hold on its session, released when dropped: a call that ends in
/// any way (its answer, a timeout, its future dropped) leaves no holder behind.
pub(crate) struct Hold {
    holder: Holder,
}

impl Drop for Hold {
    fn drop(&mut self) {
        *self.holder.slot() = None;
    }
}

impl Holder {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<mpsc::Sender<Forwarded>>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Routes what the session sends to `to` for as long as the returned
    /// [`Hold`] lives. Entered before the call's request goes out: the upstream
    /// may ask or log as soon as it reads it.
    pub(crate) fn hold(&self, to: mpsc::Sender<Forwarded>) -> Hold {
        *self.slot() = Some(to);
        Hold {
            holder: self.clone(),
        }
    }

    /// The holding call's channel, if a call holds the session.
    fn to(&self) -> Option<mpsc::Sender<Forwarded>> {
        self.slot().clone()
    }

    /// The holding call and what to send it, for a progress or log
    /// notification; `None` (and the message untouched) for anything else, or
    /// when no call holds the session.
    fn claim(
        &self,
        msg: &mut Option<RxJsonRpcMessage<RoleClient>>,
    ) -> Option<(mpsc::Sender<Forwarded>, Forwarded)> {
        let Some(JsonRpcMessage::Notification(JsonRpcNotification { notification, .. })) = msg
        else {
            return None;
        };
        if !matches!(
            notification,
            ServerNotification::ProgressNotification(_)
                | ServerNotification::LoggingMessageNotification(_)
        ) {
            return None;
        }
        let to = self.to()?;
        match msg.take() {
            Some(JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ServerNotification::ProgressNotification(n),
                ..
            })) => Some((to, Forwarded::Progress(n.params))),
            Some(JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ServerNotification::LoggingMessageNotification(n),
                ..
            })) => Some((to, Forwarded::Log(n.params))),
            _ => unreachable!("matched as a progress or log notification above"),
        }
    }
}

/// trawl's client side towards an upstream: it declares sampling,
/// elicitation and roots, and forwards them to the call holding the session.
#[derive(Clone)]
pub(crate) struct UpstreamHandler {
    pub(crate) holder: Holder,
    /// Woken by the server's `notifications/tools/list_changed`.
    pub(crate) list_changed: Option<Arc<tokio::sync::Notify>>,
    /// The server is given its callers' roots (see
    /// [`crate::mcp::UpstreamConfig::roots`]).
    pub(crate) roots: bool,
}

fn no_route(what: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "{what}: no client to ask (this call did not come from an MCP client that can answer)"
        ),
        None,
    )
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        #[allow(deprecated)]
        {
            caps.sampling = Some(SamplingCapability::default());
        }
        caps.elicitation = Some(ElicitationCapability::default());
        if self.roots {
            caps.roots = Some(rmcp::model::RootsCapabilities::default());
        }
        ClientConfig::new(
            caps,
            Implementation::new("trawl", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let to = self
            .holder
            .to()
            .ok_or_else(|| no_route("sampling/createMessage"))?;
        let (reply, answer) = oneshot::channel();
        to.send(Forwarded::Sampling { params, reply })
            .await
            .map_err(|_| no_route("sampling/createMessage"))?;
        answer
            .await
            .map_err(|_| no_route("sampling/createMessage"))?
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let to = self
            .holder
            .to()
            .ok_or_else(|| no_route("elicitation/create"))?;
        let (reply, answer) = oneshot::channel();
        to.send(Forwarded::Elicitation { params, reply })
            .await
            .map_err(|_| no_route("elicitation/create"))?;
        answer.await.map_err(|_| no_route("elicitation/create"))?
    }

    /// The roots of the client whose call holds the session, for a server
    /// configured `roots: forward`; refused otherwise, and when no call holds
    /// the session.
    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, ErrorData> {
        if !self.roots {
            return Err(ErrorData::invalid_request(
                "roots/list: trawl does not give its callers' roots to this server (roots: forward \
                 in its configuration would)",
                None,
            ));
        }
        let to = self.holder.to().ok_or_else(|| no_route("roots/list"))?;
        let (reply, answer) = oneshot::channel();
        to.send(Forwarded::Roots { reply })
            .await
            .map_err(|_| no_route("roots/list"))?;
        answer.await.map_err(|_| no_route("roots/list"))?
    }

    /// The server's tools changed: the tool layer lists them again (and pins,
    /// scans and tells its own clients as on any refresh).
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<RoleClient>) {
        if let Some(changed) = &self.list_changed {
            changed.notify_one();
        }
    }
}

/// An upstream session's transport that hands progress and log notifications
/// to the call holding the session as it reads them (see the module doc).
/// What no call holds goes on to rmcp, which drops it.
pub(crate) struct Routed<T> {
    pub(crate) inner: T,
    pub(crate) holder: Holder,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Routed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let mut msg = Some(self.inner.receive().await?);
            match self.holder.claim(&mut msg) {
                // A call that stopped listening (it timed out) misses it.
                Some((to, forwarded)) => {
                    let _ = to.send(forwarded).await;
                }
                None => return msg,
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A hold goes with its call, however the call ends: a call cut short by a
    /// timeout (its future dropped mid-wait) leaves no holder behind.
    #[tokio::test]
    async fn a_hold_is_released_when_its_call_ends_in_any_way() {
        let holder = Holder::default();
        let (to, _rx) = mpsc::channel(1);
        assert!(holder.to().is_none(), "no call holds a fresh session");
        {
            let _hold = holder.hold(to.clone());
            assert!(holder.to().is_some());
        }
        assert!(holder.to().is_none());

        let call = {
            let holder = holder.clone();
            let to = to.clone();
            async move {
                let _hold = holder.hold(to);
                std::future::pending::<()>().await;
            }
        };
        let cut = tokio::time::timeout(std::time::Duration::from_millis(10), call).await;
        assert!(cut.is_err());
        assert!(holder.to().is_none(), "a timed-out call left its hold");
    }
}
